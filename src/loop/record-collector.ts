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
 * over (as Kafka's own producer does: `send()` returns at once and `commitTransaction()`
 * flushes). `send` queues a batch's records and returns; `commit` queues the commit of
 * everything sent before it. Sends run one at a time, in order; sends queued one after another,
 * with no commit between them, go as one request. A commit runs once the sends before it and the
 * commit before it are done.
 *
 * With two transactional producers (the default; docs/exactly-once.md, "Commit overlapping the
 * next batches"), transactions alternate between them: while one producer commits transaction N, the
 * batches the loop goes on with are sent by the other, in transaction N+1, and that transaction's
 * commit waits for N's. With one, the next transaction's sends wait for the commit (its records
 * wait in the queue, and no batch waits for EndTxn either way).
 *
 * The first failure stops the queue (nothing queued after it runs, so no later commit happens)
 * and is handed to `onFailure`; the session then aborts every open transaction and starts over
 * from the last committed offsets.
 */
export class RecordCollector {
  readonly #producer: Producer | undefined;
  /** Exactly-once: the transactional producers, taking turns. */
  readonly #txs: readonly TransactionalProducer[];
  readonly #log: Logger;
  readonly #retries: number;
  readonly #retryPauseMs: number;
  readonly #maxQueuedRecords: number;
  readonly #onFailure: (failure: FvError) => void;
  /** Exactly-once: the producer whose transaction takes the sends from now on. */
  #turn = 0;
  /** Exactly-once: the last send queued, the last commit queued, and each producer's last commit. */
  readonly #lastSend = new Tail();
  readonly #lastCommit = new Tail();
  readonly #lastCommitOf: Tail[];
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
    clients: { producer?: Producer; txs?: readonly TransactionalProducer[] },
    log: Logger,
    options: { retries: number; retryPauseMs: number; maxQueuedRecords?: number; onFailure?: (failure: FvError) => void },
  ) {
    this.#producer = clients.producer;
    this.#txs = clients.txs ?? [];
    this.#lastCommitOf = this.#txs.map(() => new Tail());
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
    if (this.#txs.length === 0) {
      return retry(() => this.#producer!.send(records), {
        attempts: this.#retries,
        pause: this.#retryPauseMs,
        // Not on a closed client (its session ended), nor after a delivery timeout (the client still
        // retries the send it gave up): the session's restart sends again, on new clients.
        retryable: (error) => recoveryOf(error) === "retryable" && !(error as FvError).context?.clientClosed && !(error as FvError).context?.deliveryTimedOut,
        onRetry: (error, attempt) => this.#log("warn", `send failed, retrying (${attempt}/${this.#retries}): ${(error as Error).message}`),
      });
    }
    if (records.length === 0) return;
    const tx = this.#txs[this.#turn]!;
    const joinable = this.#joinable;
    if (joinable && !this.#failure) {
      // A send queued behind a running request and not started yet: these records go with it.
      for (const r of records) joinable.push(r);
      this.#queuedRecords += records.length;
    } else {
      const batch = records.slice();
      this.#joinable = batch;
      // After the sends before it, and after the last commit of its producer (its transaction
      // before this one): with two producers, that commit was the one before the last.
      const run = this.#queue([this.#lastSend, this.#lastCommitOf[this.#turn]!], () => batch.length, async () => {
        if (this.#joinable === batch) this.#joinable = undefined;
        await tx.send(batch);
      }, batch.length);
      this.#lastSend.follow(run);
    }
    while (this.#queuedRecords > this.#maxQueuedRecords && !this.#failure) await new Promise<void>((resolve) => this.#roomWaiters.push(resolve));
  }

  /**
   * Exactly-once: queues `commit` (the checkpoint's state, offsets and EndTxn, on the producer it
   * is given: the one whose transaction took the sends so far) behind every send queued so far
   * and the commit before it. The sends that follow go into the next transaction, on the next
   * producer.
   */
  commit(commit: (tx: TransactionalProducer) => Promise<void>): Promise<void> {
    this.#queuedCommits++;
    // Records sent from now on belong to the next transaction: none may join a send queued before this commit.
    this.#joinable = undefined;
    const tx = this.#txs[this.#turn]!;
    const run = this.#queue([this.#lastSend, this.#lastCommit], () => 0, () => commit(tx), 0).finally(() => this.#queuedCommits--);
    this.#lastCommit.follow(run);
    this.#lastCommitOf[this.#turn]!.follow(run);
    this.#turn = (this.#turn + 1) % this.#txs.length;
    return run;
  }

  /** Exactly-once: a commit is queued or running (the next one waits, and its transaction grows meanwhile). */
  get committing(): boolean {
    return this.#queuedCommits > 0;
  }

  /** Exactly-once: resolves once everything queued so far has run; rejects with the queue's failure. */
  async settled(): Promise<void> {
    await Promise.all([this.#lastSend.settled, this.#lastCommit.settled]);
    if (this.#failure) throw this.#failure;
  }

  /**
   * Exactly-once: stops the queue (nothing queued runs from now on) and waits for the requests
   * under way, so the transactions can be aborted with none of their requests in flight.
   */
  async cancel(reason: FvError): Promise<void> {
    this.#failure ??= reason;
    await Promise.all([this.#lastSend.settled, this.#lastCommit.settled]);
  }

  /**
   * Queues `request` to run once every promise of `after` has settled; `records` says how many
   * records it sends (a send's count grows while later sends join it).
   */
  #queue(after: readonly Tail[], records: () => number, request: () => Promise<void>, queued: number): Promise<void> {
    this.#queuedRecords += queued;
    const waits = after.filter((tail) => !tail.done).map((tail) => tail.settled);
    // Nothing to wait for: it starts at the next microtask, as a send behind an idle queue always did.
    const start = waits.length === 0 ? Promise.resolve() : waits.length === 1 ? waits[0]! : Promise.all(waits);
    return start.then(async () => {
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
  }
}

/** The last request of a kind: when it settles (never rejects), and whether it has. */
class Tail {
  settled: Promise<void> = Promise.resolve();
  done = true;

  follow(run: Promise<void>): void {
    const settled = run.then(() => {}, () => {});
    this.settled = settled;
    this.done = false;
    void settled.then(() => {
      if (this.settled === settled) this.done = true;
    });
  }
}
