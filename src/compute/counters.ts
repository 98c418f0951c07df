/** What a compute step counts; the loop can add them to its build metrics. */

/** Counters of one compute step. */
export interface ComputeCounters {
  /** Batch calls made, bisection calls included. */
  calls: number;
  /** Calls that failed as a whole (and were bisected). */
  failedCalls: number;
  timeouts: number;
  /** Times the plugin host or process was started again. */
  restarts: number;
  /** Rows that came back as poison. */
  poison: number;
}

/** All zero. */
export function newCounters(): ComputeCounters {
  return { calls: 0, failedCalls: 0, timeouts: 0, restarts: 0, poison: 0 };
}
