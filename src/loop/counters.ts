import type { StreamCounters } from "../control/types.ts";

/** Counters of one consumer loop, plus poison by reason. Plain data, so it crosses Worker boundaries. */
export interface LoopCounters extends StreamCounters {
  poisonByReason: Record<string, number>;
}

export function emptyCounters(): LoopCounters {
  return { consumed: 0, emitted: 0, dropped: 0, poison: 0, deadLettered: 0, commits: 0, poisonByReason: {} };
}

/** Adds `from` into `into`. */
export function addCounters(into: LoopCounters, from: LoopCounters): LoopCounters {
  into.consumed += from.consumed;
  into.emitted += from.emitted;
  into.dropped += from.dropped;
  into.poison += from.poison;
  into.deadLettered += from.deadLettered;
  into.commits += from.commits;
  for (const [reason, n] of Object.entries(from.poisonByReason)) {
    into.poisonByReason[reason] = (into.poisonByReason[reason] ?? 0) + n;
  }
  return into;
}
