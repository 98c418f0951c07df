/**
 * What the engine reports while it runs, as events. An implementation decides where they go:
 * nowhere (`noopMetrics`, the default), into a `MetricsRecorder` (plain data that crosses
 * Worker boundaries and becomes Prometheus text), or any other backend.
 *
 * Durations are milliseconds as `performance.now()` differences (fractions allowed); stage and
 * step are the 0-based indexes of `record.stages` and of the stage's steps.
 *
 * @example
 * const started = performance.now();
 * const out = stage.process(row);
 * metrics.stepLatency(0, 1, "filter", performance.now() - started);
 */
export interface Metrics {
  /** Records read from the input topics. */
  recordsConsumed(count: number): void;
  /** Records written to output topics. */
  recordsEmitted(count: number): void;
  /** Rows a filter removed. */
  recordsDropped(count: number): void;
  /** Poison rows: isolated, counted, dead-lettered when the input has a dead-letter topic. */
  poisonRecords(stage: number, reason: string, count: number): void;
  /** Poison rows written to a dead-letter topic. */
  recordsDeadLettered(count: number): void;
  /** How long one step took, for one row or one batch (the caller picks and keeps to it). */
  stepLatency(stage: number, step: number, op: string, ms: number): void;
  /** Event-time timers (windows, sessions) that fired in one pass. */
  timersFired(stage: number, count: number): void;
  /** A checkpoint (offsets, and state when there is some) was committed, taking this long. */
  checkpointCommitted(durationMs: number): void;
  /** A checkpoint failed: it ran past its deadline (`timeout`) or one of its steps threw (`error`). */
  checkpointFailed(kind: "timeout" | "error"): void;
  /** Records behind the watermark that a window no longer accepts. */
  lateRecordsDropped(stage: number, count: number): void;
  /** A transaction ended (exactly-once mode). */
  transaction(result: "commit" | "abort"): void;
  /** The consumer group rebalanced this member's partitions. */
  rebalanced(): void;
  /** A consumer loop rejoined the group after a recoverable failure (fenced, broker gone, aborted transaction). */
  loopRestarted(): void;
  /** An http step's call ended: its status code, or `timeout` / `error` when no answer came. */
  httpCall(stage: number, step: number, status: string, ms: number): void;
  /** An http step retries a call. */
  httpRetried(stage: number, step: number): void;
}

const nothing = (): void => {};

/** Metrics that go nowhere: the default, so the loop never checks for a missing sink. */
export const noopMetrics: Metrics = Object.freeze({
  recordsConsumed: nothing,
  recordsEmitted: nothing,
  recordsDropped: nothing,
  poisonRecords: nothing,
  recordsDeadLettered: nothing,
  stepLatency: nothing,
  timersFired: nothing,
  checkpointCommitted: nothing,
  checkpointFailed: nothing,
  lateRecordsDropped: nothing,
  transaction: nothing,
  rebalanced: nothing,
  loopRestarted: nothing,
  httpCall: nothing,
  httpRetried: nothing,
});
