/**
 * The CLI processes of the soak: per pipeline, slots 1..3 (and 4 while a scale-out runs), each
 * slot one process at a time with a stable STREAM_INSTANCE_ID, so a restart fences its
 * predecessor. Every process's stdout and stderr go to its own log file; stderr is parsed on the
 * fly for build records (the last one of each process is kept for its counters) and log lines
 * (`assignment changed` counts rebalances; error lines are kept).
 *
 * A process that exits without the soak having signalled it is "exited by itself": counted, with
 * its exit code and last error line, and started again in its slot 2 s later.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { createWriteStream, type WriteStream } from "node:fs";
import { join } from "node:path";
import { ROOT } from "./kafka.ts";
import { clock, elapsed, say, sleep, track, within } from "./util.ts";

export type Runtime = "bun" | "deno" | "node";

/** The counters of one process's last build record (names from src/control/types.ts BuildMetrics). */
export const COUNTERS = [
  "consumed", "emitted", "dropped", "poison", "deadLettered", "commits", "transactionsCommitted", "transactionsAborted",
  "checkpointFailures", "checkpointTimeouts", "restarts", "stallRestarts", "late", "restoredRecords", "restoreMs",
] as const;
export type Counter = (typeof COUNTERS)[number];

/** One started process (a slot holds a sequence of them). */
export interface Proc {
  pipeline: string;
  slot: number;
  /** The how-many-th process of this slot, from 0. */
  run: number;
  name: string;
  child: ChildProcess;
  logFile: string;
  startedAt: number;
  /** Set when the soak sends the signal that ends it (SIGKILL, SIGTERM). */
  expectedExit: boolean;
  exit?: { code: number | null; signal: string | null; at: number };
  exited: Promise<void>;
  /** The latest build record's metrics, status and error. */
  metrics?: Record<string, unknown>;
  status?: string;
  recordError?: string;
  kafkaClient?: string;
  rebalances: number;
  lastError?: string;
  /** The last log line of any level. */
  lastLog?: string;
  /** The last stderr line that is neither a log line nor a build record (a runtime's crash report). */
  lastText?: string;
  /** Level + message of every warn and error line, for the summary of what the engine said. */
  warnings: string[];
}

export interface SelfExit {
  name: string;
  at: number;
  code: number | null;
  signal: string | null;
  lastError: string;
  status?: string;
}

export interface FleetOptions {
  runtime: Runtime;
  kafkaClient?: string;
  exactlyOnce: boolean;
  brokers: string;
  logDir: string;
  /** Pipeline name -> pipeline file. */
  files: Record<string, string>;
}

/** Same rule as runtime/logging.ts `classifyStderrLine` (kept here so the soak imports nothing of the engine). */
function classify(line: string): { kind: "log" | "record" | "text"; value?: Record<string, unknown> } {
  if (!line.startsWith("{")) return { kind: "text" };
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch {
    return { kind: "text" };
  }
  if (!value || typeof value !== "object") return { kind: "text" };
  const o = value as Record<string, unknown>;
  if (typeof o.msg === "string" && typeof o.level === "string") return { kind: "log", value: o };
  if (o.kind === "stream" && typeof o.status === "string") return { kind: "record", value: o };
  return { kind: "text" };
}

/** What a process said last about a failure: its last error log line (else its build record's error, else its last warning), and its last plain stderr line. */
function lastWords(proc: Proc): string {
  const logged = proc.lastError ?? proc.recordError ?? proc.warnings.at(-1) ?? "(no error log line)";
  return proc.lastText ? `${logged}; last plain stderr line: ${proc.lastText}` : logged;
}

export class Fleet {
  readonly procs: Proc[] = [];
  readonly selfExits: SelfExit[] = [];
  /** Slots that should have a process ("pipeline/slot"); a self-exit restarts only these. */
  readonly #wanted = new Set<string>();
  readonly #current = new Map<string, Proc>();
  #stopping = false;

  constructor(readonly options: FleetOptions) {}

  #command(file: string): string[] {
    const bin = (name: string) => join(ROOT, "node_modules/.bin", name);
    switch (this.options.runtime) {
      case "bun":
        return [bin("bun"), "runtime/cli/main.ts", "run", file];
      case "deno":
        return [bin("deno"), "run", "-A", "runtime/cli/main.ts", "run", file];
      case "node":
        return [bin("node"), "dist/runtime/cli/main.js", "run", file];
    }
  }

  /** Starts a process in `slot` of `pipeline` (marking the slot wanted). */
  start(pipeline: string, slot: number): Proc {
    const key = `${pipeline}/${slot}`;
    this.#wanted.add(key);
    const run = this.procs.filter((p) => p.pipeline === pipeline && p.slot === slot).length;
    const name = `${pipeline}-${slot}${run ? `#${run}` : ""}`;
    const logFile = join(this.options.logDir, `${pipeline}-${slot}.${run}.log`);
    const env: NodeJS.ProcessEnv = {};
    // The soak's own STREAM_* settings never leak into the processes: only those below.
    for (const [k, v] of Object.entries(process.env)) if (!k.startsWith("STREAM_")) env[k] = v;
    Object.assign(env, {
      STREAM_BROKERS: this.options.brokers,
      STREAM_EXACTLY_ONCE: String(this.options.exactlyOnce),
      STREAM_INSTANCE_ID: `soak-${pipeline}-${slot}`,
      STREAM_ADMIN_ADDR: "127.0.0.1:0",
      STREAM_RECORD_INTERVAL_MS: "1000",
      STREAM_LOG_FORMAT: "json",
      // Local state stores of this soak only (shared by its processes, as on one host): the default
      // .fv-state/<pipeline> kept the last soak's, which its fresh broker's state topics do not know.
      STREAM_STATE_DIR: join(this.options.logDir, `state-${pipeline}`),
      ...(this.options.kafkaClient ? { STREAM_KAFKA_CLIENT: this.options.kafkaClient } : {}),
    });
    const [cmd, ...args] = this.#command(this.options.files[pipeline]!);
    const child = track(spawn(cmd!, args, { cwd: ROOT, env, stdio: ["ignore", "pipe", "pipe"], detached: true }));
    const log: WriteStream = createWriteStream(logFile);
    log.write(`# ${name} started at soak ${clock()} (${new Date().toISOString()}): ${[cmd, ...args].join(" ")}\n`);
    const proc: Proc = {
      pipeline, slot, run, name, child, logFile, startedAt: elapsed(), expectedExit: false, rebalances: 0, warnings: [],
      exited: undefined as never,
    };
    let buffer = "";
    child.stderr!.on("data", (chunk: Buffer) => {
      log.write(chunk);
      buffer += chunk.toString();
      let nl: number;
      while ((nl = buffer.indexOf("\n")) >= 0) {
        this.#line(proc, buffer.slice(0, nl));
        buffer = buffer.slice(nl + 1);
      }
    });
    child.stdout!.on("data", (chunk: Buffer) => log.write(chunk));
    proc.exited = new Promise((resolveExit) => {
      child.on("exit", (code, signal) => {
        proc.exit = { code, signal, at: elapsed() };
        log.end(`# ${name} exited at soak ${clock()}: code ${code} signal ${signal}${proc.expectedExit ? "" : " (not asked to)"}\n`);
        if (this.#current.get(key) === proc) this.#current.delete(key);
        if (!proc.expectedExit) this.#selfExit(proc, key);
        resolveExit();
      });
    });
    this.procs.push(proc);
    this.#current.set(key, proc);
    return proc;
  }

  #line(proc: Proc, line: string): void {
    const { kind, value } = classify(line);
    if (kind === "record") {
      proc.status = String(value!.status);
      if (value!.metrics) proc.metrics = value!.metrics as Record<string, unknown>;
      if (typeof value!.error === "string") proc.recordError = value!.error;
      const client = (value!.metrics as { kafkaClient?: string } | undefined)?.kafkaClient;
      if (client) proc.kafkaClient = client;
    } else if (kind === "text") {
      // eslint-disable-next-line no-control-regex
      const text = line.replace(/\x1b\[[0-9;]*m/g, "").trim();
      if (text) proc.lastText = text;
    } else if (kind === "log") {
      const msg = String(value!.msg);
      proc.lastLog = `${value!.level} ${msg}`;
      if (msg === "assignment changed") proc.rebalances++;
      if (value!.level === "error") proc.lastError = msg;
      if (value!.level === "warn" || value!.level === "error") proc.warnings.push(`${value!.level} ${msg}`);
    }
  }

  #selfExit(proc: Proc, key: string): void {
    const lastError = lastWords(proc);
    this.selfExits.push({ name: proc.name, at: proc.exit!.at, code: proc.exit!.code, signal: proc.exit!.signal, lastError, status: proc.status });
    say(`!! ${proc.name} exited by itself (code ${proc.exit!.code}, signal ${proc.exit!.signal}): ${lastError.slice(0, 300)}`);
    if (this.#stopping || !this.#wanted.has(key)) return;
    void sleep(2000).then(() => {
      if (this.#stopping || !this.#wanted.has(key) || this.#current.has(key)) return;
      say(`   restarting ${proc.pipeline} slot ${proc.slot}`);
      this.start(proc.pipeline, proc.slot);
    });
  }

  /** The live process of a slot, if any. */
  current(pipeline: string, slot: number): Proc | undefined {
    return this.#current.get(`${pipeline}/${slot}`);
  }

  live(): Proc[] {
    return [...this.#current.values()].filter((p) => !p.exit);
  }

  /** Sends `signal` to a process the soak means to end (its exit is not a self-exit). */
  signal(proc: Proc, signal: NodeJS.Signals): void {
    if (signal === "SIGKILL" || signal === "SIGTERM" || signal === "SIGINT") proc.expectedExit = true;
    if (!proc.exit) {
      try {
        proc.child.kill(signal);
      } catch {
        // gone meanwhile
      }
    }
  }

  /** Stops a slot for good: unwanted, SIGTERM, wait up to `timeoutMs` (then SIGKILL). Returns how it ended. */
  async stopSlot(pipeline: string, slot: number, timeoutMs = 60_000): Promise<{ proc?: Proc; ok: boolean; why: string }> {
    const key = `${pipeline}/${slot}`;
    this.#wanted.delete(key);
    const proc = this.#current.get(key);
    if (!proc) return { ok: true, why: "no process" };
    this.signal(proc, "SIGCONT");
    this.signal(proc, "SIGTERM");
    const ended = await within(proc.exited.then(() => true), timeoutMs, false);
    if (!ended) {
      this.signal(proc, "SIGKILL");
      await proc.exited;
      return { proc, ok: false, why: `did not exit within ${timeoutMs / 1000} s of SIGTERM (killed); its last log line: ${proc.lastLog ?? "(none)"}` };
    }
    const { code, signal } = proc.exit!;
    if (code === 0) return { proc, ok: true, why: "exit 0" };
    return { proc, ok: false, why: `exit code ${code} signal ${signal}: ${lastWords(proc)}` };
  }

  /** No more restarts from here on (the end of the soak). */
  stopping(): void {
    this.#stopping = true;
  }

  /** Sum of a counter over every process's last build record. */
  sum(counter: Counter, pipeline?: string): number {
    return this.procs.filter((p) => !pipeline || p.pipeline === pipeline).reduce((s, p) => s + (Number(p.metrics?.[counter]) || 0), 0);
  }

  rebalances(pipeline?: string): number {
    return this.procs.filter((p) => !pipeline || p.pipeline === pipeline).reduce((s, p) => s + p.rebalances, 0);
  }

  /** Total lag the live processes report for their owned partitions (build records). */
  reportedLag(pipeline: string): number {
    let lag = 0;
    for (const p of this.live()) {
      if (p.pipeline !== pipeline) continue;
      const parts = (p.metrics?.partitions ?? []) as Array<{ lag?: number }>;
      for (const part of parts) lag += part.lag ?? 0;
    }
    return lag;
  }
}
