/** Admin on @platformatic/kafka: topics, committed offsets, and whole partitions read for a state restore. */
import { delay } from "../../async.ts";
import { Admin as PltAdmin, Consumer as PltConsumer } from "@platformatic/kafka";
import { FvError } from "../../errors.ts";
import { filterAbortedTransactions } from "../aborted-transactions.ts";
import { leanFetch } from "./fetch-parser.ts";
import type { Admin, CommitOffset, GroupMember, InboundRecord, ReadPartitionOptions, TopicSpec } from "../port.ts";
import { parseUserData } from "./assigner.ts";
import { byTopic, createMissingTopics, partitionsOf } from "../shared.ts";
import { STABLE_OFFSETS_WAIT_MS } from "./consumer.ts";
import { classify, topicAlreadyExists, unstableOffsetCommit } from "./errors.ts";
import { headerName, READ_COMMITTED, READ_UNCOMMITTED } from "./records.ts";

/** A state restore read without progress for this long gives up (retryable: the restore reads again). */
const READ_STALL_MS = 10_000;
/**
 * Bytes of one partition per Fetch of a state restore. Larger is slower: the library reads a
 * response through a list of its socket chunks, searched from the first for every field (a
 * 1.5M-record changelog read in 3.7 s with 32 MB fetches, 2.2 s with 4 MB).
 */
const READ_PARTITION_BYTES = 4 * 1024 * 1024;
/** The control bit of a record batch's attributes (commit and abort markers). */
const CONTROL_BATCH = 1 << 5;
const EMPTY = new Uint8Array(0);

export class PlatformaticAdmin implements Admin {
  readonly #admin: PltAdmin;
  readonly #brokers: string[];
  readonly #clientId: string;
  constructor(brokers: string[], clientId: string) {
    this.#brokers = brokers;
    this.#clientId = clientId;
    this.#admin = new PltAdmin({ clientId, bootstrapBrokers: brokers });
  }

  async partitionCounts(topics: string[]): Promise<Map<string, number | undefined>> {
    const result = new Map<string, number | undefined>();
    try {
      const existing = new Set(await this.#admin.listTopics());
      const present = topics.filter((t) => existing.has(t));
      const metadata = present.length ? await this.#admin.metadata({ topics: present, forceUpdate: true }) : undefined;
      for (const topic of topics) result.set(topic, metadata?.topics.get(topic)?.partitionsCount);
    } catch (error) {
      throw classify(error, `describing topics ${topics.join(", ")}`);
    }
    return result;
  }

  createTopics(specs: TopicSpec[]): Promise<void> {
    return createMissingTopics(specs, {
      partitionCounts: (topics) => this.partitionCounts(topics),
      create: async (spec) => {
        await this.#admin.createTopics({
          topics: [spec.topic],
          partitions: spec.partitions,
          replicas: 1,
          configs: Object.entries(spec.configs ?? {}).map(([name, value]) => ({ name, value })),
        });
      },
      alreadyExists: topicAlreadyExists,
      classify,
    });
  }

  /**
   * Reads a partition with Fetch requests of its own, sent straight to the partition's leader: no
   * consumer group to join (a join cost each restore up to a second), no message stream, and
   * fetches of up to READ_PARTITION_BYTES. read_committed, with aborted transactions dropped by
   * Kafka's own rule (../aborted-transactions.ts), up to the last stable offset at the start.
   */
  async readPartition(topic: string, partition: number, options: ReadPartitionOptions = {}): Promise<InboundRecord[]> {
    const out: InboundRecord[] = [];
    const reader = new PltConsumer({ groupId: `fv-read-${crypto.randomUUID()}`, clientId: `${this.#clientId}-read`, bootstrapBrokers: this.#brokers, autocommit: false });
    filterAbortedTransactions(reader, leanFetch);
    try {
      const end = (await reader.listOffsets({ topics: [topic], partitions: { [topic]: [partition] }, isolationLevel: READ_COMMITTED })).get(topic)?.[partition] ?? 0n;
      // The log's start: 0 unless records were deleted from the front (EARLIEST is timestamp -2).
      let position = (await reader.listOffsets({ topics: [topic], partitions: { [topic]: [partition] }, timestamp: -2n })).get(topic)?.[partition] ?? 0n;
      if (options.from !== undefined && options.from > position) position = options.from;
      const start = position;
      // The leader, once: if it moves during the read, the fetch fails retryable and the restore reads again.
      const info = (await reader.metadata({ topics: [topic] })).topics.get(topic);
      const leader = info?.partitions[partition]?.leader;
      if (!info || leader === undefined || leader < 0) throw new FvError("KAFKA_RETRYABLE", `${topic}[${partition}] has no leader to read from`);
      const logEnd = options.onProgress && start > end
        ? (await reader.listOffsets({ topics: [topic], partitions: { [topic]: [partition] }, isolationLevel: READ_UNCOMMITTED })).get(topic)?.[partition]
        : end;
      // Not known is not "the stable end": a store would be rebuilt for nothing.
      if (logEnd === undefined) throw new FvError("KAFKA_RETRYABLE", `reading the log end of ${topic}[${partition}] gave no offset`);
      const progress = () => options.onProgress?.({ position, start, end, logEnd, ...(info.id ? { topicId: String(info.id) } : {}) });
      progress();
      let idle = 0;
      while (position < end) {
        const response = await reader.fetch({
          node: leader,
          topics: [{ topicId: info.id, partitions: [{ partition, fetchOffset: position, partitionMaxBytes: READ_PARTITION_BYTES, currentLeaderEpoch: -1, lastFetchedEpoch: -1 }] }],
          isolationLevel: READ_COMMITTED,
          maxBytes: READ_PARTITION_BYTES,
          maxWaitTime: 100,
        });
        const fetched = response.responses[0]?.partitions.find((p) => p.partitionIndex === partition);
        const before = position;
        for (const batch of fetched?.records ?? []) {
          const next = batch.firstOffset + BigInt(batch.lastOffsetDelta) + 1n;
          if (!(batch.attributes & CONTROL_BATCH)) {
            for (const record of batch.records) {
              const offset = batch.firstOffset + BigInt(record.offsetDelta);
              if (offset < position || offset >= end) continue;
              out.push({
                topic,
                partition,
                offset,
                timestamp: batch.firstTimestamp + record.timestampDelta,
                key: record.key ?? null,
                value: record.value ?? null,
                headers: record.headers.map(([k, v]) => [headerName(k), v ?? EMPTY]),
              });
            }
          }
          if (next > position) position = next;
        }
        // A fetch that moves nothing (the stable offset not reached yet, a leader moving) is asked
        // again shortly; one that never moves is a stall the restore retries.
        if (position === before && ++idle * 100 > READ_STALL_MS) {
          throw new FvError("KAFKA_RETRYABLE", `reading ${topic}[${partition}] made no progress for ${READ_STALL_MS / 1000} s (at offset ${position} of ${end})`);
        }
        if (position !== before) (idle = 0), progress();
        else await delay(100);
      }
      return out;
    } catch (error) {
      throw classify(error, `reading ${topic}[${partition}]`);
    } finally {
      await Promise.race([Promise.resolve(reader.close(true)).catch(() => {}), delay(5000)]);
    }
  }

  async committedOffsets(groupId: string, topics: string[], options: { stable?: boolean; partitions?: number[] } = {}): Promise<CommitOffset[]> {
    const counts = await this.partitionCounts(topics);
    const wanted = [...byTopic(partitionsOf(counts, options.partitions))].map(([name, partitionIndexes]) => ({ name, partitionIndexes }));
    const until = Date.now() + STABLE_OFFSETS_WAIT_MS;
    for (;;) {
      try {
        const groups = await this.#admin.listConsumerGroupOffsets({ groups: [{ groupId, topics: wanted }], ...(options.stable ? { requireStable: true } : {}) });
        const out: CommitOffset[] = [];
        for (const group of groups) {
          for (const t of group.topics) {
            for (const p of t.partitions) out.push({ topic: t.name, partition: p.partitionIndex, offset: p.committedOffset });
          }
        }
        return out;
      } catch (error) {
        // UNSTABLE_OFFSET_COMMIT: a transaction that commits these offsets is still pending.
        if (options.stable && unstableOffsetCommit(error) && Date.now() < until) {
          await delay(100);
          continue;
        }
        throw classify(error, `reading committed offsets of ${groupId}`);
      }
    }
  }

  async groupMembers(groupId: string): Promise<GroupMember[] | undefined> {
    let group;
    try {
      group = (await this.#admin.describeGroups({ groups: [groupId] })).get(groupId);
    } catch (error) {
      throw classify(error, `describing group ${groupId}`);
    }
    if (!group || String(group.state).toUpperCase() !== "STABLE") return undefined;
    return [...group.members.values()].map((m) => {
      const { name } = parseUserData(m.id, m.metadata?.metadata as Buffer | undefined);
      const partitions = new Set<number>();
      for (const a of m.assignments?.values() ?? []) for (const p of a.partitions) partitions.add(p);
      return { memberId: m.id, name, partitions: [...partitions].sort((a, b) => a - b) };
    });
  }

  async close(): Promise<void> {
    await this.#admin.close();
  }
}
