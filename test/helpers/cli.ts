/** Runs the fv-streams CLI as a user would: a child process on Bun or Deno. */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { BuildRecord } from "../../src/index.ts";

export const ROOT = resolve(import.meta.dir, "../..");
export const BUN = join(ROOT, "node_modules/.bin/bun");
export const DENO = join(ROOT, "node_modules/.bin/deno");
const MAIN = join(ROOT, "runtime/cli/main.ts");

export type Runtime = "bun" | "deno";

/** Writes a pipeline file to a fresh temp folder and returns its path. */
export function writePipeline(toml: string): string {
  const dir = mkdtempSync(join(tmpdir(), "fv-test-"));
  const path = join(dir, "pipeline.toml");
  writeFileSync(path, toml);
  return path;
}

export interface CliRun {
  child: ChildProcess;
  /** Every stderr line so far. */
  lines: string[];
  /** Build records (the JSON lines on stderr) so far. */
  records: BuildRecord[];
  /** Resolves with the exit code (or the signal name) once the process ends. */
  exited: Promise<number | string>;
}

export function startCli(args: string[], options: { runtime?: Runtime; env?: Record<string, string> } = {}): CliRun {
  const runtime = options.runtime ?? "bun";
  const command = runtime === "bun" ? [BUN, MAIN, ...args] : [DENO, "run", "-A", MAIN, ...args];
  const child = spawn(command[0]!, command.slice(1), {
    cwd: ROOT,
    env: { ...process.env, STREAM_HEARTBEAT_INTERVAL_MS: "200", STREAM_RECORD_INTERVAL_MS: "500", ...options.env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const run: CliRun = { child, lines: [], records: [], exited: undefined as never };
  let buffer = "";
  child.stderr!.on("data", (chunk: Buffer) => {
    buffer += chunk.toString();
    let nl: number;
    while ((nl = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, nl);
      buffer = buffer.slice(nl + 1);
      run.lines.push(line);
      if (line.startsWith("{")) run.records.push(JSON.parse(line));
    }
  });
  child.stdout!.on("data", (chunk: Buffer) => run.lines.push(...chunk.toString().split("\n").filter(Boolean)));
  run.exited = new Promise((resolveExit) => child.on("exit", (code, signal) => resolveExit(code ?? signal ?? -1)));
  return run;
}

/** Runs the CLI to the end and returns its exit code and output. */
export async function runCli(args: string[], options: { runtime?: Runtime; env?: Record<string, string> } = {}) {
  const run = startCli(args, options);
  const code = await run.exited;
  return { code, lines: run.lines, records: run.records, output: run.lines.join("\n") };
}

export async function waitFor(check: () => boolean | Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

export const lastRecord = (records: BuildRecord[]) => records[records.length - 1];
