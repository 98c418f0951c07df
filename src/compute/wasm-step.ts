/**
 * The `wasm` step: a batch of rows through an Extism plugin, off the stream's thread.
 *
 * 1. Rows are cast to the declared input columns and sent in batches of `batchSize` as
 *    `{"rows": [...]}`; the plugin answers `{"results": [...]}`, one entry per row (results.ts).
 * 2. A call that fails for the batch (trap, plugin error, output off the ABI) is bisected down to
 *    the rows that fail alone; those are poison, the rest go on (isolate.ts).
 * 3. Up to CALLS_IN_HOST calls wait in the plugin host, which runs them in order. A call that
 *    outlives `timeoutMs` makes its rows poison ("timeout") and the plugin host is killed and
 *    started again; the calls that waited behind it go to the new one.
 *
 * Plugin state (Extism vars, module globals) is not snapshotted: a restart or a trap starts the
 * plugin afresh.
 */
import { FvError } from "../errors.ts";
import type { Row } from "../expr/index.ts";
import { rowCaster } from "./columns.ts";
import type { ComputeHost } from "./host.ts";
import { type CallOutcome, isolate } from "./isolate.ts";
import type { TransformManifest } from "./manifest.ts";
import { type Isolation, openChannel, type PluginChannel } from "./plugin-channel.ts";
import type { FromPluginHost, PluginOptions } from "./plugin-protocol.ts";
import { type ComputeCounters, newCounters } from "./counters.ts";
import { type ComputeResult, PoisonReasons } from "./results.ts";

/** Chunks of one batch handed to the client at a time (encoded, they queue there and in the plugin host). */
const CHUNKS_IN_FLIGHT = 4;
/**
 * Calls sent to the plugin host before the first of them answers: the host runs them one after
 * another, so the plugin goes on with the next while this thread is busy (decoding the next rows,
 * parsing an answer) instead of waiting for it to send one.
 */
const CALLS_IN_HOST = 8;
/**
 * A call's timer that goes off this much after its time found the thread busy: an answer may be
 * waiting unread. It waits this long again, and times the call out only when it goes off on time.
 */
const LATE_TIMER_MS = 50;
/** A plugin host gets this long to load and compile the module (a Go module takes about a second). */
const START_TIMEOUT_MS = 30_000;

/** A call sent to the plugin host: the first of them runs, the others wait there in order. */
interface Sent {
  call: QueuedCall;
  /** Its timeout, once it runs (it is the first). */
  timer?: ReturnType<typeof setTimeout>;
}

/** A call waiting for the plugin, its input already encoded. */
interface QueuedCall {
  id: number;
  fn: string;
  input: string | { rows: Row[] };
  rows: number;
  timeoutMs: number;
  resolve(outcome: CallOutcome): void;
  reject(error: unknown): void;
}

/** One started plugin host: its channel and what is waiting on it. */
interface Generation {
  channel?: PluginChannel;
  /** Init done: calls may go to it. */
  ready?: boolean;
  /** Calls sent and not answered, in order: the first runs in the plugin now. */
  sent: Sent[];
  onHello?: () => void;
  onInit?: (message: FromPluginHost) => void;
  onStartDeath?: (reason: string) => void;
}

/** Talks to the current plugin host; starts a new one after a timeout or a death. */
export class PluginClient {
  readonly counters: ComputeCounters = newCounters();
  readonly #wasm: Uint8Array;
  readonly #options: PluginOptions;
  readonly #isolation: Isolation;
  readonly #host: ComputeHost;
  readonly #context: Record<string, unknown>;
  #generation: Generation | undefined;
  #ready: Promise<string[]> | undefined;
  /** Calls encoded and waiting to be sent (up to CALLS_IN_HOST wait in the host itself). */
  readonly #queue: QueuedCall[] = [];
  #nextId = 1;
  #closed = false;

  constructor(wasm: Uint8Array, options: PluginOptions, isolation: Isolation, host: ComputeHost, context: Record<string, unknown>) {
    this.#wasm = wasm;
    this.#options = options;
    this.#isolation = isolation;
    this.#host = host;
    this.#context = context;
  }

  get isolation(): Isolation {
    return this.#isolation;
  }

  /** Starts the plugin host (if needed); resolves to the module's exported functions. */
  ready(): Promise<string[]> {
    if (this.#closed) return Promise.reject(new Error("the plugin is closed"));
    this.#ready ??= this.#start();
    return this.#ready;
  }

  #start(): Promise<string[]> {
    const generation: Generation = { sent: [] };
    this.#generation = generation;
    return new Promise<string[]>((resolve, reject) => {
      const timer = setTimeout(() => fail(`the plugin did not start within ${START_TIMEOUT_MS} ms`), START_TIMEOUT_MS);
      const fail = (message: string) => {
        clearTimeout(timer);
        generation.channel?.kill();
        if (this.#generation === generation) this.#ready = undefined;
        reject(new Error(message));
      };
      generation.onStartDeath = fail;
      generation.onHello = () => generation.channel!.send({ type: "init", wasm: this.#wasm, options: this.#options });
      generation.onInit = (message) => {
        clearTimeout(timer);
        generation.onStartDeath = undefined;
        if (message.type === "ready") {
          generation.ready = true;
          resolve(message.exports);
        }
        else fail((message as { message: string }).message);
      };
      try {
        generation.channel = openChannel(this.#isolation, this.#host, {
          onMessage: (message) => this.#onMessage(generation, message),
          onDeath: (reason) => this.#onDeath(generation, reason),
        }, this.#context);
      } catch (error) {
        fail(error instanceof Error ? error.message : String(error));
      }
    });
  }

  #restart(): void {
    this.#generation?.channel?.kill();
    this.#generation = undefined;
    this.#ready = undefined;
    if (this.#closed) return;
    this.counters.restarts++;
    // Start the new host now, so it is warm when the next batch comes; a failure shows there.
    this.ready().catch(() => {});
  }

  #onMessage(generation: Generation, message: FromPluginHost): void {
    if (generation !== this.#generation) return; // from a host that was replaced
    switch (message.type) {
      case "hello":
        generation.onHello?.();
        return;
      case "ready":
      case "init-failed":
        generation.onInit?.(message);
        return;
      case "log":
        this.#host.log(message.level, message.message, this.#context);
        return;
      case "result":
        this.#answered(generation, message.id, () => {
          try {
            return { ok: true, output: message.value !== undefined ? message.value : JSON.parse(message.output ?? "") };
          } catch {
            return { ok: false, reason: PoisonReasons.badOutput, message: "the plugin output is not JSON", divisible: true };
          }
        });
        return;
      case "failed":
        this.#answered(generation, message.id, () => ({ ok: false, reason: message.reason ?? PoisonReasons.pluginError, message: message.message, divisible: true }));
        return;
    }
  }

  #onDeath(generation: Generation, reason: string): void {
    if (generation !== this.#generation) return;
    if (generation.onStartDeath) {
      generation.onStartDeath(reason);
      return;
    }
    const running = this.#takeBack(generation);
    this.#host.log("warn", `${reason}; starting it again`, this.#context);
    this.#restart();
    this.#pump();
    running?.resolve({ ok: false, reason: PoisonReasons.pluginCrash, message: reason, divisible: true });
  }

  /**
   * The first sent call answered: the next one runs now (its timeout starts), more are sent, and
   * then `outcome` is made (a reply parsed) and handed back.
   */
  #answered(generation: Generation, id: number, outcome: () => CallOutcome): void {
    const first = generation.sent[0];
    // The host answers in the order it was sent; anything else is from a call already given up.
    if (!first || first.call.id !== id) return;
    clearTimeout(first.timer);
    generation.sent.shift();
    this.#startTimer(generation);
    this.#pump();
    first.call.resolve(outcome());
  }

  /**
   * The host is going away: its calls that never ran go back to the front of the queue, for the
   * next host; the one that ran is returned.
   */
  #takeBack(generation: Generation): QueuedCall | undefined {
    const [running, ...waiting] = generation.sent.splice(0);
    if (running) clearTimeout(running.timer);
    this.#queue.unshift(...waiting.map((w) => w.call));
    return running?.call;
  }

  /** The first sent call runs in the plugin: its timeout starts now. */
  #startTimer(generation: Generation): void {
    const first = generation.sent[0];
    if (!first || first.timer !== undefined) return;
    const call = first.call;
    const expire = () => {
      if (generation.sent[0] !== first) return;
      this.#takeBack(generation);
      this.counters.timeouts++;
      this.#host.log("warn", `the plugin did not answer within ${call.timeoutMs} ms; starting it again`, { ...this.#context, rows: call.rows });
      if (this.#isolation === "worker") {
        // Measured on Bun 1.4.5 and Deno 2.9.6: terminate() returns, but a thread spinning
        // inside WebAssembly keeps running until the process exits.
        this.#host.log("error", 'a plugin worker was terminated while it ran; on Bun and Deno its thread may keep spinning and burn a core until the process exits. Use isolation = "process" for plugins that can run away', this.#context);
      }
      this.#restart();
      call.resolve({ ok: false, reason: PoisonReasons.timeout, message: `no answer within ${call.timeoutMs} ms (timeoutMs); the plugin was restarted`, divisible: false });
      this.#pump();
    };
    // This thread may have been busy past the deadline (decoding a batch) while the answer waited
    // in the pipe or the worker's port, unread: a timer that goes off late is not a verdict, only
    // one that goes off on time is (then the thread was free to read an answer until just now).
    const arm = (ms: number) => {
      const due = performance.now() + ms;
      first.timer = setTimeout(() => {
        if (generation.sent[0] !== first) return;
        if (performance.now() - due > LATE_TIMER_MS) arm(LATE_TIMER_MS);
        else expire();
      }, ms);
    };
    arm(call.timeoutMs);
  }

  /**
   * One call; never rejects for the plugin's own failures, only when no plugin host can start.
   * Calls queue: the input is encoded at once and sent while fewer than CALLS_IN_HOST wait in the
   * host, which runs them in order, so the plugin is not left idle while this thread encodes and
   * decodes. A call's timeout counts from when the one before it answered (as this thread
   * hears it). A host that dies or times out takes only the call it ran with it: the calls
   * waiting behind it go to the next host.
   */
  async call(fn: string, rows: Row[], timeoutMs: number): Promise<CallOutcome> {
    const id = this.#nextId++;
    this.counters.calls++;
    // A worker gets the JSON text (a cheap string copy); a process gets one JSON line.
    const input = this.#isolation === "worker" ? JSON.stringify({ rows }) : { rows };
    const outcome = await new Promise<CallOutcome>((resolve, reject) => {
      this.#queue.push({ id, fn, input, rows: rows.length, timeoutMs, resolve, reject });
      this.#pump();
    });
    if (!outcome.ok) this.counters.failedCalls++;
    return outcome;
  }

  /** Sends queued calls while the plugin host is ready and holds fewer than CALLS_IN_HOST. */
  #pump(): void {
    if (this.#queue.length === 0) return;
    const generation = this.#generation;
    if (!generation?.ready) {
      // Starting, or starting again: the queue goes on once it is up; if it cannot start, every
      // queued call fails.
      this.ready().then(() => this.#pump(), (error) => {
        const failed = new FvError("HOST_UNAVAILABLE", `the WASM plugin could not be started again: ${error instanceof Error ? error.message : String(error)}`, {
          cause: error,
          context: this.#context,
        });
        for (const queued of this.#queue.splice(0)) queued.reject(failed);
      });
      return;
    }
    while (this.#queue.length > 0 && generation.sent.length < CALLS_IN_HOST) {
      const call = this.#queue.shift()!;
      generation.sent.push({ call });
      generation.channel!.send({ type: "call", id: call.id, fn: call.fn, input: call.input });
    }
    this.#startTimer(generation);
  }

  /** Stops the plugin host; calls not answered yet fail (nobody waits for them any more). */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    const generation = this.#generation;
    const running = generation ? this.#takeBack(generation) : undefined;
    generation?.channel?.kill();
    this.#generation = undefined;
    this.#ready = undefined;
    const closed = new Error("the plugin is closed");
    running?.reject(closed);
    for (const call of this.#queue.splice(0)) call.reject(closed);
  }
}

/** A `wasm` step over a started plugin (see create-step.ts). */
export class WasmStep {
  readonly op = "wasm" as const;
  readonly ref: string;
  readonly batchSize: number;
  readonly manifest: TransformManifest;
  readonly #client: PluginClient;
  readonly #castIn: ((row: Row) => Row) | null;
  readonly #castOut: ((row: Row) => Row) | null;
  #closed = false;

  constructor(ref: string, manifest: TransformManifest, client: PluginClient, batchSize: number) {
    this.ref = ref;
    this.manifest = manifest;
    this.batchSize = batchSize;
    this.#client = client;
    this.#castIn = rowCaster(manifest.inputs[0]?.columns);
    this.#castOut = rowCaster(manifest.outputColumns);
  }

  get counters(): ComputeCounters {
    return this.#client.counters;
  }

  get isolation(): Isolation {
    return this.#client.isolation;
  }

  /**
   * May be called again before the last call settled (`overlaps`): the calls queue in the
   * client in the order they were made, and each settles with its own rows' results.
   */
  readonly overlaps = true;

  async processBatch(rows: Row[]): Promise<ComputeResult[]> {
    if (this.#closed) throw new Error(`wasm step ${this.ref} is closed`);
    const results: ComputeResult[] = [];
    const fn = this.manifest.function;
    const timeoutMs = this.manifest.timeoutMs;
    // Up to CHUNKS_IN_FLIGHT chunks are handed over at a time: they queue in the client, which
    // sends them on to the plugin host (CALLS_IN_HOST), where they run one after another.
    const chunks: Row[][] = [];
    for (let start = 0; start < rows.length; start += this.batchSize) chunks.push(rows.slice(start, start + this.batchSize));
    const outs: ComputeResult[][] = new Array(chunks.length);
    let next = 0;
    const lane = async () => {
      while (next < chunks.length) {
        const i = next++;
        const input = this.#castIn ? chunks[i]!.map(this.#castIn) : chunks[i]!;
        outs[i] = await isolate(input, (part) => this.#client.call(fn, part, timeoutMs), this.#castOut);
      }
    };
    await Promise.all(Array.from({ length: Math.min(CHUNKS_IN_FLIGHT, chunks.length) }, lane));
    for (const out of outs) {
      for (const r of out) if ("poison" in r) this.#client.counters.poison++;
      results.push(...out);
    }
    return results;
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#client.close();
  }
}
