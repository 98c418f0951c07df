/**
 * The `container` step: a long-running process that answers newline-delimited JSON batches on
 * stdin/stdout (protocol in functions/README.md). The process is a local command run in the
 * transform's folder, or an image run with `docker run -i --rm` / `podman run -i --rm`.
 *
 * 1. Each batch is one line `{"id": n, "rows": [...]}`; the answer is one line
 *    `{"id": n, "results": [...]}` (results.ts) or `{"id": n, "error": "..."}`.
 * 2. An error answer is bisected down to the rows that fail alone, like a WASM plugin error.
 * 3. No answer within `timeoutMs`: the process is killed, the batch's rows are poison ("timeout").
 * 4. The process dies while it holds a batch: it is started again (with backoff) and the batch is
 *    sent again once; if the process dies on it again the batch is bisected, and a row that kills
 *    the process on its own is poison ("container_crash"). No row is lost either way.
 * 5. stderr goes to the host's logger, line by line.
 */
import { backoffMs, delay, SerialQueue } from "../async.ts";
import { FvError } from "../errors.ts";
import type { Row } from "../expr/index.ts";
import { rowCaster } from "./columns.ts";
import type { ChildProcessLike, ComputeHost } from "./host.ts";
import { type CallOutcome, isolate } from "./isolate.ts";
import { LineWriter, readLines } from "./lines.ts";
import type { TransformManifest } from "./manifest.ts";
import { type ComputeResult, PoisonReasons } from "./results.ts";
import { type ComputeCounters, newCounters } from "./counters.ts";

/** First restart delay after a crash: long enough not to spin on a process that dies at once. */
const BACKOFF_START_MS = 100;
/** Restart delays double up to this; a healthy batch resets them. */
const BACKOFF_MAX_MS = 5_000;

/** The command line that runs a container transform. */
export function containerCommand(manifest: TransformManifest, engine: string | undefined): string[] {
  if (manifest.image === undefined) return [...manifest.command!];
  const args = [engine ?? manifest.engine ?? "docker", "run", "-i", "--rm"];
  // Host access is none by default: no network unless hosts are allowed, only the listed folders.
  if (manifest.allowedHosts.length === 0) args.push("--network", "none");
  for (const [guest, hostDir] of Object.entries(manifest.allowedPaths)) args.push("-v", `${hostDir}:${guest}`);
  for (const [key, value] of Object.entries(manifest.env)) args.push("-e", `${key}=${value}`);
  for (const [key, value] of Object.entries(manifest.config)) args.push("-e", `FV_CONFIG_${key}=${value}`);
  args.push(manifest.image);
  if (manifest.command) args.push(...manifest.command);
  return args;
}

interface Answer {
  id?: unknown;
  results?: unknown;
  error?: unknown;
}

/** One running process and the batch it holds. */
interface Running {
  child: ChildProcessLike;
  writer: LineWriter;
  pending?: { id: number; settle(outcome: CallOutcome | "crash"): void };
  exited: boolean;
  crash?: string;
}

export class ContainerStep {
  readonly op = "container" as const;
  readonly ref: string;
  readonly batchSize: number;
  readonly manifest: TransformManifest;
  readonly counters: ComputeCounters = newCounters();
  readonly #command: string[];
  readonly #host: ComputeHost;
  readonly #context: Record<string, unknown>;
  readonly #castIn: ((row: Row) => Row) | null;
  readonly #castOut: ((row: Row) => Row) | null;
  #running: Running | undefined;
  /** Restarts since the last healthy batch: the first one waits nothing, then the backoff grows. */
  #restartsInRow = 0;
  #nextId = 1;
  #closed = false;
  readonly #batches = new SerialQueue();

  constructor(ref: string, manifest: TransformManifest, command: string[], host: ComputeHost, context: Record<string, unknown>) {
    this.ref = ref;
    this.manifest = manifest;
    this.batchSize = manifest.batchSize;
    this.#command = command;
    this.#host = host;
    this.#context = context;
    this.#castIn = rowCaster(manifest.inputs[0]?.columns);
    this.#castOut = rowCaster(manifest.outputColumns);
  }

  /** The command line it runs. */
  get command(): readonly string[] {
    return this.#command;
  }

  /** The pid of the current process, if one runs. */
  get pid(): number | undefined {
    return this.#running && !this.#running.exited ? this.#running.child.pid : undefined;
  }

  /** Starts the process; rejects when it cannot start (command not found). */
  async start(): Promise<void> {
    const child = this.#host.spawn(this.#command, { cwd: this.manifest.image ? undefined : this.manifest.dir, env: this.manifest.env as Record<string, string> });
    const running: Running = { child, writer: new LineWriter(child.stdin), exited: false };
    this.#running = running;
    void readLines(child.stdout, (line) => this.#onLine(running, line));
    void readLines(child.stderr, (line) => this.#host.log("info", line, { ...this.#context, stream: "stderr", pid: child.pid }));
    void child.exited.then((exit) => {
      running.exited = true;
      running.crash = `the process exited (code ${exit.code}, signal ${exit.signal})`;
      if (!this.#closed) this.#host.log("warn", `container transform ${running.crash}`, { ...this.#context, pid: child.pid });
      running.pending?.settle("crash");
    });
    await child.started;
  }

  #onLine(running: Running, line: string): void {
    if (line.trim().length === 0) return;
    let answer: Answer;
    try {
      answer = JSON.parse(line) as Answer;
    } catch {
      this.#host.log("warn", `container transform wrote a line that is not JSON: ${line.slice(0, 200)}`, this.#context);
      return;
    }
    const pending = running.pending;
    if (!pending || answer.id !== pending.id) {
      this.#host.log("warn", `container transform answered batch ${JSON.stringify(answer.id)}, which it does not hold; ignored`, this.#context);
      return;
    }
    if (typeof answer.error === "string") pending.settle({ ok: false, reason: PoisonReasons.pluginError, message: answer.error, divisible: true });
    else pending.settle({ ok: true, output: answer });
  }

  /** A running process, started again (after the backoff delay) when the last one died. */
  async #ensureRunning(): Promise<Running> {
    if (this.#running && !this.#running.exited) return this.#running;
    if (this.#restartsInRow > 0) await delay(backoffMs(this.#restartsInRow, { firstMs: BACKOFF_START_MS, maxMs: BACKOFF_MAX_MS }));
    this.#restartsInRow++;
    this.counters.restarts++;
    try {
      await this.start();
    } catch (error) {
      throw new FvError("HOST_UNAVAILABLE", `container transform could not be started again: ${error instanceof Error ? error.message : String(error)}`, {
        cause: error,
        context: this.#context,
      });
    }
    return this.#running!;
  }

  async #call(rows: Row[]): Promise<CallOutcome | "crash"> {
    const running = await this.#ensureRunning();
    const id = this.#nextId++;
    this.counters.calls++;
    const timeoutMs = this.manifest.timeoutMs;
    const outcome = await new Promise<CallOutcome | "crash">((resolve) => {
      const timer = setTimeout(() => {
        running.pending = undefined;
        this.counters.timeouts++;
        this.#host.log("warn", `container transform did not answer within ${timeoutMs} ms; killing it`, { ...this.#context, pid: running.child.pid });
        running.exited = true; // now, not when the exit event comes: the next batch needs a new process
        running.child.kill("SIGKILL");
        resolve({ ok: false, reason: PoisonReasons.timeout, message: `no answer within ${timeoutMs} ms (timeoutMs); the process was killed`, divisible: false });
      }, timeoutMs);
      running.pending = {
        id,
        settle: (outcome) => {
          clearTimeout(timer);
          running.pending = undefined;
          resolve(outcome);
        },
      };
      if (running.exited) running.pending.settle("crash");
      else running.writer.write(JSON.stringify({ id, rows }));
    });
    if (outcome === "crash" || !outcome.ok) this.counters.failedCalls++;
    else this.#restartsInRow = 0;
    return outcome;
  }

  /** A call for bisection: a crash there counts against the rows. */
  async #callOnce(rows: Row[]): Promise<CallOutcome> {
    const outcome = await this.#call(rows);
    if (outcome !== "crash") return outcome;
    return { ok: false, reason: PoisonReasons.containerCrash, message: this.#running?.crash ?? "the process died", divisible: true };
  }

  processBatch(rows: Row[]): Promise<ComputeResult[]> {
    return this.#batches.run(() => this.#process(rows));
  }

  async #process(rows: Row[]): Promise<ComputeResult[]> {
    if (this.#closed) throw new Error(`container step ${this.ref} is closed`);
    const results: ComputeResult[] = [];
    for (let start = 0; start < rows.length; start += this.batchSize) {
      const chunk = rows.slice(start, start + this.batchSize);
      const input = this.#castIn ? chunk.map(this.#castIn) : chunk;
      // A death may not be the batch's fault (the process was killed from outside): send the whole
      // batch once more before bisecting.
      let first = await this.#call(input);
      if (first === "crash") first = await this.#callOnce(input);
      const out = await isolate(input, (part) => this.#callOnce(part), this.#castOut, first);
      for (const r of out) if ("poison" in r) this.counters.poison++;
      results.push(...out);
    }
    return results;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const running = this.#running;
    this.#running = undefined;
    if (!running || running.exited) return;
    running.writer.close(); // end of input: a well-behaved process exits
    const exited = await Promise.race([running.child.exited.then(() => true), delay(1000).then(() => false)]);
    if (!exited) running.child.kill("SIGKILL");
  }
}
