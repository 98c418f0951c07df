import { FvError, recoveryOf } from "../errors.ts";
import type { OperatorSnapshot } from "../ops/operator.ts";
import { nonJsonPath } from "../ops/state-values.ts";
import { type AsyncCursorStore, type AsyncStateStore, type Cursor, jsonBytes, parseJsonBytes } from "./async-store.ts";

/** One ordered step of a checkpoint, e.g. "state", "offsets", "transaction". */
export interface CheckpointStep {
  name: string;
  run(): Promise<void>;
  /**
   * This step's own deadline instead of the Checkpointer's (Infinity: none, for a step that
   * waits out an outage itself, e.g. a sink whose database is down, and gives up on stop).
   */
  deadlineMs?: number;
}

export interface CheckpointCounters {
  commits: number;
  failures: number;
  timeouts: number;
}

export interface CheckpointerOptions {
  /** Most time one step may take before the checkpoint counts as failed. */
  deadlineMs: number;
  /** Consecutive failed checkpoints after which the circuit opens (a fatal error). */
  maxConsecutiveFailures: number;
}

/**
 * The one place that orders a checkpoint's writes. The loop hands it the steps in the only
 * crash-safe order: state first, offsets last (and, under exactly-once, the transaction commit
 * after both). Each step runs within a deadline; a failure stops the steps after it, so an
 * offset is never committed ahead of the state it depends on. After `maxConsecutiveFailures`
 * failed checkpoints in a row the circuit opens and the checkpoint fails fatally.
 *
 * @example
 * await checkpointer.commit([
 *   { name: "state", run: () => writeChangelog() },
 *   { name: "offsets", run: () => consumer.commit(offsets) },
 * ]);
 */
export class Checkpointer {
  readonly counters: CheckpointCounters = { commits: 0, failures: 0, timeouts: 0 };
  readonly #options: CheckpointerOptions;
  #consecutiveFailures = 0;

  constructor(options: CheckpointerOptions) {
    this.#options = options;
  }

  async commit(steps: CheckpointStep[]): Promise<void> {
    for (const step of steps) {
      try {
        await withDeadline(step.run(), step.deadlineMs ?? this.#options.deadlineMs, step.name);
      } catch (error) {
        this.counters.failures++;
        if (error instanceof FvError && error.context.timeout) this.counters.timeouts++;
        if (++this.#consecutiveFailures >= this.#options.maxConsecutiveFailures && recoveryOf(error) !== "fenced") {
          throw new FvError("CHECKPOINT_CIRCUIT_OPEN", `checkpoint failed ${this.#consecutiveFailures} times in a row (circuit open); last at step "${step.name}": ${(error as Error).message}`, { cause: error });
        }
        throw error;
      }
    }
    this.#consecutiveFailures = 0;
    this.counters.commits++;
  }
}

/**
 * A snapshot and its cursor over the async store contracts (tflo's `Checkpointer::new(state,
 * cursors)`), in the only crash-safe order: the snapshot first, the cursor last. A crash between
 * the two leaves the old cursor with a newer snapshot, which the reader sees as "replay from the
 * old cursor"; a cursor is never ahead of its state. Each step has the deadline, and failures in
 * a row open the circuit (`CHECKPOINT_CIRCUIT_OPEN`). Commits, failures and timeouts are counted
 * (`counters`) and reported to the Metrics given.
 *
 * @example
 * const checkpoints = new StoreCheckpointer(new S3StateStore(client, "bucket", "ck/"), new CursorsIn(store), { deadlineMs: 5000, maxConsecutiveFailures: 3 });
 * await checkpoints.commit("prices/sma/0", op.snapshot(), { "prices/0": "1042" });
 * const saved = await checkpoints.restore("prices/sma/0"); // { snapshot, cursor } or undefined
 */
/** The Metrics events a StoreCheckpointer fires (the engine's `Metrics` has them). */
export interface CheckpointMetrics {
  checkpointCommitted(durationMs: number): void;
  checkpointFailed(kind: "timeout" | "error"): void;
}

export class StoreCheckpointer {
  readonly #checkpointer: Checkpointer;
  readonly #state: AsyncStateStore;
  readonly #cursors: AsyncCursorStore;
  readonly #metrics: CheckpointMetrics | undefined;

  constructor(state: AsyncStateStore, cursors: AsyncCursorStore, options: CheckpointerOptions & { metrics?: CheckpointMetrics }) {
    this.#checkpointer = new Checkpointer(options);
    this.#state = state;
    this.#cursors = cursors;
    this.#metrics = options.metrics;
  }

  /** commits_total, failures_total, timeouts_total. */
  get counters(): Readonly<CheckpointCounters> {
    return this.#checkpointer.counters;
  }

  /** Writes the snapshot under `snapshots/<key>`, then the cursor under `key`. */
  async commit(key: string, snapshot: OperatorSnapshot, cursor: Cursor): Promise<void> {
    const started = performance.now();
    // Checked before anything is written: a snapshot JSON cannot carry (NaN would become null) fails here.
    const bad = nonJsonPath(snapshot);
    if (bad !== undefined) throw new FvError("STATE_CORRUPTED", `cannot save snapshot ${JSON.stringify(key)}: it holds ${bad.what} at ${bad.path || "the top"}, which JSON cannot carry`, { context: { key, path: bad.path } });
    const bytes = jsonBytes(snapshot);
    try {
      await this.#checkpointer.commit([
        { name: "snapshot", run: () => this.#state.put(`snapshots/${key}`, bytes) },
        { name: "cursor", run: () => this.#cursors.saveCursor(key, cursor) },
      ]);
    } catch (error) {
      this.#metrics?.checkpointFailed(error instanceof FvError && error.context.timeout ? "timeout" : "error");
      throw error;
    }
    this.#metrics?.checkpointCommitted(performance.now() - started);
  }

  /** The last committed snapshot and cursor of `key`, or undefined when none was committed. */
  async restore(key: string): Promise<{ snapshot: OperatorSnapshot; cursor: Cursor } | undefined> {
    const cursor = await this.#cursors.loadCursor(key);
    if (cursor === undefined) return undefined;
    const bytes = await this.#state.get(`snapshots/${key}`);
    if (bytes === undefined) throw new FvError("STATE_CORRUPTED", `checkpoint ${JSON.stringify(key)} has a cursor but no snapshot (was snapshots/${key} deleted?)`, { context: { key } });
    let snapshot: unknown;
    try {
      snapshot = parseJsonBytes(bytes, `snapshot ${JSON.stringify(key)}`);
    } catch (error) {
      throw new FvError("STATE_CORRUPTED", (error as Error).message, { cause: error, context: { key } });
    }
    return { snapshot: snapshot as OperatorSnapshot, cursor };
  }
}

function withDeadline<T>(promise: Promise<T>, ms: number, name: string): Promise<T> {
  if (ms === Infinity) return promise;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new FvError("KAFKA_RETRYABLE", `checkpoint step "${name}" took longer than ${ms} ms`, { context: { timeout: true, checkpointStep: name } })),
      ms,
    );
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}
