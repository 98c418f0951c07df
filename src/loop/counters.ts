import type { StreamCounters } from "../control/types.ts";

/** Counters of one consumer loop, plus poison by reason. Plain data, so it crosses Worker boundaries. */
export interface LoopCounters extends StreamCounters {
  poisonByReason: Record<string, number>;
  /** Transactions committed and aborted (exactly-once). */
  transactionsCommitted: number;
  transactionsAborted: number;
  /** Failed checkpoints, and those of them that ran past the deadline. */
  checkpointFailures: number;
  checkpointTimeouts: number;
  /** Times the loop rejoined after a recoverable failure (fenced, broker gone, aborted transaction). */
  restarts: number;
}

export function emptyCounters(): LoopCounters {
  return {
    consumed: 0, emitted: 0, dropped: 0, poison: 0, deadLettered: 0, commits: 0, poisonByReason: {},
    transactionsCommitted: 0, transactionsAborted: 0, checkpointFailures: 0, checkpointTimeouts: 0, restarts: 0,
  };
}

/** Adds `from` into `into`. */
export function addCounters(into: LoopCounters, from: LoopCounters): LoopCounters {
  into.consumed += from.consumed;
  into.emitted += from.emitted;
  into.dropped += from.dropped;
  into.poison += from.poison;
  into.deadLettered += from.deadLettered;
  into.commits += from.commits;
  into.transactionsCommitted += from.transactionsCommitted;
  into.transactionsAborted += from.transactionsAborted;
  into.checkpointFailures += from.checkpointFailures;
  into.checkpointTimeouts += from.checkpointTimeouts;
  into.restarts += from.restarts;
  for (const [reason, n] of Object.entries(from.poisonByReason)) {
    into.poisonByReason[reason] = (into.poisonByReason[reason] ?? 0) + n;
  }
  return into;
}
