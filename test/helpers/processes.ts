/** The processes below a process, from /proc (Linux), whether one still runs, and a port to run one on. */
import { readdirSync, readFileSync } from "node:fs";
import { createServer } from "node:net";

/** Every process below `pid`, children first, then theirs. */
export function descendants(pid: number): number[] {
  const parents = new Map<number, number>();
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      // The command may hold spaces and parentheses: the fields after the last ")" are fixed.
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      parents.set(Number(name), Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]));
    } catch {
      // gone meanwhile
    }
  }
  const found: number[] = [];
  const walk = (parent: number) => {
    for (const [child, ppid] of parents) if (ppid === parent) (found.push(child), walk(child));
  };
  walk(pid);
  return found;
}

/** True while `pid` runs (a zombie waiting for its parent counts as ended). */
export function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) !== "Z";
  } catch {
    return false;
  }
}

/**
 * A TCP port on 127.0.0.1 that is free now and that no outgoing connection will take: one below
 * Linux's ephemeral range (32768 and up), for a server the test stops and starts again on the same
 * port. (A random port from 55000 was taken in CI by an outgoing connection while the test's
 * PostgreSQL was down: the restart failed with "Address already in use".)
 */
export async function stablePort(): Promise<number> {
  for (let tries = 0; ; tries++) {
    const port = 20_000 + Math.floor(Math.random() * 10_000);
    const free = await new Promise<boolean>((resolve) => {
      const server = createServer();
      server.once("error", () => resolve(false));
      server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
    });
    if (free) return port;
    if (tries === 50) throw new Error("no free port between 20000 and 30000 after 50 tries");
  }
}
