/**
 * A group member on @platformatic/kafka. The library has no revoke callback: it rejoins the group
 * by itself and emits `consumer:group:rebalance` (a rebalance started) and `consumer:group:join`
 * (the new assignment). The consumer turns those into the port's AssignmentListener calls and
 * filters out buffered records of partitions this member no longer owns.
 */
import { delay } from "../../async.ts";
import type { Buffer } from "node:buffer";
import { Admin as PltAdmin, Consumer as PltConsumer, type MessagesStream } from "@platformatic/kafka";
import { FvError } from "../../errors.ts";
import { filterAbortedTransactions } from "../aborted-transactions.ts";
import { leanFetch } from "./fetch-parser.ts";
import type { CommitOffset, ConsumerOptions, GroupConsumer, GroupMetadata, InboundRecord, TopicPartition } from "../port.ts";
import {
  byTopic,
  type GroupMembers,
  HEARTBEAT_INTERVAL_MS,
  OwnedPartitions,
  partitionKey as key,
  SESSION_TIMEOUT_MS,
  settleRebalanceHook,
} from "../shared.ts";
import { coPartitionedAssigner, memberUserData } from "./assigner.ts";
import { classify, unknownTopic, unstableOffsetCommit } from "./errors.ts";
import { wrapApi } from "./api-hook.ts";
import { type FetchedRecords, type FetchRequestTopic, type LibraryMessage, READ_COMMITTED, takeFetchedRecords, toInbound } from "./records.ts";

/**
 * Group timings (see SESSION_TIMEOUT_MS and HEARTBEAT_INTERVAL_MS); a rebalance waits at most 30 s
 * for members to rejoin.
 */
const GROUP_TIMINGS = { sessionTimeout: SESSION_TIMEOUT_MS, heartbeatInterval: HEARTBEAT_INTERVAL_MS, rebalanceTimeout: 30_000 };
/** How long a newly assigned partition waits for its stable committed offset: past any transaction timeout. */
export const STABLE_OFFSETS_WAIT_MS = 60_000;
/** A fetch waits at most this long on the broker for new data: short, so polls stay responsive. */
const FETCH_MAX_WAIT_MS = 500;
/**
 * At most this many bytes of one partition per fetch (the Java consumer's
 * max.partition.fetch.bytes). The library defaults it to its whole 50 MB fetch, and decodes a
 * fetch in one go whatever the stream's backpressure says: a member starting behind a full topic
 * decoded a million 200-byte rows at once (1.5 GB resident, every poll waiting on it).
 */
const FETCH_MAX_PARTITION_BYTES = 1024 * 1024;

export class PlatformaticConsumer implements GroupConsumer {
  readonly #consumer: PltConsumer;
  readonly #options: ConsumerOptions;
  readonly #members: GroupMembers<PltConsumer>;
  #stream: MessagesStream<Buffer, Buffer, Buffer, Buffer> | undefined;
  /**
   * The partitions owned, with the next offset to hand out of each. After every join the library
   * rewinds all partitions to their committed offsets; records below this position of a partition
   * we kept were already handed to the loop, so they are skipped rather than processed twice.
   */
  readonly #owned = new OwnedPartitions();
  /** The member id and generation of the last join: a join that does not follow on from them is a new membership. */
  #joined: { memberId: string; generation: number } | undefined;
  /** Newly assigned partitions whose stable committed offset is still being read (exactly-once). */
  readonly #held = new Map<string, TopicPartition>();
  /** A rebalance is under way (from the rejoin's start to the new assignment): poll hands out nothing. */
  #rebalancing = false;
  readonly #brokers: string[];
  #waiter: (() => void) | undefined;
  /** Records received and not yet polled; the stream pauses when it holds `#maxBuffered`. */
  #buffer: InboundRecord[] = [];
  readonly #maxBuffered: number;
  #error: unknown;
  #closed = false;

  constructor(brokers: string[], options: ConsumerOptions, members: GroupMembers<PltConsumer>) {
    this.#options = options;
    this.#brokers = brokers;
    this.#members = members;
    this.#maxBuffered = options.maxBuffered ?? 4096;
    const name = options.groupInstanceId ?? options.clientId;
    this.#consumer = new PltConsumer({
      groupId: options.groupId,
      clientId: options.clientId,
      bootstrapBrokers: brokers,
      autocommit: false,
      maxWaitTime: FETCH_MAX_WAIT_MS,
      maxBytesPerPartition: FETCH_MAX_PARTITION_BYTES,
      partitionAssigner: coPartitionedAssigner,
      ...(options.groupInstanceId ? { groupInstanceId: options.groupInstanceId } : {}),
      // Called before every JoinGroup (the first join and each rejoin), and the library waits for
      // it: the loop's rebalance hook runs here, so what this member did in the old generation is
      // committed (or aborted) while that generation still holds, and no record is handed out
      // until the new assignment is known.
      protocolsMetadata: async () => {
        this.#rebalancing = true;
        await this.#beforeRejoin();
        // What the assignor weighs: the partitions this member owns (it keeps them) and how far its
        // local state of each goes (a partition that moves goes where its state is furthest along).
        const owned = [...new Set(this.#owned.list().map((tp) => tp.partition))];
        return memberUserData(name, owned, this.#options.listener?.warmPartitions?.(), this.#joined?.generation ?? -1);
      },
      ...GROUP_TIMINGS,
      ...(options.sessionTimeoutMs ? { sessionTimeout: options.sessionTimeoutMs, heartbeatInterval: Math.min(1000, Math.floor(options.sessionTimeoutMs / 3)) } : {}),
    });
    filterAbortedTransactions(this.#consumer, leanFetch);
    this.#takeFetches();
    // The library emits "error" when rejoining the group after a failed heartbeat fails too (a
    // zombie waking after its session timed out, or a close racing a rejoin). Unheard, that event
    // would crash the process; the next poll reports it instead, and the loop sorts it.
    // A failed rejoin is never fatal: a fresh session joins again (or, fenced, gives up).
    this.#consumer.on("error", (error: unknown) => {
      if (this.#closed) return;
      const sorted = classify(error, `rejoining group ${options.groupId}`);
      this.#error ??= sorted.code === "KAFKA_FATAL" ? new FvError("KAFKA_RETRYABLE", sorted.message, { cause: error }) : sorted;
      this.#wake();
    });
    // A static member whose heartbeat or sync is refused with FENCED_INSTANCE_ID lost its
    // group.instance.id to a consumer that joined with the same one. The library takes the id back
    // by itself (it rejoins), so two live processes with one STREAM_INSTANCE_ID would take it from
    // each other without end, unseen. The next poll reports it instead, fenced, for the loop's
    // count of fencings (consumer-loop.ts, #sharedInstanceId), as librdkafka's fatal error is.
    // Only an answer to the member id the consumer still has counts: one sent before the library's
    // own rejoin is answered FENCED_INSTANCE_ID too (the rejoin replaced that id). (Its offset
    // commits carry no instance id, and are answered UNKNOWN_MEMBER_ID.) Both requests take the
    // member id as their fourth argument (connection, group, generation, member, instance, …).
    for (const request of ["Heartbeat", "SyncGroup"]) wrapApi(this.#consumer, request, (api) => (...args: unknown[]) => {
      const callback = args.at(-1) as (error: unknown, response?: unknown) => void;
      const sentAs = args[3];
      return api(...args.slice(0, -1), (error: unknown, response?: unknown) => {
        if (error && !this.#closed && sentAs === this.#consumer.memberId) {
          const sorted = classify(error, `${request} of group ${options.groupId}`);
          if (sorted.context.instanceFenced) {
            this.#error ??= new FvError(sorted.code, `${sorted.message}: the static member ${options.groupInstanceId} was fenced by another consumer that joined with the same group.instance.id; starting a fresh consumer`, { cause: error, context: sorted.context });
            this.#wake();
          }
        }
        callback(error, response);
      });
    }, "the fencing of a static member (src/kafka/platformatic/consumer.ts)");
    this.#consumer.on("consumer:group:join", (payload: { memberId?: string; generationId?: number; assignments?: Array<{ topic: string; partitions: number[] }> }) => {
      this.#onJoin(payload.memberId ?? this.#consumer.memberId ?? "", payload.generationId ?? this.#consumer.generationId, payload.assignments ?? []);
    });
  }

  /**
   * The records of every fetch the library's message stream makes come straight into the buffer
   * (records.ts, takeFetchedRecords), not one message object at a time through the stream. The
   * stream still runs the fetch loop: it sees each batch's offsets, with no records in it, and
   * moves its positions; backpressure is still its pause and resume. The stream is the only caller
   * of the library consumer's fetch here.
   */
  #takeFetches(): void {
    const consumer = this.#consumer as unknown as { fetch(options: { topics: FetchRequestTopic[] }, callback?: (error: unknown, response?: FetchedRecords) => void): unknown };
    const fetch = consumer.fetch.bind(consumer);
    consumer.fetch = (options, callback) => {
      if (!callback) return fetch(options);
      return fetch(options, (error, response) => {
        if (!error && response && !this.#closed) {
          try {
            if (takeFetchedRecords(options.topics, response, (id) => this.#topicOf(id), this.#buffer) > 0) this.#received();
          } catch (takeError) {
            // A bug of ours, not the broker's: stop the stream rather than lose or repeat records.
            this.#error ??= new FvError("KAFKA_FATAL", `reading a fetch response: ${(takeError as Error).message}`, { cause: takeError });
            this.#wake();
          }
        }
        callback(error, response);
      });
    };
  }

  /** A topic's name from its id, as the library's metadata knows it (it just used it for the fetch). */
  #topicOf(topicId: string): string | undefined {
    const topics = (this.#consumer as unknown as { currentMetadata?: { topics: Map<string, { id: string }> } }).currentMetadata?.topics;
    if (!topics) return undefined;
    for (const name of this.#options.topics) if (topics.get(name)?.id === topicId) return name;
    return undefined;
  }

  /** Records came in: wake a waiting poll, and pause the stream's fetching when the buffer is full. */
  #received(): void {
    const stream = this.#stream;
    if (stream && this.#buffer.length >= this.#maxBuffered && !stream.isPaused()) stream.pause();
    this.#wake();
  }

  /** The loop's rebalance hook, bounded so that a stuck commit cannot hold the group past its rebalance timeout. */
  async #beforeRejoin(): Promise<void> {
    const hook = this.#options.listener?.onRebalance?.();
    if (!hook || this.#closed) return;
    await settleRebalanceHook(hook);
  }

  /**
   * A join completed. Partitions kept from the previous generation keep their positions only if
   * this join follows on from the last one (same member id, next generation): a member that
   * lost its membership (session expired while paused, the broker forgot it) may have missed a
   * generation in which another member owned and committed its partitions, so all of them count
   * as revoked and assigned anew, and wait for their stable committed offsets again.
   */
  #onJoin(memberId: string, generation: number, assignments: Array<{ topic: string; partitions: number[] }>): void {
    const previous = this.#joined;
    const continuous = previous !== undefined && previous.memberId === memberId && generation === previous.generation + 1;
    this.#joined = { memberId, generation };
    const next = assignments.flatMap(({ topic, partitions }) => partitions.map((partition) => ({ topic, partition })));
    const { assigned, revoked, owned } = this.#owned.reassign(next, continuous);
    if (this.#options.stableOffsets && assigned.length) this.#holdUntilStable(assigned);
    this.#rebalancing = false;
    if (assigned.length || revoked.length) this.#options.listener?.onAssignment?.({ assigned, revoked, owned });
    this.#wake();
  }

  async start(): Promise<void> {
    try {
      this.#stream = await this.#consumer.consume({
        topics: this.#options.topics,
        mode: "committed",
        fallbackMode: this.#options.offsetReset,
        autocommit: false,
        highWaterMark: 1024,
      });
    } catch (error) {
      const sorted = classify(error, `joining group ${this.#options.groupId}`);
      // An input the broker does not know yet (it restarted): join again (see unknownTopic).
      throw unknownTopic(error) ? new FvError("KAFKA_RETRYABLE", sorted.message, { cause: error }) : sorted;
    }
    // Flowing mode with pause/resume for backpressure: the path the library's fetch loop
    // restarts reliably (pull mode with read() stalled after rebalances here).
    const stream = this.#stream;
    // Records come through the stream only for a topic #topicOf did not know (see #takeFetches).
    stream.on("data", (message: LibraryMessage) => {
      this.#buffer.push(toInbound(message));
      this.#received();
    });
    stream.on("error", (error: unknown) => {
      this.#error = error;
      this.#wake();
    });
  }

  #wake(): void {
    const waiter = this.#waiter;
    this.#waiter = undefined;
    waiter?.();
  }

  #drain(max: number, out: InboundRecord[]): void {
    if (this.#rebalancing) return;
    const buffer = this.#buffer;
    const kept: InboundRecord[] = [];
    let taken = 0;
    while (out.length < max && taken < buffer.length) {
      const message = buffer[taken++]!;
      if (this.#held.size && this.#held.has(key(message.topic, message.partition))) {
        kept.push(message);
        continue;
      }
      // A record of a partition revoked since it was fetched (its new owner reads it again), or
      // one a rejoin rewound over: skipped.
      if (this.#owned.accept(message.topic, message.partition, message.offset)) out.push(message);
    }
    this.#buffer = kept.length ? kept.concat(buffer.slice(taken)) : taken === buffer.length ? [] : buffer.slice(taken);
    const stream = this.#stream!;
    if (stream.isPaused() && this.#buffer.length < this.#maxBuffered / 2 && !this.#closed) stream.resume();
  }

  /**
   * The library reads committed offsets without require_stable, so right after a rebalance it
   * can start a partition from an offset that the previous owner's pending transaction is about
   * to move. Read the stable offset (the broker answers UNSTABLE_OFFSET_COMMIT until pending
   * transactions end: committed, aborted, or timed out after the transaction timeout) and skip
   * below it. Patient: a crashed owner's transaction lasts up to the transaction timeout.
   */
  #holdUntilStable(partitions: TopicPartition[]): void {
    for (const tp of partitions) this.#held.set(key(tp.topic, tp.partition), tp);
    const admin = new PltAdmin({ clientId: `${this.#options.clientId}-stable`, bootstrapBrokers: this.#brokers });
    const topics = [...byTopic(partitions)].map(([name, partitionIndexes]) => ({ name, partitionIndexes }));
    const until = Date.now() + STABLE_OFFSETS_WAIT_MS;
    const attempt = async (): Promise<void> => {
      try {
        const groups = await admin.listConsumerGroupOffsets({ groups: [{ groupId: this.#options.groupId, topics }], requireStable: true });
        for (const t of groups[0]?.topics ?? []) {
          for (const p of t.partitions) {
            if (!this.#held.has(key(t.name, p.partitionIndex))) continue; // revoked meanwhile
            this.#owned.skipBelow(t.name, p.partitionIndex, p.committedOffset);
          }
        }
      } catch (error) {
        // UNSTABLE_OFFSET_COMMIT: wait for as long as it lasts (the loop reports a long wait); other errors for a while.
        const unstable = unstableOffsetCommit(error);
        if ((unstable || Date.now() < until) && !this.#closed && partitions.some((tp) => this.#held.has(key(tp.topic, tp.partition)))) {
          await delay(unstable ? 200 : 100);
          return attempt();
        }
        if (!this.#closed) this.#error ??= classify(error, `reading the stable committed offsets of group ${this.#options.groupId}`);
      }
      for (const tp of partitions) this.#held.delete(key(tp.topic, tp.partition));
      this.#wake();
    };
    void attempt().finally(() => admin.close().catch(() => {}));
  }

  generation(): number {
    return this.#consumer.generationId;
  }

  held(): TopicPartition[] {
    return [...this.#held.values()].filter((tp) => this.#owned.has(tp.topic, tp.partition));
  }

  /** Who this member is now; a transaction of this client finds the library consumer from it (`GroupMembers`). */
  groupMetadata(): GroupMetadata {
    const c = this.#consumer;
    return this.#members.issue({ groupId: c.groupId, generationId: c.generationId, memberId: c.memberId ?? "" }, c);
  }

  /** The library consumer (the port suite emits its group events). */
  get raw(): PltConsumer {
    return this.#consumer;
  }

  async poll(max: number, timeoutMs: number): Promise<InboundRecord[]> {
    if (!this.#stream) throw new FvError("KAFKA_FATAL", "poll before start");
    if (this.#error) throw classify(this.#error, "fetching");
    const out: InboundRecord[] = [];
    this.#drain(max, out);
    if (out.length > 0 || this.#closed) return out;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        this.#waiter = undefined;
        resolve();
      }, timeoutMs);
      this.#waiter = () => {
        clearTimeout(timer);
        resolve();
      };
    });
    if (this.#error) throw classify(this.#error, "fetching");
    this.#drain(max, out);
    return out;
  }

  async commit(offsets: CommitOffset[]): Promise<void> {
    if (offsets.length === 0) return;
    try {
      await this.#consumer.commit({ offsets: offsets.map((o) => ({ ...o, leaderEpoch: -1 })) });
    } catch (error) {
      throw classify(error, "committing offsets");
    }
  }

  owned(): TopicPartition[] {
    return this.#owned.list();
  }

  async endOffsets(): Promise<CommitOffset[]> {
    try {
      const ends = await this.#consumer.listOffsets({ topics: this.#options.topics, isolationLevel: READ_COMMITTED });
      return [...ends].flatMap(([topic, offsets]) => offsets.map((offset, partition) => ({ topic, partition, offset })));
    } catch (error) {
      throw classify(error, "listing end offsets");
    }
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#wake();
    try {
      await this.#stream?.close();
    } finally {
      await this.#consumer.close(true);
    }
  }
}
