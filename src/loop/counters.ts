import type { BuildMetrics } from "../control/types.ts";

/**
 * Counters of one consumer loop: the build record's metrics less what only the stream knows.
 * Plain data, so it crosses Worker boundaries; the loops' counters add up to the build's.
 */
export type LoopCounters = Omit<BuildMetrics, "consumers" | "partitions" | "standbyPartitions" | "recordsPerSecond" | "restoreRecordsPerSecond" | "guarantee" | "kafkaClient">;

export function emptyCounters(): LoopCounters {
  return {
    consumed: 0, emitted: 0, dropped: 0, poison: 0, deadLettered: 0, commits: 0, poisonByReason: {},
    transactionsCommitted: 0, transactionsAborted: 0, checkpointFailures: 0, checkpointTimeouts: 0, restarts: 0, stallRestarts: 0,
    late: 0, repartitioned: 0, restoredRecords: 0, restoredFromStore: 0, restoreMs: 0, stateKeys: 0, stateBytes: 0,
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
  into.stallRestarts += from.stallRestarts;
  if (from.transactionsFenced) into.transactionsFenced = (into.transactionsFenced ?? 0) + from.transactionsFenced;
  for (const field of ["httpCalls", "httpRetries", "httpInFlight", "httpBreakersOpen", "sinkWritten", "sinkDuplicates"] as const) {
    if (from[field] !== undefined) into[field] = (into[field] ?? 0) + from[field];
  }
  if (from.sinksWaiting !== undefined) into.sinksWaiting = { ...into.sinksWaiting, ...from.sinksWaiting };
  into.late += from.late;
  into.repartitioned += from.repartitioned;
  into.restoredRecords += from.restoredRecords;
  into.restoredFromStore += from.restoredFromStore;
  into.restoreMs += from.restoreMs;
  into.stateKeys += from.stateKeys;
  into.stateBytes += from.stateBytes;
  for (const [reason, n] of Object.entries(from.poisonByReason)) {
    into.poisonByReason[reason] = (into.poisonByReason[reason] ?? 0) + n;
  }
  return into;
}
