import { retry } from "../async.ts";
import { asFvError, type FvError, recoveryOf } from "../errors.ts";
import type { Row } from "../expr/index.ts";
import type { InboundRecord, OutboundRecord, Producer, TransactionalProducer, Written } from "../kafka/port.ts";
import type { Logger } from "../logger.ts";

/** What a dead letter says about its failure: the reason, the message, and the stage's label. */
export interface Failure {
  reason: string;
  message: string;
  stageLabel: string;
}

/**
 * A dead letter, with its headers (the one place that writes them). Of a source record: its key,
 * value and headers, with the failure and where the record came from. Of a fired row (timers
 * fire with no source record): the row itself, with the failure only.
 *
 * @example
 * deadLetterRecord("in-dlq", { reason: "invalid_json", message: "...", stageLabel: "stage 1 (in → out)" }, { record });
 */
export function deadLetterRecord(topic: string, failure: Failure, from: { record: InboundRecord } | { fired: Row }): OutboundRecord {
  const reported: Array<[string, string]> = [
    ["fv.error.reason", failure.reason],
    ["fv.error.message", failure.message.slice(0, 1000)],
    ["fv.error.stage", failure.stageLabel],
  ];
  if ("fired" in from) return { topic, key: null, value: JSON.stringify(from.fired), headers: reported };
  const { record } = from;
  return {
    topic,
    key: record.key,
    value: record.value,
    headers: [
      ...record.headers,
      ...reported,
      ["fv.source.topic", record.topic],
      ["fv.source.partition", String(record.partition)],
      ["fv.source.offset", String(record.offset)],
    ],
  };
}

/**
 * Sends a session's records, under either guarantee (Kafka Streams' RecordCollector).
 *
 * At-least-once: `send` resolves once every replica acknowledged the records (acks=all); a
 * retryable failure is retried `retries` times, `retryPauseMs` apart.
 *
 * Exactly-once: the transaction's requests run off the loop's path, in the order they were handed
 * over, one at a time (as Kafka's own producer does: `send()` returns at once and
 * `commitTransaction()` flushes). `send` queues a batch's records and returns; `commit` queues the
 * commit of everything queued before it. While a commit runs, the loop goes on with the next
 * batches, whose records wait in the queue and go into the next transaction the moment the commit
 * is done: no batch waits for EndTxn. Sends queued one after another, with no commit between
 * them, go as one request. The first failure stops the queue (nothing queued after it
 * runs, so no later send joins a new transaction and no later commit happens) and is handed to
 * `onFailure`; the session then aborts and starts over from the last committed offsets.
 */
export class RecordCollector {
  readonly #producer: Producer | undefined;
  readonly #tx: TransactionalProducer | undefined;
  readonly #log: Logger;
  readonly #retries: number;
  readonly #retryPauseMs: number;
  readonly #maxQueuedRecords: number;
  readonly #onFailure: (failure: FvError) => void;
  /** Exactly-once: the last request queued; it never rejects (failures go to #failure). */
  #tail: Promise<void> = Promise.resolve();
  #queuedRecords = 0;
  /**
   * Exactly-once: the records of the last send queued, while it has not started. A send that
   * follows joins them, so while a request or a commit runs, the batches the loop goes on with
   * make one request, not one each (a request's round trip, not the records, bounded the rate).
   */
  #joinable: OutboundRecord[] | undefined;
  #queuedCommits = 0;
  #failure: FvError | undefined;
  /** Waiting for the queue to shrink below `maxQueuedRecords`. */
  #roomWaiters: Array<() => void> = [];

  constructor(
    clients: { producer?: Producer; tx?: TransactionalProducer },
    log: Logger,
    options: { retries: number; retryPauseMs: number; maxQueuedRecords?: number; onFailure?: (failure: FvError) => void },
  ) {
    this.#producer = clients.producer;
    this.#tx = clients.tx;
    this.#log = log;
    this.#retries = options.retries;
    this.#retryPauseMs = options.retryPauseMs;
    this.#maxQueuedRecords = options.maxQueuedRecords ?? 10_000;
    this.#onFailure = options.onFailure ?? (() => {});
  }

  /**
   * At-least-once: resolves once the records are acknowledged. Exactly-once: queues them for the
   * open transaction and resolves at once, unless the queue holds more than `maxQueuedRecords`
   * (a slow commit): then once it has room again. At-least-once, returns where the records went
   * (the local state store covers the changelog from there).
   */
  async send(records: OutboundRecord[]): Promise<Written | void> {
    if (!this.#tx) {
      return retry(() => this.#producer!.send(records), {
        attempts: this.#retries,
        pause: this.#retryPauseMs,
        // Not on a closed client (its session ended): the session's restart sends again.
        retryable: (error) => recoveryOf(error) === "retryable" && !(error as FvError).context?.clientClosed,
        onRetry: (error, attempt) => this.#log("warn", `send failed, retrying (${attempt}/${this.#retries}): ${(error as Error).message}`),
      });
    }
    if (records.length === 0) return;
    const tx = this.#tx;
    const joinable = this.#joinable;
    if (joinable && !this.#failure) {
      // A send queued behind a running request and not started yet: these records go with it.
      for (const r of records) joinable.push(r);
      this.#queuedRecords += records.length;
    } else {
      const batch = records.slice();
      this.#joinable = batch;
      void this.#queue(() => batch.length, async () => {
        if (this.#joinable === batch) this.#joinable = undefined;
        await tx.send(batch);
      }, batch.length).catch(() => {});
    }
    while (this.#queuedRecords > this.#maxQueuedRecords && !this.#failure) await new Promise<void>((resolve) => this.#roomWaiters.push(resolve));
  }

  /** Exactly-once: queues `commit` (the checkpoint's state, offsets and EndTxn) behind every send queued so far. */
  commit(commit: () => Promise<void>): Promise<void> {
    this.#queuedCommits++;
    // Records sent from now on belong to the next transaction: none may join a send queued before this commit.
    this.#joinable = undefined;
    return this.#queue(() => 0, commit, 0).finally(() => this.#queuedCommits--);
  }

  /** Exactly-once: a commit is queued or running (the next one waits, and its transaction grows meanwhile). */
  get committing(): boolean {
    return this.#queuedCommits > 0;
  }

  /** Exactly-once: resolves once everything queued so far has run; rejects with the queue's failure. */
  async settled(): Promise<void> {
    await this.#tail;
    if (this.#failure) throw this.#failure;
  }

  /**
   * Exactly-once: stops the queue (nothing queued runs from now on) and waits for the request under
   * way, so the transaction can be aborted with none of its requests in flight.
   */
  async cancel(reason: FvError): Promise<void> {
    this.#failure ??= reason;
    await this.#tail;
  }

  /** Queues `request`; `records` says how many records it sends (a send's count grows while later sends join it). */
  #queue(records: () => number, request: () => Promise<void>, queued: number): Promise<void> {
    this.#queuedRecords += queued;
    const run = this.#tail.then(async () => {
      try {
        if (this.#failure) throw this.#failure;
        await request();
      } catch (error) {
        if (!this.#failure) {
          this.#failure = asFvError(error);
          this.#onFailure(this.#failure);
        }
        throw this.#failure;
      } finally {
        this.#queuedRecords -= records();
        if (this.#queuedRecords <= this.#maxQueuedRecords || this.#failure) for (const wake of this.#roomWaiters.splice(0)) wake();
      }
    });
    this.#tail = run.catch(() => {});
    return run;
  }
}
