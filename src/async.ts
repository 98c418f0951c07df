/**
 * The small async helpers the engine and its runtime use, written once (deno std's `async/` is
 * the model): a delay, a deadline, an exponential backoff and a serial queue.
 */

/**
 * Resolves after `ms` milliseconds; rejects with the signal's reason as soon as it aborts.
 *
 * @example
 * await delay(250);
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

/**
 * The wait before retry number `attempt` (0 for the first retry): `baseMs` doubled per attempt,
 * never more than `maxMs`.
 *
 * @example
 * backoffMs(0, 250, 10_000); // 250
 * backoffMs(3, 250, 10_000); // 2000
 * backoffMs(9, 250, 10_000); // 10000
 */
export function backoffMs(attempt: number, baseMs: number, maxMs: number): number {
  return Math.min(baseMs * 2 ** attempt, maxMs);
}

/**
 * Settles as `p` does, or rejects with `new Error(message)` when `p` has not settled within
 * `ms`. The timer is cleared either way, so it never holds the process open.
 *
 * @example
 * const records = await deadline(consumer.poll(), 5_000, "poll did not answer within 5 s");
 */
export function deadline<T>(p: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(message)), ms);
  });
  return Promise.race([p, expired]).finally(() => clearTimeout(timer));
}

/**
 * Runs tasks one at a time, in the order `run` was called. A task that fails rejects its own
 * `run` only: the tasks after it still run.
 *
 * @example
 * const queue = new SerialQueue();
 * const [a, b] = await Promise.all([queue.run(() => send(first)), queue.run(() => send(second))]); // second waits for first
 */
export class SerialQueue {
  #tail: Promise<unknown> = Promise.resolve();

  run<T>(task: () => Promise<T>): Promise<T> {
    const result = this.#tail.then(task);
    this.#tail = result.catch(() => {});
    return result;
  }
}
