/** Admin on @platformatic/kafka: topics, committed offsets, and whole partitions read for a state restore. */
import { delay } from "../../async.ts";
import { Admin as PltAdmin, Consumer as PltConsumer } from "@platformatic/kafka";
import { FvError } from "../../errors.ts";
import { filterAbortedTransactions } from "../aborted-transactions.ts";
import type { Admin, CommitOffset, InboundRecord, TopicSpec } from "../port.ts";
import { byTopic, createMissingTopics, partitionsOf } from "../shared.ts";
import { STABLE_OFFSETS_WAIT_MS } from "./consumer.ts";
import { classify, topicAlreadyExists, unstableOffsetCommit } from "./errors.ts";
import { type LibraryMessage, READ_COMMITTED, toInbound } from "./records.ts";

/** A state restore read without progress for this long starts over from where it got, at most this many times. */
const READ_STALL_MS = 10_000;
const READ_ATTEMPTS = 5;

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

  async readPartition(topic: string, partition: number): Promise<InboundRecord[]> {
    const out: InboundRecord[] = [];
    let end = -1n;
    // A read that makes no progress for a while starts over from where it got, with a fresh
    // consumer: the library's fetch loop was seen to stall (docs/ARCHITECTURE.md, known issues).
    for (let attempt = 1; ; attempt++) {
      const next = out.length ? out[out.length - 1]!.offset + 1n : 0n;
      const result = await this.#readFrom(topic, partition, next, end, out);
      end = result.end;
      if (result.done) return out;
      if (attempt >= READ_ATTEMPTS) {
        throw new FvError("KAFKA_RETRYABLE", `reading ${topic}[${partition}] made no progress after ${attempt} attempts (at offset ${result.position} of ${end})`);
      }
    }
  }

  /** Reads `topic[partition]` from `from` up to its end into `out`; `done: false` when it stalled first. */
  async #readFrom(topic: string, partition: number, from: bigint, knownEnd: bigint, out: InboundRecord[]): Promise<{ done: boolean; end: bigint; position: bigint }> {
    // A throwaway group with a manual start offset; other partitions start at their end.
    const consumer = new PltConsumer({
      groupId: `fv-restore-${crypto.randomUUID()}`,
      clientId: `${this.#clientId}-restore`,
      bootstrapBrokers: this.#brokers,
      autocommit: false,
      maxWaitTime: 100,
    });
    filterAbortedTransactions(consumer);
    // A failed group rejoin is emitted as "error"; the stall watchdog below retries the read.
    consumer.on("error", () => {});
    let position = from;
    try {
      let end = knownEnd;
      if (end < 0n) {
        const ends = await consumer.listOffsets({ topics: [topic], isolationLevel: READ_COMMITTED });
        end = ends.get(topic)?.[partition] ?? 0n;
      }
      if (from >= end) return { done: true, end, position };
      const stream = await consumer.consume({ topics: [topic], mode: "manual", offsets: [{ topic, partition, offset: from }], autocommit: false });
      const key = `${topic}:${partition}`;
      let progressAt = Date.now();
      const done = await new Promise<boolean>((resolve, reject) => {
        const watchdog = setInterval(() => {
          if (Date.now() - progressAt > READ_STALL_MS) {
            clearInterval(watchdog);
            resolve(false);
          }
        }, 500);
        const check = () => {
          const fetched = stream.offsetsToFetch.get(key) ?? 0n;
          if (fetched > position) {
            position = fetched;
            progressAt = Date.now();
          }
          if (fetched >= end) {
            clearInterval(watchdog);
            resolve(true);
          }
        };
        stream.on("data", (message: LibraryMessage) => {
          if (message.partition !== partition || message.offset >= end || message.offset < from) return;
          if (out.length && message.offset <= out[out.length - 1]!.offset) return;
          out.push(toInbound(message));
          progressAt = Date.now();
        });
        stream.on("fetch", check);
        stream.on("error", (error) => {
          clearInterval(watchdog);
          reject(error);
        });
      });
      await Promise.race([stream.close(), delay(5000)]);
      return { done, end, position };
    } catch (error) {
      throw classify(error, `reading ${topic}[${partition}]`);
    } finally {
      await Promise.race([Promise.resolve(consumer.close(true)).catch(() => {}), delay(5000)]);
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

  async close(): Promise<void> {
    await this.#admin.close();
  }
}
