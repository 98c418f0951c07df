/** Transactions on librdkafka: outputs and consumer offsets committed together. */
import type * as Rd from "@confluentinc/kafka-javascript";
import { deadline, delay } from "../../async.ts";
import { FvError } from "../../errors.ts";
import type { CommitOffset, GroupMetadata, OutboundRecord, TopicPartition, TransactionalProducer, Written } from "../port.ts";
import { GroupMembers, TRANSACTION_TIMEOUT_MS, TransactionState } from "../shared.ts";
import { PartitionMap, PartitionSet } from "../topic-partition.ts";
import type { ConfluentMember } from "./consumer.ts";
import { classify, classifyTransactional, ERR } from "./errors.ts";
import { TransactionLeftovers } from "../leftovers.ts";
import type { Logger } from "../../logger.ts";
import { call, connect, disconnect, type Library } from "./library.ts";
import { onDelivery, produceAll, producerConfig } from "./producer.ts";
import type { MarkerCheck } from "../platformatic/open-transactions.ts";

/** How long one transactional call (init, offsets, commit, abort) may take before it fails. */
const TRANSACTION_CALL_TIMEOUT_MS = 10_000;

/**
 * How long a transactional call (offsets, commit) is called again while librdkafka says its error
 * is retriable, each try bounded by TXN_RETRY_CALL_MS. Inside the loop's checkpoint deadline
 * (STREAM_CHECKPOINT_DEADLINE_MS, 10 s by default): with 30 s the loop gave up on a checkpoint
 * while librdkafka still worked on the transaction, and its abort and close collided with that
 * call (the Node + librdkafka soak, seed 13: "closing the transactional producer took longer than
 * 15000 ms", and rows lost).
 */
const TXN_RETRY_MS = 8_000;
const TXN_RETRY_CALL_MS = 4_000;

/**
 * Calls a transactional API again while it fails with a retriable error that does not require an
 * abort (librdkafka: "the application may retry the call"), for up to TXN_RETRY_MS.
 */
async function retryingTxnCall(run: () => Promise<unknown>): Promise<void> {
  const until = Date.now() + TXN_RETRY_MS;
  for (;;) {
    try {
      await run();
      return;
    } catch (error) {
      const e = error as { isRetriable?: boolean; isTxnRequiresAbort?: boolean; isFatal?: boolean };
      if (!e?.isRetriable || e.isTxnRequiresAbort || e.isFatal || Date.now() >= until) throw error;
      await delay(200);
    }
  }
}

/**
 * How long, after a transaction ended, its markers may take to reach the partitions it wrote to
 * before the next transaction counts them skipped (the coordinator writes them after it answers
 * EndTxn; they take a few milliseconds on a healthy broker).
 */
const MARKER_WAIT_MS = 5_000;
/** How long the check waits for a transaction's sends still in flight (their delivery reports) before it counts their partitions open. */
const SENDS_SETTLE_MS = 5_000;

/** What one transaction wrote, as its delivery reports tell it. */
interface Writes {
  /** Where its first record landed in each partition. */
  started: PartitionMap<CommitOffset>;
  /** Partitions where a record was delivered without an offset: where it starts there is not known. */
  noOffset: PartitionSet;
  /** Its sends whose delivery reports are not all in yet. */
  sending: Set<Promise<unknown>>;
}

const newWrites = (): Writes => ({ started: new PartitionMap(), noOffset: new PartitionSet(), sending: new Set() });

/** The partitions of `started` (each with where the transaction that just ended starts there) that still hold it open. */
export type StillOpen = (started: CommitOffset[]) => Promise<TopicPartition[]>;

export class ConfluentTransactionalProducer implements TransactionalProducer {
  readonly #producer: Rd.Producer;
  readonly #members: GroupMembers<ConfluentMember>;
  #initialized: Promise<void> | undefined;
  /** Open: beginTransaction was called and neither commit nor abort since; dirty: it holds anything. */
  readonly #state = new TransactionState();
  /**
   * The last transactional call or send failed because the brokers did not answer (a retryable
   * error: timeout, transport, message timed out), and no commit or abort has succeeded since.
   * A fenced or fatal producer is not in trouble in this sense: the broker answered it.
   */
  #troubled = false;
  /**
   * What this transactional id's last transaction may have left open (src/kafka/leftovers.ts),
   * shared by its producers in this process. librdkafka adds a partition to a transaction only by
   * producing to it, so a transaction cannot hold its predecessor's pieces first: after a broker
   * connection closed, the next transaction does not begin; the session starts over, and its
   * producer has them ended by the pure-JS client's producer with the same transactional id
   * before librdkafka registers it.
   */
  readonly #leftovers: TransactionLeftovers;
  /** The open transaction's commit was called and got no answer (it may have been committed). */
  #commitUnanswered = false;
  /** What the open transaction wrote (a new one after each end: a late delivery report lands in its own transaction's). */
  #writes = newWrites();
  /**
   * The last transaction's markers, asked after (src/kafka/platformatic/open-transactions.ts): the
   * partitions it wrote to that still hold it open. The question runs while the loop reads and
   * transforms the next batch; the next transaction waits for the answer before it begins.
   */
  #markers: Promise<TopicPartition[]> | undefined;
  #markerCheck: Promise<MarkerCheck> | undefined;
  readonly #stillOpen: StillOpen;
  readonly #log: Logger | undefined;
  readonly #settle: () => Promise<void>;
  readonly #onError = (error: { code?: number }) => {
    if (error?.code === ERR.TRANSPORT || error?.code === ERR.ALL_BROKERS_DOWN) this.#leftovers.disconnected();
  };

  /** `stillOpen`: how the last transaction's markers are checked (by default a MarkerCheck of its own; a test may answer instead). */
  constructor(lib: Library, brokers: string[], clientId: string, transactionalId: string, members: GroupMembers<ConfluentMember>, leftovers = new TransactionLeftovers(), log?: Logger, stillOpen?: StillOpen) {
    this.#members = members;
    this.#leftovers = leftovers;
    this.#log = log;
    this.#stillOpen = stillOpen ?? (async (started) => {
      // Loaded only when needed, like the settling producer below.
      this.#markerCheck ??= import("../platformatic/open-transactions.ts").then(({ MarkerCheck }) => new MarkerCheck(brokers, `${clientId}-markers`));
      return await (await this.#markerCheck).stillOpen(started, MARKER_WAIT_MS);
    });
    this.#settle = async () => {
      // Loaded only when needed: the pure-JS client stays out of a librdkafka process otherwise.
      const { PlatformaticTransactionalProducer } = await import("../platformatic/transactions.ts");
      const settler = new PlatformaticTransactionalProducer(brokers, `${clientId}-settle`, transactionalId, new GroupMembers("platformatic"), leftovers, log);
      try {
        await settler.ready();
      } finally {
        await settler.close().catch(() => {});
      }
    };
    this.#producer = new lib.Producer({
      ...producerConfig(brokers, clientId),
      "transactional.id": transactionalId,
      "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
      // librdkafka requires a record's delivery timeout within the transaction's.
      ...({ "message.timeout.ms": TRANSACTION_TIMEOUT_MS } as Rd.ProducerGlobalConfig),
    });
    this.#producer.on("delivery-report", onDelivery);
    this.#producer.on("event.error", this.#onError);
  }

  get inTransaction(): boolean {
    return this.#state.dirty;
  }

  /**
   * 1. connect; 2. InitProducerId for the transactional id: the broker fences a predecessor with
   * the same id and completes or aborts its open transaction before answering.
   */
  async ready(): Promise<void> {
    this.#initialized ??= (async () => {
      // Before librdkafka registers the id (which fences the settling producer): what the last
      // session's producer may have left open is ended first.
      if (!this.#leftovers.empty && this.#leftovers.held() !== "clean") await this.#settle();
      await connect(this.#producer);
      this.#producer.setPollInBackground(true);
      await call((cb) => this.#producer.initTransactions(TRANSACTION_CALL_TIMEOUT_MS, cb));
    })();
    try {
      await this.#initialized;
    } catch (error) {
      throw classify(error, "initializing transactions");
    }
  }

  async #begin(): Promise<void> {
    await this.ready();
    if (this.#state.open) return;
    await this.#markersLanded();
    // No way to hold the last transaction's pieces here: if a broker connection closed after its
    // end went out, or a partition it wrote to still holds it, its markers may be missing, and
    // this producer must not write before they are ended (a new session's producer does that first).
    if (!this.#leftovers.empty && this.#leftovers.held() !== "clean") {
      throw new FvError("KAFKA_RETRYABLE", "the last transaction's markers may be missing (a broker connection closed after it ended, or a partition it wrote to still holds it open): its records and offset commits may still be open at the broker; the session starts over and ends them first");
    }
    try {
      await call((cb) => this.#producer.beginTransaction(cb));
    } catch (error) {
      throw classifyTransactional(error, "beginning a transaction");
    }
    this.#state.began();
  }

  async send(records: OutboundRecord[]): Promise<Written> {
    if (records.length === 0) return [];
    await this.#begin();
    this.#state.wrote();
    // Where these may land: librdkafka picks the partition of a record that has none (-1: any of the topic).
    let topic: string | undefined;
    let partition: number | undefined;
    for (const r of records) {
      if (r.topic === topic && (r.partition ?? -1) === partition) continue;
      this.#leftovers.addPartition(topic = r.topic, partition = r.partition ?? -1);
    }
    const writes = this.#writes;
    const first = new Map<string, CommitOffset>();
    // Noted before the promise settles for anyone else: the check waits for `sending` to settle.
    const sending = produceAll(this.#producer, records, first, writes.noOffset).finally(() => {
      writes.sending.delete(sending);
      for (const o of first.values()) {
        const seen = writes.started.get(o);
        if (!seen || o.offset < seen.offset) writes.started.set(o, o);
      }
    });
    writes.sending.add(sending);
    try {
      return await sending;
    } catch (error) {
      throw this.#failed(error, "producing in a transaction");
    }
  }

  /**
   * The offsets are the next ones to read (message offset + 1), as the port defines them, and go
   * to librdkafka unchanged. (The library's KafkaJS-style example passes the message offset,
   * which would make a restart read the last record again.)
   */
  async sendOffsets(group: GroupMetadata, offsets: CommitOffset[]): Promise<void> {
    if (offsets.length === 0) return;
    const member = this.#members.memberOf(group, "adding offsets to a transaction");
    // librdkafka sends the consumer's current group metadata; work read before the latest
    // assignment must not commit with it.
    if (member.generation() !== group.generationId) {
      throw new FvError("KAFKA_FENCED", `the group rebalanced since this work was read (assignment ${group.generationId}, now ${member.generation()})`);
    }
    await this.#begin();
    this.#state.wrote();
    const list = offsets.map((o) => ({ topic: o.topic, partition: o.partition, offset: Number(o.offset) }));
    this.#leftovers.addGroup(group.groupId);
    try {
      await retryingTxnCall(() => call((cb) => this.#producer.sendOffsetsToTransaction(list, member.consumer, TXN_RETRY_CALL_MS, cb)));
    } catch (error) {
      throw this.#failed(error, "adding offsets to a transaction");
    }
  }

  async commit(): Promise<void> {
    // An empty transaction stays open on our side; nothing to tell the broker.
    if (!this.#state.endable) return;
    this.#leftovers.ending("commit");
    try {
      // librdkafka's contract: a retriable error (a timeout while the broker is away) means the
      // outcome is not known yet, and the commit must be called again, not aborted; only an error
      // that requires an abort (or a fatal one) ends it.
      await retryingTxnCall(() => call((cb) => this.#producer.commitTransaction(TXN_RETRY_CALL_MS, cb)));
    } catch (error) {
      // Still open: the loop aborts it (librdkafka needs the abort before the next begin).
      this.#leftovers.dropped();
      this.#commitUnanswered = true;
      throw this.#failed(error, "committing a transaction");
    }
    this.#state.ended();
    this.#troubled = false;
    this.#commitUnanswered = false;
    this.#askMarkers();
  }

  /**
   * Starts asking whether the transaction that just ended (its EndTxn answered) is still open in
   * the partitions it wrote to. A broker in its controlled shutdown skips the markers of its
   * leaderless partitions and answers as if it wrote them (soak seed 106), and librdkafka cannot
   * hold the last transaction's pieces the way the pure-JS client does (a partition joins a
   * transaction only with a record). Until the answer, the pieces count as owed (`checking`), so a
   * producer of the next session that comes first ends them before any work. The check first waits
   * for the transaction's sends still in flight (a send given up by the loop's deadline still
   * gets its delivery reports); a partition whose start is not known counts as open. Not asked:
   * the group's `__consumer_offsets` partition (a marker skipped there costs duplicates, not rows),
   * and the partitions of a transaction whose end got no answer (those are ended again anyway).
   */
  #askMarkers(): void {
    const writes = this.#writes;
    this.#writes = newWrites();
    if (writes.started.size === 0 && writes.noOffset.size === 0 && writes.sending.size === 0) return;
    const answered = this.#leftovers.checking();
    this.#markers = (async () => {
      const settled = await deadline(Promise.allSettled([...writes.sending]).then(() => true), SENDS_SETTLE_MS).catch(() => false);
      const unknown = new PartitionSet(writes.noOffset);
      if (!settled) for (const o of writes.started.values()) unknown.add(o);
      const asked = writes.started.values().filter((o) => !unknown.has(o));
      const open = [...unknown, ...(asked.length ? await this.#stillOpen(asked) : [])];
      if (open.length === 0) answered();
      return open;
    })().catch(() => [...new PartitionSet([...writes.started.values(), ...writes.noOffset])]);
  }

  /** Waits for the answer of #askMarkers: a partition still open keeps the leftovers owed (they are ended before any work). */
  async #markersLanded(): Promise<void> {
    const markers = this.#markers;
    if (!markers) return;
    this.#markers = undefined;
    const open = await markers;
    if (open.length === 0) return;
    this.#log?.("warn", `the last transaction is still open in partitions it wrote to (${open.map((tp) => `${tp.topic}:${tp.partition}`).join(", ")}), or where it starts there is not known: their markers may have been skipped (a broker shutting down?); the session starts over and ends it first`);
  }

  async abort(): Promise<void> {
    if (!this.#state.endable) return;
    this.#state.ended();
    this.#leftovers.ending("abort");
    try {
      await call((cb) => this.#producer.abortTransaction(TRANSACTION_CALL_TIMEOUT_MS, cb));
    } catch (error) {
      // After a commit that got no answer, the coordinator may have committed: its pieces are
      // ended again as that commit asked.
      if (this.#commitUnanswered) this.#leftovers.ending("commit");
      this.#leftovers.dropped();
      this.#writes = newWrites();
      throw this.#failed(error, "aborting a transaction");
    }
    this.#troubled = false;
    this.#commitUnanswered = false;
    this.#askMarkers();
  }

  async releasePendingOffsets(group: GroupMetadata, held: TopicPartition): Promise<void> {
    this.#state.mustBeIdle("releasePendingOffsets");
    const member = this.#members.memberOf(group, "releasing pending offset commits");
    await this.#begin();
    this.#state.wrote();
    this.#leftovers.addGroup(group.groupId);
    try {
      // librdkafka adds the group only with an offset (an empty list is a no-op); the abort drops it.
      await call((cb) => this.#producer.sendOffsetsToTransaction([{ topic: held.topic, partition: held.partition, offset: 0 }], member.consumer, TRANSACTION_CALL_TIMEOUT_MS, cb));
    } catch (error) {
      await this.abort().catch(() => {});
      throw classifyTransactional(error, "releasing pending offset commits");
    }
    await this.abort();
  }

  #failed(error: unknown, what: string): FvError {
    const failure = classifyTransactional(error, what);
    if (failure.code === "KAFKA_RETRYABLE") this.#troubled = true;
    return failure;
  }

  /**
   * Aborts what is open, then frees the handle, unless the brokers did not answer its last call. The binding's disconnect runs `rd_kafka_destroy` in a libuv threadpool thread, and
   * for a transactional producer that failed during a broker outage that call never returned,
   * even once the broker was back (Node soak, seeds 23 and 25: 4 processes that logged STOPPED
   * and never exited). Node joins every threadpool thread at exit, so one such call holds the
   * process forever, and each takes a thread from the pool (4 by default) that `consume()` also
   * needs. A handle in trouble is left as it is: fenced by the next producer with the same
   * transactional id, it ends with the process (its open connection keeps a Node process alive
   * until then: the CLI ends with process.exit).
   */
  async close(): Promise<void> {
    // Its own closing (or a handle left as it is, retrying) is not a broker going away.
    this.#producer.off("event.error", this.#onError);
    if (!this.#initialized) return;
    const initialized = await this.#initialized.then(() => true, () => false);
    if (!initialized) return;
    await this.abort().catch(() => {});
    // The last transaction's markers: what is still open is ended here, not left to whichever
    // marker of this producer id reaches those partitions next (after this process, none may).
    const open = this.#markers ? await this.#markers : [];
    this.#markers = undefined;
    if (this.#markerCheck) await this.#markerCheck.then((check) => check.close()).catch(() => {});
    if (this.#troubled) return;
    await disconnect(this.#producer);
    if (open.length > 0) {
      await this.#settle().catch((error) => this.#log?.("warn", `ending the last transaction where its markers were skipped failed (${(error as Error).message}); the next producer with this transactional id in this process ends it`));
    }
  }
}
