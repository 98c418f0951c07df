/**
 * The narrow port the loop needs from a Kafka client. One adapter per client library implements
 * it; the loop never sees a library type.
 */

export interface TopicPartition {
  topic: string;
  partition: number;
}

/** A record read from Kafka. Key and value stay as bytes; the loop decodes them. */
export interface InboundRecord {
  topic: string;
  partition: number;
  offset: bigint;
  timestamp: bigint;
  key: Uint8Array | null;
  value: Uint8Array | null;
  headers: Array<[string, Uint8Array]>;
}

/** A record to write. No partition: the client's default partitioner picks it by key. */
export interface OutboundRecord {
  topic: string;
  key: Uint8Array | string | null;
  value: Uint8Array | string | null;
  headers?: Array<[string, Uint8Array | string]>;
  partition?: number;
}

/** The next offset to read, per partition (message offset + 1). */
export interface CommitOffset extends TopicPartition {
  offset: bigint;
}

/** Told when Kafka changes what this member owns. */
export interface AssignmentListener {
  /**
   * A rebalance started: commit what is safe to commit now, while the old generation holds.
   * The adapter rejoins (and lets go of its partitions) only once the returned promise settles,
   * as Kafka's `onPartitionsRevoked` runs before the member rejoins; meanwhile `poll` returns
   * nothing, so no work of the old generation is left open when the new one forms.
   */
  onRebalance?(): Promise<void> | void;
  /** The new assignment after a rebalance; `revoked` were owned before and are not now. */
  onAssignment?(change: { assigned: TopicPartition[]; revoked: TopicPartition[]; owned: TopicPartition[] }): void;
  /**
   * Per partition number, the changelog offset this member's local state covers (its active and
   * standby stores). An adapter whose assignor can weigh it sends it with each join, so that a
   * partition that moves goes where its state is furthest along.
   */
  warmPartitions?(): ReadonlyMap<number, bigint>;
}

/** A group member and the partition numbers it owns, as the adapter's assignor orders members. */
export interface GroupMember {
  memberId: string;
  name: string;
  partitions: number[];
}

export interface ConsumerOptions {
  groupId: string;
  clientId: string;
  topics: string[];
  offsetReset: "earliest" | "latest";
  /**
   * Exactly-once: before handing out records of a newly assigned partition, wait until its
   * committed offset is stable (no transactional commit pending) and skip records below it.
   */
  stableOffsets?: boolean;
  /** Records the client may buffer ahead of the loop. */
  maxBuffered?: number;
  /** A member silent this long leaves the group (default 10 s). */
  sessionTimeoutMs?: number;
  /**
   * Static membership (Kafka's `group.instance.id`, KIP-345): a restarted member with the same id
   * takes its place back without a rebalance, if it returns within the session timeout.
   */
  groupInstanceId?: string;
  listener?: AssignmentListener;
  /** Where the adapter says what the loop cannot see (e.g. partitions it holds, and why). */
  log?: (level: "debug" | "info" | "warn" | "error", message: string) => void;
}

/**
 * Who this member is in its group, as Kafka's `consumer.groupMetadata()`: group, generation and
 * member id. Opaque to the loop: it takes one when a transaction's first batch is processed and
 * hands it, as it is, to `sendOffsets`, so the broker refuses the offsets of a member that the
 * group has moved past (KIP-447), whatever the member has learned since. The value also stands for
 * the consumer: a transactional producer finds its library consumer from it (an adapter ties each
 * value its consumers hand out to theirs), so a copy or another client's value is refused.
 */
export interface GroupMetadata {
  readonly groupId: string;
  readonly generationId: number;
  readonly memberId: string;
}

/** A member of a consumer group that owns the partitions Kafka assigns it. */
export interface GroupConsumer {
  /** Joins the group and starts fetching. */
  start(): Promise<void>;
  /**
   * Up to `max` records of owned partitions, waiting at most `timeoutMs` for the first one.
   * Records of partitions revoked since they were fetched are not returned.
   */
  poll(max: number, timeoutMs: number): Promise<InboundRecord[]>;
  commit(offsets: CommitOffset[]): Promise<void>;
  /** The partitions owned now. */
  owned(): TopicPartition[];
  /**
   * The group generation this member is in; it changes at every rebalance, even one that gives
   * the member the same partitions back. Exactly-once never commits work of an older generation.
   */
  generation?(): number;
  /** Who this member is now (see GroupMetadata). */
  groupMetadata(): GroupMetadata;
  /**
   * Owned partitions whose records are held back until their committed offset is stable (a
   * transaction that commits offsets for them is pending): waiting, not stalled.
   */
  held?(): TopicPartition[];
  /** End offset (next offset to be written, read_committed) of each subscribed topic's partitions. */
  endOffsets(): Promise<CommitOffset[]>;
  /** Leaves the group. Idempotent. */
  close(): Promise<void>;
}

/**
 * Where a send wrote: per partition, an offset at or before the first record it wrote there (the
 * local state store covers the changelog from there; see src/state/local-store.ts). Undefined
 * when the client does not report offsets.
 */
export type Written = CommitOffset[] | undefined;

export interface Producer {
  /** Resolves once every record is acknowledged (acks=all). */
  send(records: OutboundRecord[]): Promise<Written | void>;
  close(): Promise<void>;
}

/**
 * A producer whose sends, together with consumer offsets, form one Kafka transaction.
 * A transaction begins with the first send or offsets after the previous commit or abort.
 */
export interface TransactionalProducer {
  readonly inTransaction: boolean;
  /** Registers the transactional id, fencing a predecessor with the same id; before consuming. */
  ready(): Promise<void>;
  send(records: OutboundRecord[]): Promise<Written | void>;
  /**
   * Adds the next offsets to read to the transaction, on behalf of `group` (the member as it was
   * when the transaction's work was read, from `groupMetadata()` of a consumer of the same
   * client): the broker refuses them if the group moved on.
   */
  sendOffsets(group: GroupMetadata, offsets: CommitOffset[]): Promise<void>;
  /** Commits the open transaction; nothing to do when none is open. */
  commit(): Promise<void>;
  /** Aborts the open transaction; nothing to do when none is open. */
  abort(): Promise<void>;
  /**
   * Drops offset commits of this producer that are still pending at the group's coordinator with
   * no transaction to end them: a transaction that holds only the group (AddOffsetsToTxn), aborted,
   * writes the abort marker that clears them. Such a commit reached the coordinator after its own
   * transaction ended (a request retried across a broker restart; Kafka before transaction
   * version 2 cannot tell), and holds every stable reader of its partitions until this producer's
   * next marker, which would make it the committed offset. Call it with no transaction open;
   * `group` is the consumer's `groupMetadata()` now, `held` a partition of it that waits for a
   * stable offset (some clients can only add the group to a transaction through an offset, which
   * the abort drops).
   *
   * `written`: the partitions this producer writes to. Where the client can add a partition to a
   * transaction without producing, the aborted transaction holds them too, and its abort marker
   * ends records of this producer that no marker ended: a broker that dropped a commit's markers
   * (Kafka skips the markers of a partition with no leader, e.g. in the controlled shutdown of its
   * only replica) leaves that commit's records open, and its offset commit pending; since the
   * abort drops that offset commit, the records must go too, or the producer's next commit marker
   * would make them visible beside their reprocessed copies. The pure-JS and in-memory clients do
   * this; librdkafka adds a partition only by producing to it.
   */
  releasePendingOffsets(group: GroupMetadata, held: TopicPartition, written?: readonly TopicPartition[]): Promise<void>;
  close(): Promise<void>;
}

export interface TopicSpec {
  topic: string;
  partitions: number;
  configs?: Record<string, string>;
}

export interface ReadPartitionOptions {
  /** First offset to read (the log's start when it is later). */
  from?: bigint;
  /** Hears how far the read got, before the first fetch and after each one. */
  onProgress?(progress: ReadProgress): void;
}

export interface ReadProgress {
  /** Next offset to read. */
  position: bigint;
  /** Where the read started, and where it ends (the last stable offset when it began). */
  start: bigint;
  end: bigint;
  /**
   * The log's end (high watermark), asked only when the read starts past `end`: a transaction
   * still open holds the last stable offset back, and records after it may be committed ones.
   * Otherwise `end`.
   */
  logEnd: bigint;
  /** The topic's id (Kafka's topic UUID): a topic deleted and created again has another. */
  topicId?: string;
}

export interface Admin {
  /** Partition count of each topic, or undefined for one that does not exist. */
  partitionCounts(topics: string[]): Promise<Map<string, number | undefined>>;
  /** Creates the topics that do not exist yet; existing ones are left alone. */
  createTopics(specs: TopicSpec[]): Promise<void>;
  /**
   * Every record of one partition from its start (or from offset `options.from`) to its end,
   * read_committed (state restore). `onProgress` hears the offset reached and the end, now and then.
   */
  readPartition(topic: string, partition: number, options?: ReadPartitionOptions): Promise<InboundRecord[]>;
  /**
   * Committed offsets of a group (next offset to read) per partition; -1n where none. `stable`:
   * wait until no transaction that commits offsets for them is pending (KIP-447 require_stable).
   */
  committedOffsets(groupId: string, topics: string[], options?: { stable?: boolean; partitions?: number[] }): Promise<CommitOffset[]>;
  /**
   * The group's members and what each owns, when the client can tell (standby placement, see
   * src/kafka/assignment.ts); undefined when it cannot.
   */
  groupMembers?(groupId: string): Promise<GroupMember[] | undefined>;
  close(): Promise<void>;
}

/** A Kafka client library behind the port. */
export interface KafkaClient {
  readonly name: string;
  consumer(options: ConsumerOptions): GroupConsumer;
  producer(options: { clientId: string }): Producer;
  /**
   * `transactionalId` is stable across restarts, so a restarted producer fences its predecessor.
   * `log` hears when it ends what an earlier transaction may have left open (src/kafka/leftovers.ts).
   */
  transactionalProducer(options: { clientId: string; transactionalId: string; log?: (level: "debug" | "info" | "warn" | "error", message: string) => void }): TransactionalProducer;
  admin(options: { clientId: string }): Admin;
}

export type KafkaClientFactory = (brokers: string[]) => KafkaClient;
