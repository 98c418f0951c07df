import { FvError, recoveryOf } from "../errors.ts";

/** One ordered step of a checkpoint, e.g. "state", "offsets", "transaction". */
export interface CheckpointStep {
  name: string;
  run(): Promise<void>;
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
        await withDeadline(step.run(), this.#options.deadlineMs, step.name);
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

function withDeadline<T>(promise: Promise<T>, ms: number, name: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new FvError("KAFKA_RETRYABLE", `checkpoint step "${name}" took longer than ${ms} ms`, { context: { timeout: true, checkpointStep: name } })),
      ms,
    );
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}
