import type { Backoff } from "../async.ts";

/**
 * The loop's clocks. Today's values are the defaults; unit tests pass shorter ones
 * (`new ConsumerLoop(plan, client, log, { timings: { stallRestartMs: 500 } })`).
 */
export interface LoopTimings {
  /**
   * Stall watchdog: no records for this long while an owned partition has records to read (its
   * position is below its end offset) starts a new session with a fresh consumer. The pure-JS
   * client was seen to stop delivering some partitions' records (docs/ARCHITECTURE.md, known issues).
   */
  stallRestartMs: number;
  /**
   * Exactly-once: a partition waiting this long for a stable committed offset waits for a commit no
   * live transaction holds (a transaction ends within its timeout, 15 s, plus the coordinator's
   * abort sweep, 10 s): the member releases its own producer's pending commits.
   */
  heldReleaseMs: number;
  /**
   * With no records coming, stateful tasks still advance this often: partitions turn idle on the
   * wall clock, and the windows their watermark then closes must fire without waiting for a record.
   */
  idleAdvanceMs: number;
  /** How often end offsets are read for the lag shown on /status: cheap, and fresh enough to watch. */
  endOffsetsIntervalMs: number;
  /** The pause before rejoining after a recoverable failure: 0.2 s doubling to 5 s. */
  restartBackoff: Backoff;
  /**
   * Rejoins after recoverable failures (fenced, broker unreachable, aborted transaction) before the
   * loop gives up: with the backoff above that is about two minutes.
   */
  maxConsecutiveRestarts: number;
  /**
   * A static member fenced this many times within `withinMs` by a consumer with its own
   * group.instance.id is not a rejoin across a broker restart but a second process with the same
   * STREAM_INSTANCE_ID: the loop ends with that error instead of taking the id back again. Two
   * such processes fence each other every few seconds; a broker restart fences a member once.
   */
  instanceFencings: { times: number; withinMs: number };
  /** Most time one client of a session may take to close (it leaves the group, flushes, aborts). */
  closeTimeoutMs: number;
  /**
   * Most time the last at-least-once checkpoint of a stop may take (its watermark records, the
   * sends in flight, the state, the offsets). Past it the stop goes on without committing: the
   * partitions' next owners read that work again. (The pure-JS client's idempotent producer
   * retries a send without end; nothing else bounded this wait.)
   */
  finalFlushMs: number;
  /** Retries of a send that failed with a retryable error (at-least-once), and the pause between them. */
  sendRetries: number;
  sendRetryPauseMs: number;
  /** A gap longer than this between the pause detector's 1 s ticks means the process was frozen. */
  pauseMs: number;
}

export const defaultTimings: Readonly<LoopTimings> = {
  stallRestartMs: 15_000,
  heldReleaseMs: 30_000,
  idleAdvanceMs: 500,
  endOffsetsIntervalMs: 2000,
  restartBackoff: { firstMs: 200, maxMs: 5000 },
  maxConsecutiveRestarts: 30,
  instanceFencings: { times: 3, withinMs: 60_000 },
  closeTimeoutMs: 15_000,
  finalFlushMs: 30_000,
  sendRetries: 10,
  sendRetryPauseMs: 500,
  pauseMs: 5000,
};
