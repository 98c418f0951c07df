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
 * cursors)`), in the only crash-safe order: the snapshot first, the cursor last. Each snapshot
 * goes under a key of its own (`snapshots/<key>/<id>`) and the cursor names it (`@snapshot`), so
 * a crash between the two leaves the old cursor with the old snapshot it names: a reader never
 * gets a snapshot with a cursor from before it (which would replay records the snapshot already
 * holds). Older snapshots are deleted once the cursor names the new one (but the one before it:
 * a cursor write that timed out may land late and name it). Each step has the deadline, and failures in
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

/** The cursor field that names its snapshot. */
const SNAPSHOT_FIELD = "@snapshot";

export class StoreCheckpointer {
  readonly #checkpointer: Checkpointer;
  readonly #state: AsyncStateStore;
  readonly #cursors: AsyncCursorStore;
  readonly #metrics: CheckpointMetrics | undefined;
  /** Snapshots this checkpointer wrote (part of each snapshot's id). */
  #written = 0;
  /**
   * The snapshot each key's last commit named: kept through the next commit too, since a cursor
   * write that timed out may still land after it and name that one.
   */
  readonly #previous = new Map<string, string>();

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

  /** Writes the snapshot under `snapshots/<key>/<id>`, then the cursor (naming it) under `key`. */
  async commit(key: string, snapshot: OperatorSnapshot, cursor: Cursor): Promise<void> {
    if (Object.hasOwn(cursor, SNAPSHOT_FIELD)) throw new TypeError(`a cursor may not have the field ${SNAPSHOT_FIELD}: the checkpointer keeps the snapshot's id there`);
    const started = performance.now();
    // Checked before anything is written: a snapshot JSON cannot carry (NaN would become null) fails here.
    const bad = nonJsonPath(snapshot);
    if (bad !== undefined) throw new FvError("STATE_CORRUPTED", `cannot save snapshot ${JSON.stringify(key)}: it holds ${bad.what} at ${bad.path || "the top"}, which JSON cannot carry`, { context: { key, path: bad.path } });
    const bytes = jsonBytes(snapshot);
    const id = `${Date.now().toString(36).padStart(9, "0")}-${(++this.#written).toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
    const timeouts = this.#checkpointer.counters.timeouts;
    try {
      await this.#checkpointer.commit([
        { name: "snapshot", run: () => this.#state.put(`snapshots/${key}/${id}`, bytes) },
        { name: "cursor", run: () => this.#cursors.saveCursor(key, { ...cursor, [SNAPSHOT_FIELD]: id }) },
      ]);
    } catch (error) {
      // (Counted, not read from the error: the one that opens the circuit wraps the last failure.)
      this.#metrics?.checkpointFailed(this.#checkpointer.counters.timeouts > timeouts ? "timeout" : "error");
      throw error;
    }
    this.#metrics?.checkpointCommitted(performance.now() - started);
    // Snapshots no cursor names any more (older ones, or one a crash left before its cursor); only
    // this key's own (the listing by prefix also holds those of keys below it, "a/b" for "a"). Best
    // effort: the checkpoint is committed, and what stays is deleted by a later commit.
    const prefix = `snapshots/${key}/`;
    const keep = new Set([prefix + id, prefix + (this.#previous.get(key) ?? id)]);
    this.#previous.set(key, id);
    try {
      for (const old of await this.#state.list(prefix)) if (!keep.has(old) && !old.slice(prefix.length).includes("/")) await this.#state.delete(old);
    } catch {
      // left for the next commit
    }
  }

  /** The last committed snapshot and cursor of `key`, or undefined when none was committed. */
  async restore(key: string): Promise<{ snapshot: OperatorSnapshot; cursor: Cursor } | undefined> {
    const saved = await this.#cursors.loadCursor(key);
    if (saved === undefined) return undefined;
    const { [SNAPSHOT_FIELD]: id, ...cursor } = saved;
    if (id === undefined) throw new FvError("STATE_CORRUPTED", `checkpoint ${JSON.stringify(key)}: its cursor names no snapshot (${SNAPSHOT_FIELD})`, { context: { key } });
    const bytes = await this.#state.get(`snapshots/${key}/${id}`);
    if (bytes === undefined) throw new FvError("STATE_CORRUPTED", `checkpoint ${JSON.stringify(key)} has a cursor but not the snapshot it names (was snapshots/${key}/${id} deleted?)`, { context: { key } });
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
