/**
 * Small pieces the soak's modules share: the seeded RNG, the clock, and the registry of every
 * child process the soak started, so that all of them die with it (exit, Ctrl-C, exception).
 */
import type { ChildProcess } from "node:child_process";
import { mulberry32 } from "../random.ts";


export class Rng {
  readonly #next: () => number;
  constructor(seed: number) {
    this.#next = mulberry32(seed);
  }
  float(): number {
    return this.#next();
  }
  /** An integer in [min, max]. */
  int(min: number, max: number): number {
    return min + Math.floor(this.#next() * (max - min + 1));
  }
  /** A number in [min, max). */
  between(min: number, max: number): number {
    return min + this.#next() * (max - min);
  }
  pick<T>(items: readonly T[]): T {
    return items[Math.floor(this.#next() * items.length)]!;
  }
  shuffle<T>(items: readonly T[]): T[] {
    const out = [...items];
    for (let i = out.length - 1; i > 0; i--) {
      const j = Math.floor(this.#next() * (i + 1));
      [out[i], out[j]] = [out[j]!, out[i]!];
    }
    return out;
  }
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, Math.max(0, ms)));

/** Milliseconds since the soak started, and the same as "m:ss.s" for logs. */
const T0 = Date.now();
export const elapsed = () => Date.now() - T0;
export function clock(ms = elapsed()): string {
  const s = ms / 1000;
  return `${Math.floor(s / 60)}:${(s % 60).toFixed(1).padStart(4, "0")}`;
}
export const say = (message: string) => console.log(`[soak ${clock()}] ${message}`);

/** Every child the soak started and has not seen exit; the exit handler SIGKILLs what is left. */
export const children = new Set<ChildProcess>();

export function track(child: ChildProcess): ChildProcess {
  children.add(child);
  child.once("exit", () => children.delete(child));
  return child;
}

/** SIGKILL every child still alive (synchronous: usable in an `exit` handler). */
export function killAllChildren(): number {
  let n = 0;
  for (const child of children) {
    if (child.exitCode === null && child.signalCode === null) {
      try {
        // A detached child leads its own process group: kill the group (a shell's java, etc.).
        if (child.pid) process.kill(-child.pid, "SIGKILL");
      } catch {
        try {
          child.kill("SIGKILL");
        } catch {
          // already gone
        }
      }
      n++;
    }
  }
  children.clear();
  return n;
}

/** Resolves with `value` when the promise does not settle within `ms`. */
export async function within<T, U>(promise: Promise<T>, ms: number, value: U): Promise<T | U> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<U>((resolve) => (timer = setTimeout(() => resolve(value), ms)));
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
