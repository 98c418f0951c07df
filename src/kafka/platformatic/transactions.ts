/** Transactions on @platformatic/kafka: outputs and consumer offsets committed together. */
import type { Buffer } from "node:buffer";
import { type Consumer as PltConsumer, Producer as PltProducer, UserError } from "@platformatic/kafka";
import { deadline } from "../../async.ts";
import { FvError } from "../../errors.ts";
import type { CommitOffset, GroupMetadata, OutboundRecord, TopicPartition, TransactionalProducer, Written } from "../port.ts";
import { DELIVERY_TIMEOUT_MS, type GroupMembers, InFlight, TRANSACTION_TIMEOUT_MS, TransactionState } from "../shared.ts";
import { classify, retryDelay, unknownTopic } from "./errors.ts";
import { checkWritten, sendWithin } from "./producer.ts";
import { type LibraryProducer, partitioner } from "./records.ts";
import { useLeanProduce } from "./produce-encoder.ts";
import { findSymbol, wrapApi } from "./api-hook.ts";
import { type ActiveProducer, askLeaders } from "./open-transactions.ts";
import { type Settle, TransactionLeftovers } from "../leftovers.ts";
import type { Logger } from "../../logger.ts";

/** An abort waits this long for the transaction's requests to settle: past the library's retries of one request. */
const ABORT_WAIT_MS = 60_000;
/** Transactions that settle an earlier one's leftovers, at most, before a transaction that does work (each needs a broker connection that closed meanwhile). */
const MAX_SETTLES = 5;

type Transaction = Awaited<ReturnType<LibraryProducer["beginTransaction"]>>;

/** The topics of a TxnOffsetCommit request, as the library's API takes them. */
type OffsetTopics = Array<{ name: string; partitions: Array<{ partitionIndex: number; committedOffset: bigint; committedLeaderEpoch: number; committedMetadata: string | null }> }>;

function offsetTopics(offsets: CommitOffset[]): OffsetTopics {
  const byTopic = new Map<string, OffsetTopics[number]["partitions"]>();
  for (const o of offsets) {
    let partitions = byTopic.get(o.topic);
    if (!partitions) byTopic.set(o.topic, partitions = []);
    // -1: no leader epoch (a reader then does not check the offset against the partition's epoch).
    partitions.push({ partitionIndex: o.partition, committedOffset: o.offset, committedLeaderEpoch: -1, committedMetadata: null });
  }
  return [...byTopic].map(([name, partitions]) => ({ name, partitions }));
}

/** The pieces carried, for a log line. */
function describeLeftovers(leftovers: TransactionLeftovers): string {
  const { partitions, groups } = leftovers.carried();
  const topics = new Map<string, string[]>();
  for (const tp of partitions) topics.set(tp.topic, [...topics.get(tp.topic) ?? [], tp.partition < 0 ? "any" : String(tp.partition)]);
  return [...[...topics].map(([topic, ps]) => `${topic}[${ps.join(",")}]`), ...groups.map((g) => `offsets of group ${g}`)].join(", ");
}

/**
 * A hooked API called with arguments the hook does not know: the loop fails with this message.
 * A UserError, which the library does not retry (it reads `canRetry: false` from its own errors
 * only, and retries any other error) and the adapter takes as fatal.
 */
function failChanged(args: unknown[], name: string, why: string): unknown {
  const changed = new UserError(`@platformatic/kafka changed: its ${name} call takes other arguments; ${why} needs a new hook`);
  const callback = args[args.length - 1];
  if (typeof callback === "function") return callback(changed);
  throw changed;
}

export class PlatformaticTransactionalProducer implements TransactionalProducer {
  readonly #producer: LibraryProducer;
  readonly #members: GroupMembers<PltConsumer>;
  /** What this transactional id's last transaction may have left open (shared by its producers in this process). */
  readonly #leftovers: TransactionLeftovers;
  readonly #onDisconnect = () => this.#leftovers.disconnected();
  /** The library's transaction, while one is open. */
  #tx: Transaction | undefined;
  /** A transaction being opened (its leftovers held or settled first). */
  #opening: Promise<Transaction> | undefined;
  /** The open transaction holds only what the last one left: no send or offsets went in yet. */
  #holdsOnly = false;
  readonly #state = new TransactionState();
  #offsetsAdded = false;
  /**
   * Sends and offset commits of the open transaction still under way (the loop may have given up
   * on one at its checkpoint deadline while the library still retries it).
   */
  readonly #inflight = new InFlight();
  /** The offsets of the checkpoint being added: the TxnOffsetCommit request under way carries them all. */
  #offsetTopics: OffsetTopics | undefined;

  readonly #log: Logger | undefined;

  constructor(brokers: string[], clientId: string, transactionalId: string, members: GroupMembers<PltConsumer>, leftovers = new TransactionLeftovers(), log?: Logger) {
    this.#members = members;
    this.#leftovers = leftovers;
    this.#log = log;
    this.#producer = new PltProducer<Buffer | string, Buffer | string, string, Buffer | string>({
      clientId,
      bootstrapBrokers: brokers,
      transactionalId,
      idempotent: true,
      acks: -1,
      autocreateTopics: false,
      partitioner,
      // The library sends its request timeout as the transaction timeout.
      timeout: TRANSACTION_TIMEOUT_MS,
      // InitProducerId must carry -1/-1 for a new producer. The library's default (0/0) makes the
      // broker answer PRODUCER_FENCED whenever this transactional id was used before, i.e. after
      // every restart; with -1/-1 the broker bumps the epoch and fences the predecessor instead.
      producerId: -1n,
      producerEpoch: -1,
      retryDelay,
    });
    useLeanProduce(this.#producer);
    // The library commits one partition's offset per TxnOffsetCommit request, and never two at a
    // time: a request in flight is shared (its result handed to a second call, which sends
    // nothing). So a checkpoint's offsets go in one request: the library's call for the first is
    // made to carry them all, also when the library retries it.
    const why = "src/kafka/platformatic/transactions.ts (a checkpoint's offsets in one request)";
    wrapApi(this.#producer, "TxnOffsetCommit", (api) => (...args: unknown[]) => {
      // (connection, transactionalId, groupId, producerId, producerEpoch, generationId, memberId, groupInstanceId, topics, callback)
      if (!Array.isArray(args[8]) || typeof args[9] !== "function" || typeof args[2] !== "string") return failChanged(args, "TxnOffsetCommit", why);
      // Pending offset commits of this producer id from now on: the next transaction holds the group first.
      this.#leftovers.addGroup(args[2]);
      if (this.#offsetTopics) args[8] = this.#offsetTopics;
      return api(...args);
    }, why);
    // Every partition a Produce request writes to, before it goes out: the next transaction holds
    // them first (src/kafka/leftovers.ts). The group is recorded with its TxnOffsetCommit, above.
    const recorded = "src/kafka/platformatic/transactions.ts (what a transaction wrote, for the next one to hold)";
    wrapApi(this.#producer, "Produce", (api) => (...args: unknown[]) => {
      // (connection, acks, timeout, messages, options, callback), after the library's partitioner
      const messages = args[3] as Array<{ topic: string; partition: number }>;
      if (!Array.isArray(messages)) return failChanged(args, "Produce", recorded);
      let topic: string | undefined;
      let partition: number | undefined;
      for (const m of messages) {
        if (m.topic === topic && m.partition === partition) continue;
        this.#leftovers.addPartition(topic = m.topic, partition = m.partition);
      }
      return api(...args);
    }, recorded);
    // A connection that closed, or one that could not be made (the broker was away meanwhile).
    this.#producer.on("client:broker:disconnect", this.#onDisconnect);
    this.#producer.on("client:broker:failed", this.#onDisconnect);
  }

  get inTransaction(): boolean {
    return this.#state.dirty;
  }

  /**
   * Registers the transactional id with the broker (InitProducerId): a predecessor with the same
   * id is fenced and its open transaction completed or aborted before this returns. Call it
   * before consuming, so committed offsets read afterwards are final.
   */
  async ready(): Promise<void> {
    await this.#begin();
    // Leftovers of the last session were held (and settled): an empty transaction to end now,
    // not at the first checkpoint, which may not come before its timeout.
    if (this.#state.endable) await this.commit();
  }

  #begin(): Promise<Transaction> {
    // While one is being opened, `#tx` is set before it holds the leftovers: nothing may go in yet.
    if (this.#opening) return this.#opening;
    if (this.#tx) return Promise.resolve(this.#tx);
    return this.#opening = this.#open().finally(() => this.#opening = undefined);
  }

  /**
   * Begins a transaction that holds, before any work, every piece the last one held; and if the
   * broker may have skipped the last one's markers, ends first, holding only those, the way the
   * last one ended (src/kafka/leftovers.ts).
   */
  async #open(): Promise<Transaction> {
    for (let settles = 0; ; settles++) {
      if (settles >= MAX_SETTLES) throw new FvError("KAFKA_RETRYABLE", `beginning a transaction: the last one's records and offset commits may still be open at the broker (broker connections kept closing while ${MAX_SETTLES} transactions ended them); the session starts over`);
      let tx: Transaction;
      try {
        tx = await this.#producer.beginTransaction();
      } catch (error) {
        throw classify(error, "beginning a transaction");
      }
      this.#tx = tx;
      this.#state.began();
      this.#offsetsAdded = false;
      // Until the first send or offsets: an abort of it ends the pieces it holds as they owe.
      this.#holdsOnly = true;
      const settle = await this.#hold(tx);
      if (settle === "clean") return tx;
      this.#tx = undefined;
      this.#state.ended();
      this.#log?.("warn", `the broker may have skipped the markers of this producer's last transaction (a broker connection closed after it ended, or a partition still holds it open): ending what it may have left open first, with ${settle === "commit" ? "a commit" : "an abort"} (${describeLeftovers(this.#leftovers)})`);
      await this.#end(tx, settle, "ending the records and offset commits an earlier transaction may have left open");
    }
  }

  /** The carried pieces join the open transaction: its groups (AddOffsetsToTxn) and its partitions (AddPartitionsToTxn). */
  async #hold(tx: Transaction): Promise<Settle> {
    const leftovers = this.#leftovers;
    if (leftovers.empty) return leftovers.held();
    const { partitions, groups } = leftovers.carried();
    // The broker holds a transaction from the first of these requests: it must be ended.
    this.#state.wrote();
    leftovers.holding();
    let metadata: Awaited<ReturnType<LibraryProducer["metadata"]>> | undefined;
    let every: TopicPartition[] = [];
    try {
      metadata = partitions.length ? await this.#producer.metadata({ topics: [...new Set(partitions.map((tp) => tp.topic))] }) : undefined;
      // Partition -1: every partition of the topic (librdkafka's producer picks partitions itself).
      // Copies: the library writes the partition of these "messages" back (it reads only topic and partition; nothing is produced).
      every = partitions.flatMap((tp) =>
        tp.partition >= 0 ? [{ ...tp }] : Array.from({ length: metadata?.topics.get(tp.topic)?.partitionsCount ?? 0 }, (_, partition) => ({ topic: tp.topic, partition }))
      );
      // The groups (AddOffsetsToTxn, by the group's id alone; one after another, since the library
      // shares a call in flight with the next) and the partitions (AddPartitionsToTxn) at once: a
      // transaction that holds only some of them is ended as they owe anyway. (Either call returns
      // no promise when it has nothing to add.)
      const addGroups = async () => {
        for (const groupId of groups) await this.#inflight.track(Promise.resolve(tx.addConsumer({ groupId } as Parameters<Transaction["addConsumer"]>[0])));
      };
      await Promise.all([
        addGroups(),
        ...(metadata && every.length ? [this.#inflight.track(Promise.resolve(tx.addPartitions(metadata, every as unknown as Parameters<Transaction["addPartitions"]>[1])))] : []),
      ]);
    } catch (error) {
      // Right after a broker restart its metadata may not know a topic yet: tried again with the
      // session (a topic deleted for good fails the loop after its consecutive restarts).
      if (unknownTopic(error)) throw new FvError("KAFKA_RETRYABLE", `holding what the last transaction may have left open: ${(error as Error).message}`);
      throw classify(error, "holding what the last transaction may have left open");
    }
    // Aborted meanwhile (the abort gave up waiting for this): it did not get to hold them all.
    if (this.#tx !== tx) throw new FvError("KAFKA_RETRYABLE", "holding what the last transaction may have left open: the transaction was aborted meanwhile");
    // The coordinator finished the last transaction before it answered: its markers were written,
    // or skipped. A skipped one leaves that transaction open in its partition.
    let open: TopicPartition[];
    try {
      open = metadata ? await this.#openHere(metadata, every) : [];
    } catch (error) {
      if (unknownTopic(error)) throw new FvError("KAFKA_RETRYABLE", `asking the partitions' leaders whether the last transaction is still open there: ${(error as Error).message}`);
      throw classify(error, "asking the partitions' leaders whether the last transaction is still open there");
    }
    if (this.#tx !== tx) throw new FvError("KAFKA_RETRYABLE", "holding what the last transaction may have left open: the transaction was aborted meanwhile");
    return leftovers.held(open.length > 0);
  }

  /**
   * The partitions (of `every`, as the hold found them in `metadata`) that still hold an open
   * transaction of this producer id (src/kafka/platformatic/open-transactions.ts). A failed
   * question is asked once more with fresh metadata; a second failure fails the call
   * (NOT_LEADER_OR_FOLLOWER and the like are retryable, so the session starts over), and nothing
   * is ever judged clean on an error. The
   * group's `__consumer_offsets` partition is not asked: a marker skipped there costs duplicates
   * (offsets aborted after their outputs committed), not rows.
   */
  async #openHere(metadata: Awaited<ReturnType<LibraryProducer["metadata"]>>, every: readonly TopicPartition[]): Promise<TopicPartition[]> {
    const producerId = this.#producer.producerId;
    if (producerId === undefined) return [...every];
    const mine = (_: TopicPartition, producers: ActiveProducer[]) => producers.some((a) => a.producerId === producerId && a.currentTxnStartOffset >= 0n);
    try {
      return await askLeaders(this.#producer, metadata, every, mine);
    } catch {
      // A leader moved since the metadata was cached (NOT_LEADER_OR_FOLLOWER): asked once more, of
      // fresh metadata, before the session starts over for it.
      const fresh = await this.#producer.metadata({ topics: [...new Set(every.map((tp) => tp.topic))], forceUpdate: true });
      return await askLeaders(this.#producer, fresh, every, mine);
    }
  }

  /** EndTxn for a transaction already taken off `#tx`. */
  async #end(tx: Transaction, how: "commit" | "abort", what: string): Promise<void> {
    this.#leftovers.ending(how);
    try {
      await (how === "commit" ? tx.commit() : tx.abort());
    } catch (error) {
      this.#leftovers.dropped();
      throw classify(error, what);
    }
  }

  async send(records: OutboundRecord[]): Promise<Written> {
    if (records.length === 0) return [];
    const tx = await this.#begin();
    this.#state.wrote();
    this.#holdsOnly = false;
    const written = new Map<string, CommitOffset>();
    // A send given up fails the session, whose transaction is aborted: nothing of it is ever committed.
    await sendWithin(records, DELIVERY_TIMEOUT_MS, "producing in a transaction", async (messages) => {
      this.#stillOpen(tx, "producing in a transaction");
      checkWritten(this.#producer, messages, await this.#inflight.track(tx.send({ messages })), written);
    });
    return [...written.values()];
  }

  async sendOffsets(group: GroupMetadata, offsets: CommitOffset[]): Promise<void> {
    if (offsets.length === 0) return;
    const consumer = this.#members.memberOf(group, "adding offsets to a transaction");
    // The library sends each TxnOffsetCommit to this node and retries without end while it is
    // not in the cluster metadata. A consumer that lost its coordinator (the broker restarted)
    // has none: the loop waited out the checkpoint deadline, then the abort its full wait.
    const coordinatorId = consumer.coordinatorId;
    if (coordinatorId === undefined || coordinatorId === null || coordinatorId < 0) {
      throw new FvError("KAFKA_RETRYABLE", `the consumer of group ${group.groupId} does not know its coordinator now (a broker restart?): the transaction is aborted and the member rejoins`);
    }
    const tx = await this.#begin();
    this.#state.wrote();
    this.#holdsOnly = false;
    try {
      if (!this.#offsetsAdded) {
        // The library answers a group already added (held first, src/kafka/leftovers.ts) with no promise.
        await this.#inflight.track(Promise.resolve(tx.addConsumer(consumer)));
        this.#offsetsAdded = true;
      }
      // The member as it was when this work was read: the broker refuses it if the group moved on.
      const metadata = { consumer: { ...group, coordinatorId } };
      this.#stillOpen(tx, "adding offsets to a transaction");
      // The library would hand this call the result of one still under way (an earlier
      // transaction's, retried past its abort's wait), and send nothing: these offsets would be
      // left out of the transaction that commits.
      if (this.#offsetTopics) throw new FvError("KAFKA_RETRYABLE", "adding offsets to a transaction: an earlier offset commit of this producer is still under way; the transaction is aborted and the member rejoins");
      this.#offsetTopics = offsetTopics(offsets);
      try {
        // The library commits message.offset + 1 (overridden above, with the others, by the next offsets to read).
        const o = offsets[0]!;
        // deno-lint-ignore no-explicit-any
        await this.#inflight.track(tx.addOffset({ topic: o.topic, partition: o.partition, offset: o.offset - 1n, metadata } as any));
      } finally {
        this.#offsetTopics = undefined;
      }
    } catch (error) {
      throw classify(error, "adding offsets to a transaction");
    }
  }

  /**
   * A checkpoint step that gave up at its deadline goes on in the background; once its
   * transaction has been ended or aborted it must not send another request for it. (A
   * TxnOffsetCommit sent after the abort reaches the group coordinator as a pending commit no
   * transaction ends; and the library, whose transaction is gone by then, throws from its
   * callback: a soak process died with "undefined is not an object (evaluating
   * 'this.#transaction.id')" when the broker came back.)
   */
  #stillOpen(tx: Transaction, what: string): void {
    if (this.#tx !== tx) throw new FvError("KAFKA_RETRYABLE", `${what}: the transaction was ended meanwhile (its checkpoint step gave up at the deadline)`);
  }

  async commit(): Promise<void> {
    const tx = this.#tx;
    // An empty transaction stays open on our side; nothing to tell the broker.
    if (!tx || !this.#state.endable) return;
    this.#tx = undefined;
    this.#state.ended();
    await this.#end(tx, "commit", "committing a transaction");
  }

  async abort(): Promise<void> {
    // A transaction being opened first holds (or settles) what the last one left.
    if (this.#opening) await deadline(this.#opening.catch(() => {}), ABORT_WAIT_MS).catch(() => {});
    const tx = this.#tx;
    if (!tx || !this.#state.endable) return;
    this.#tx = undefined;
    this.#state.ended();
    // End the transaction only once its requests have settled. A TxnOffsetCommit still retried
    // after EndTxn(abort) reaches the group coordinator as a pending offset commit that no
    // transaction ends (Kafka before KIP-890's transaction version 2): it holds every
    // require_stable reader of that partition, and the producer's next commit marker makes it
    // the committed offset, moving the partition to a stale position.
    await deadline(this.#inflight.settled(), ABORT_WAIT_MS).catch(() => {});
    // A transaction with no work of its own ends what it holds as they owe: aborting a committed
    // transaction's pieces where some of its markers were written would split it.
    await this.#end(tx, this.#holdsOnly ? this.#leftovers.owed : "abort", "aborting a transaction");
  }

  /**
   * The library adds a group to a transaction without an offset (AddOffsetsToTxn): `held` is not
   * needed; and partitions without producing (AddPartitionsToTxn): `written` gets abort markers.
   */
  async releasePendingOffsets(group: GroupMetadata, _held: TopicPartition, written: readonly TopicPartition[] = []): Promise<void> {
    this.#state.mustBeIdle("releasePendingOffsets");
    const consumer = this.#members.memberOf(group, "releasing pending offset commits");
    const tx = await this.#begin();
    this.#tx = undefined;
    this.#state.ended();
    // Its abort markers end what it holds; if the broker skips them, the next transaction holds these.
    this.#leftovers.addGroup(consumer.groupId);
    for (const tp of written) this.#leftovers.addPartition(tp.topic, tp.partition);
    try {
      await tx.addConsumer(consumer);
      if (written.length) {
        const metadata = await this.#producer.metadata({ topics: [...new Set(written.map((tp) => tp.topic))] });
        // The library reads only the topic and partition of these "messages" (nothing is produced).
        await tx.addPartitions(metadata, written.map((tp) => ({ topic: tp.topic, partition: tp.partition })) as unknown as Parameters<Transaction["addPartitions"]>[1]);
      }
    } catch (error) {
      // Its coordinator aborts it (at its timeout): what it holds owes an abort.
      this.#leftovers.ending("abort");
      this.#leftovers.dropped();
      throw classify(error, "releasing pending offset commits");
    }
    await this.#end(tx, "abort", "releasing pending offset commits");
  }

  async close(): Promise<void> {
    await this.abort().catch(() => {});
    // Its own closing is not a broker going away.
    this.#producer.off("client:broker:disconnect", this.#onDisconnect);
    this.#producer.off("client:broker:failed", this.#onDisconnect);
    await this.#producer.close(true);
  }
}
