/** Admin on librdkafka: topics, end offsets, committed offsets, and whole partitions read for a state restore. */
import type * as Rd from "@confluentinc/kafka-javascript";
import { FvError } from "../../errors.ts";
import type { Admin, CommitOffset, GroupMember, InboundRecord, ReadPartitionOptions, TopicSpec } from "../port.ts";
import { createMissingTopics, InFlight, partitionsOf } from "../shared.ts";
import { classify, topicAlreadyExists } from "./errors.ts";
import { ADMIN_TIMEOUT_MS, call, connect, disconnect, FETCH_MAX_WAIT_MS, type Library, toInbound } from "./library.ts";

/** Partition counts of the topics that exist (undefined for the others). */
async function partitionCountsOf(admin: Rd.IAdminClient, topics: string[]): Promise<Map<string, number | undefined>> {
  const existing = new Set(await call<string[]>((cb) => admin.listTopics({ timeout: ADMIN_TIMEOUT_MS }, cb)));
  const present = topics.filter((t) => existing.has(t));
  const result = new Map<string, number | undefined>(topics.map((t) => [t, undefined]));
  if (present.length === 0) return result;
  const described = await call<Rd.TopicDescription[]>((cb) => admin.describeTopics(present, { timeout: ADMIN_TIMEOUT_MS }, cb));
  for (const d of described) if (!d.error) result.set(d.name, d.partitions.length);
  return result;
}

/** End offsets (next offset to be written, read_committed) of every partition of the topics. */
export async function latestOffsets(lib: Library, admin: Rd.IAdminClient, topics: string[], stable = true): Promise<CommitOffset[]> {
  const wanted: Rd.TopicPartitionOffsetSpec[] = partitionsOf(await partitionCountsOf(admin, topics)).map((tp) => ({ ...tp, offset: lib.OffsetSpec.LATEST }));
  if (wanted.length === 0) return [];
  const result = await call<Rd.ListOffsetsResult[]>((cb) =>
    admin.listOffsets(wanted, { timeout: ADMIN_TIMEOUT_MS, isolationLevel: stable ? lib.IsolationLevel.READ_COMMITTED : lib.IsolationLevel.READ_UNCOMMITTED }, cb)
  );
  return result.filter((r) => !r.error).map((r) => ({ topic: r.topic, partition: r.partition, offset: BigInt(r.offset) }));
}

export class ConfluentAdmin implements Admin {
  readonly #lib: Library;
  readonly #brokers: string[];
  readonly #clientId: string;
  readonly #admin: Rd.IAdminClient;
  /** Requests in flight; close waits for them before it frees the native handle. */
  readonly #calls = new InFlight();
  /** Consumers that read a group's committed offsets, by "stable|latest:group" (see #offsetReader). */
  readonly #offsetReaders = new Map<string, Promise<Rd.KafkaConsumer>>();
  #closed = false;

  constructor(lib: Library, brokers: string[], clientId: string) {
    this.#lib = lib;
    this.#brokers = brokers;
    this.#clientId = clientId;
    this.#admin = lib.AdminClient.create({ "bootstrap.servers": brokers.join(","), "client.id": clientId });
  }

  /** Runs one request, tracked so close waits for it; after close, requests fail cleanly. */
  #track<T>(what: string, request: () => Promise<T>): Promise<T> {
    if (this.#closed) return Promise.reject(new FvError("KAFKA_FATAL", `${what}: the admin client is closed`));
    return this.#calls.track(request());
  }

  partitionCounts(topics: string[]): Promise<Map<string, number | undefined>> {
    return this.#track("describing topics", async () => {
      try {
        return await partitionCountsOf(this.#admin, topics);
      } catch (error) {
        throw classify(error, `describing topics ${topics.join(", ")}`);
      }
    });
  }

  createTopics(specs: TopicSpec[]): Promise<void> {
    return this.#track("creating topics", () =>
      createMissingTopics(specs, {
        partitionCounts: (topics) => this.partitionCounts(topics),
        create: (spec) =>
          call((cb) =>
            this.#admin.createTopic(
              // deno-lint-ignore no-explicit-any
              { topic: spec.topic, num_partitions: spec.partitions, replication_factor: 1, config: (spec.configs ?? {}) as any },
              ADMIN_TIMEOUT_MS,
              cb,
            )
          ),
        alreadyExists: topicAlreadyExists,
        classify,
      }));
  }

  /**
   * Every record of one partition, read_committed: a consumer without a group assigned to the
   * partition from its start reads until its position reaches the end offset read before.
   */
  readPartition(topic: string, partition: number, options: ReadPartitionOptions = {}): Promise<InboundRecord[]> {
    return this.#track("reading a partition", () => this.#readPartition(topic, partition, options));
  }

  async #readPartition(topic: string, partition: number, options: ReadPartitionOptions): Promise<InboundRecord[]> {
    const out: InboundRecord[] = [];
    const [end] = (await latestOffsets(this.#lib, this.#admin, [topic]).catch((error) => {
      throw classify(error, `reading the end of ${topic}[${partition}]`);
    })).filter((o) => o.partition === partition);
    const from = options.from ?? 0n;
    let topicId: string | undefined;
    if (options.onProgress) {
      const [described] = await call<Rd.TopicDescription[]>((cb) => this.#admin.describeTopics([topic], { timeout: ADMIN_TIMEOUT_MS }, cb)).catch((error) => {
        throw classify(error, `describing ${topic}`);
      });
      topicId = described?.topicId?.base64str;
    }
    const stableEnd = end?.offset ?? 0n;
    let logEnd = stableEnd;
    if (options.onProgress && from > stableEnd) {
      const [last] = (await latestOffsets(this.#lib, this.#admin, [topic], false).catch((error) => {
        throw classify(error, `reading the log end of ${topic}[${partition}]`);
      })).filter((o) => o.partition === partition);
      // Not known is not "the stable end": a store would be rebuilt for nothing.
      if (!last) throw new FvError("KAFKA_RETRYABLE", `reading the log end of ${topic}[${partition}] gave no offset`);
      if (last.offset > logEnd) logEnd = last.offset;
    }
    const progress = (position: bigint) => options.onProgress?.({ position, start: from, end: stableEnd, logEnd, ...(topicId ? { topicId } : {}) });
    progress(from);
    if (!end || end.offset <= 0n || end.offset <= from) return out;
    const consumer = new this.#lib.KafkaConsumer({
      "bootstrap.servers": this.#brokers.join(","),
      "group.id": `fv-restore-${crypto.randomUUID()}`,
      "client.id": `${this.#clientId}-restore`,
      "enable.auto.commit": false,
      "enable.auto.offset.store": false,
      "isolation.level": "read_committed",
      "enable.partition.eof": true,
      // A `from` before the log's start (records deleted from the front) reads from the start.
      "auto.offset.reset": "earliest",
      "fetch.wait.max.ms": FETCH_MAX_WAIT_MS,
    });
    let atEnd = false;
    consumer.on("partition.eof", (eof) => {
      if (eof.topic === topic && eof.partition === partition && BigInt(eof.offset) >= end.offset) atEnd = true;
    });
    try {
      await connect(consumer);
      consumer.setDefaultConsumeTimeout(200);
      // From `from`, or the beginning (-2, OFFSET_BEGINNING); an offset before the log's start resets to it.
      consumer.assign([{ topic, partition, offset: from > 0n ? Number(from) : -2 }]);
      const deadline = Date.now() + 60_000;
      while (!atEnd) {
        const messages = await call<Rd.Message[]>((cb) => consumer.consume(1000, cb));
        for (const m of messages) if (BigInt(m.offset) < end.offset) out.push(toInbound(m));
        const position = consumer.position([{ topic, partition }])[0]?.offset;
        if (position !== undefined && position >= 0) progress(BigInt(position));
        if (position !== undefined && position >= 0 && BigInt(position) >= end.offset) break;
        if (Date.now() > deadline) throw new FvError("KAFKA_RETRYABLE", `reading ${topic}[${partition}] did not reach offset ${end.offset} within 60 s`);
      }
      return out;
    } catch (error) {
      throw classify(error, `reading ${topic}[${partition}]`);
    } finally {
      await disconnect(consumer);
    }
  }

  committedOffsets(groupId: string, topics: string[], options: { stable?: boolean; partitions?: number[] } = {}): Promise<CommitOffset[]> {
    return this.#track("reading committed offsets", () => this.#committedOffsets(groupId, topics, options));
  }

  async #committedOffsets(groupId: string, topics: string[], options: { stable?: boolean; partitions?: number[] }): Promise<CommitOffset[]> {
    const counts = await partitionCountsOf(this.#admin, topics).catch((error) => {
      throw classify(error, `describing topics ${topics.join(", ")}`);
    });
    const partitions: Rd.TopicPartition[] = partitionsOf(counts, options.partitions);
    if (partitions.length === 0) return [];
    try {
      const reader = await this.#offsetReader(groupId, options.stable ?? false);
      const committed = await call<Array<Rd.TopicPartitionOffset | Error>>((cb) => reader.committed(partitions, ADMIN_TIMEOUT_MS, cb));
      // A partition that failed (e.g. UNSTABLE_OFFSET_COMMIT) comes back as an Error in its place,
      // with no topic or offset: it is not "no commit yet".
      const failed = committed.findIndex((p) => p instanceof Error);
      if (failed >= 0) {
        const tp = partitions[failed]!;
        throw new FvError("KAFKA_RETRYABLE", `reading the committed offset of ${tp.topic}:${tp.partition} failed: ${(committed[failed] as Error).message}`);
      }
      // No commit yet: librdkafka gives OFFSET_INVALID, which the binding hands over as no offset.
      return (committed as Rd.TopicPartitionOffset[]).map((p) => ({
        topic: p.topic,
        partition: p.partition,
        offset: typeof p.offset !== "number" || p.offset < 0 ? -1n : BigInt(p.offset),
      }));
    } catch (error) {
      throw classify(error, `reading committed offsets of ${groupId}`);
    }
  }

  /**
   * A consumer of the group that never joins it, for reading its committed offsets. Not the admin
   * client's ListConsumerGroupOffsets: librdkafka (2.15.1 here) dereferences the admin handle's
   * missing consumer group when that answers NOT_COORDINATOR, which a broker restart brings, and
   * the process dies with SIGSEGV (librdkafka issue #5040, confluent-kafka-javascript #374). A
   * consumer has its group, so the same answer is retried. read_committed makes librdkafka ask
   * for stable offsets (RequireStable, KIP-447).
   */
  #offsetReader(groupId: string, stable: boolean): Promise<Rd.KafkaConsumer> {
    const key = `${stable ? "stable" : "latest"}:${groupId}`;
    let reader = this.#offsetReaders.get(key);
    if (!reader) {
      const consumer = new this.#lib.KafkaConsumer({
        "bootstrap.servers": this.#brokers.join(","),
        "group.id": groupId,
        "client.id": `${this.#clientId}-offsets`,
        "enable.auto.commit": false,
        "isolation.level": stable ? "read_committed" : "read_uncommitted",
      });
      reader = connect(consumer).then(() => consumer);
      reader.catch(() => this.#offsetReaders.delete(key));
      this.#offsetReaders.set(key, reader);
    }
    return reader;
  }

  /**
   * The members of a stable group and the partition numbers each owns. A member's name is its
   * group instance id (static membership), else its client id: what the session names itself by.
   */
  groupMembers(groupId: string): Promise<GroupMember[] | undefined> {
    return this.#track("describing the group", async () => {
      let described: Rd.GroupDescriptions;
      try {
        described = await call<Rd.GroupDescriptions>((cb) => this.#admin.describeGroups([groupId], { timeout: ADMIN_TIMEOUT_MS }, cb));
      } catch (error) {
        throw classify(error, `describing group ${groupId}`);
      }
      const group = described.groups.find((g) => g.groupId === groupId);
      // librdkafka's ConsumerGroupStates.STABLE (3); the enum is not importable as a type-only import.
      if (!group || group.error || group.state !== (3 as Rd.ConsumerGroupStates)) return undefined;
      return group.members.map((m) => ({
        memberId: m.memberId,
        name: m.groupInstanceId || m.clientId,
        partitions: [...new Set((m.assignment?.topicPartitions ?? []).map((tp) => tp.partition))].sort((a, b) => a - b),
      }));
    });
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#calls.settled();
    const readers = await Promise.allSettled([...this.#offsetReaders.values()]);
    await Promise.all(readers.map((r) => (r.status === "fulfilled" ? disconnect(r.value) : undefined)));
    this.#admin.disconnect();
  }
}
