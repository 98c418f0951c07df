/**
 * Small async helpers, written once (in the style of deno std's `async/`): a pause, a deadline,
 * an exponential backoff, a retry with backoff and a serial queue. Web-standard timers only.
 */

/**
 * Resolves after `ms` milliseconds; rejects with the signal's reason as soon as it aborts.
 *
 * @example
 * await delay(200);
 * await delay(60_000, stop.signal); // rejects when stop.abort() is called
 */
export function delay(ms: number, signal?: AbortSignal): Promise<void> {
  if (signal?.aborted) return Promise.reject(signal.reason);
  return new Promise((resolve, reject) => {
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** The rejection of `deadline` when the promise did not settle in time (unless it names its own). */
export class DeadlineError extends Error {
  constructor(ms: number) {
    super(`did not settle within ${ms} ms`);
    this.name = "DeadlineError";
  }
}

/**
 * The promise, or a rejection once `ms` pass first: `timeoutError()` (or an Error with that
 * message) if given, else a
 * DeadlineError. The promise itself is not cancelled; its timer is cleared either way.
 *
 * @example
 * await deadline(consumer.close(), 15_000);
 */
export function deadline<T>(promise: Promise<T>, ms: number, timeoutError: string | (() => unknown) = () => new DeadlineError(ms)): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timedOut = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(typeof timeoutError === "string" ? new Error(timeoutError) : timeoutError()), ms);
  });
  return Promise.race([promise, timedOut]).finally(() => clearTimeout(timer));
}

/** An exponential backoff: `firstMs` before the first retry, doubling (or `factor`), never above `maxMs`. */
export interface Backoff {
  firstMs: number;
  maxMs: number;
  factor?: number;
}

/**
 * The pause before retry number `attempt` (1-based).
 *
 * @example
 * backoffMs(3, { firstMs: 200, maxMs: 5000 }); // → 800
 */
export function backoffMs(attempt: number, backoff: Backoff): number {
  return Math.min(backoff.firstMs * (backoff.factor ?? 2) ** (attempt - 1), backoff.maxMs);
}

export interface RetryOptions {
  /** Most attempts in all, the first included. */
  attempts: number;
  /** The pause before each retry: a fixed number of milliseconds, or a backoff. */
  pause: number | Backoff;
  /** Whether a failure of this attempt is worth another; default: every failure is. */
  retryable?: (error: unknown, attempt: number) => boolean;
  /** Told before each pause (to log it). */
  onRetry?: (error: unknown, attempt: number) => void;
}

/**
 * Calls `fn` until it resolves, at most `attempts` times, pausing between attempts. The last
 * failure, or the first that `retryable` refuses, is thrown as is.
 *
 * @example
 * await retry(() => producer.send(records), { attempts: 10, pause: 500, retryable: (e) => recoveryOf(e) === "retryable" });
 */
export async function retry<T>(fn: (attempt: number) => Promise<T>, options: RetryOptions): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn(attempt);
    } catch (error) {
      if (attempt >= options.attempts || (options.retryable && !options.retryable(error, attempt))) throw error;
      options.onRetry?.(error, attempt);
      await delay(typeof options.pause === "number" ? options.pause : backoffMs(attempt, options.pause));
    }
  }
}

/**
 * Runs tasks one at a time, in the order they were queued. A failed task fails only its own
 * caller; the queue goes on with the next.
 *
 * @example
 * const commits = new SerialQueue();
 * void commits.run(() => consumer.commit(offsets));
 */
export class SerialQueue {
  #tail: Promise<unknown> = Promise.resolve();

  run<T>(task: () => Promise<T>): Promise<T> {
    const result = this.#tail.then(task);
    this.#tail = result.catch(() => {});
    return result;
  }
}
