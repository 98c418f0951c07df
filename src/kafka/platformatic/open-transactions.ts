/**
 * Whether a transaction's markers reached the partitions it wrote to: DescribeProducers
 * (KIP-664) to each partition's leader lists the producers that hold a transaction open there,
 * with the offset where it starts.
 *
 * A broker in its controlled shutdown writes a transaction's CompleteCommit and skips the markers
 * of its leaderless partitions while it still answers every request (soak seed 106: 50 rows lost;
 * src/kafka/leftovers.ts). No error and no closed connection tells the producer; only the
 * partition itself does. The pure-JS transactional producer asks with its own connections and
 * its producer id after its hold; the librdkafka one, which knows neither, asks through a
 * `MarkerCheck` after each transaction ends, by the offset of that transaction's first record
 * in each partition.
 */
import { Admin as PltAdmin, describeProducersV0 } from "@platformatic/kafka";
import { deadline, delay as sleep } from "../../async.ts";
import type { CommitOffset, TopicPartition } from "../port.ts";
import { findSymbol } from "./api-hook.ts";
import { PartitionMap, PartitionSet } from "../topic-partition.ts";

/** The most time one round of a MarkerCheck (metadata, then a DescribeProducers to each leader) may take. */
const ROUND_MS = 2_000;

/** One producer with state in a partition, as DescribeProducers lists it (currentTxnStartOffset -1: no transaction open). */
export interface ActiveProducer {
  producerId: bigint;
  producerEpoch: number;
  currentTxnStartOffset: bigint;
}

/** What a client's `metadata()` resolves to. */
type Metadata = Awaited<ReturnType<PltAdmin["metadata"]>>;

interface DescribeProducersResponse {
  topics: Array<{ name: string; partitions: Array<{ partitionIndex: number; errorCode: number; activeProducers: ActiveProducer[] }> }>;
}

/**
 * The partitions of `partitions` that `isOpen` finds open, by DescribeProducers to each leader
 * over `client`'s own connections (any @platformatic/kafka client). A partition without a leader
 * in `metadata` counts as open. A request that fails throws; the library also fails one whose
 * answer carries an error for a partition (NOT_LEADER_OR_FOLLOWER after a leader moved), and such
 * a partition would count as open should it not. Nothing is judged closed without the leader's word.
 */
export async function askLeaders(
  client: object,
  metadata: Metadata,
  partitions: readonly TopicPartition[],
  isOpen: (tp: TopicPartition, producers: ActiveProducer[]) => boolean,
): Promise<TopicPartition[]> {
  const kGetConnection = findSymbol(client, "plt.kafka.base.getConnection");
  if (!kGetConnection) throw new Error("@platformatic/kafka changed: its connection lookup (plt.kafka.base.getConnection) is gone; src/kafka/platformatic/open-transactions.ts needs a new way to reach a partition's leader");
  const open: TopicPartition[] = [];
  const byLeader = new Map<number, TopicPartition[]>();
  for (const tp of partitions) {
    const leader = metadata.topics.get(tp.topic)?.partitions[tp.partition]?.leader;
    if (leader === undefined || leader < 0 || !metadata.brokers.has(leader)) open.push(tp);
    else byLeader.set(leader, [...(byLeader.get(leader) ?? []), tp]);
  }
  // deno-lint-ignore no-explicit-any
  const lookup = (client as any)[kGetConnection].bind(client);
  await Promise.all([...byLeader].map(async ([leader, tps]) => {
    const connection = await new Promise((resolve, reject) => lookup(metadata.brokers.get(leader), (error: unknown, c: unknown) => (error ? reject(error) : resolve(c))));
    const topics = [...new Set(tps.map((tp) => tp.topic))].map((name) => ({ name, partitionIndexes: tps.filter((tp) => tp.topic === name).map((tp) => tp.partition) }));
    const response = await new Promise<DescribeProducersResponse>((resolve, reject) =>
      // deno-lint-ignore no-explicit-any
      (describeProducersV0.api as any)(connection, topics, (error: unknown, r: DescribeProducersResponse) => (error ? reject(error) : resolve(r)))
    );
    const answered = new PartitionSet();
    for (const t of response.topics) {
      for (const p of t.partitions) {
        const tp = { topic: t.name, partition: p.partitionIndex };
        answered.add(tp);
        if (p.errorCode !== 0 || isOpen(tp, p.activeProducers)) open.push(tp);
      }
    }
    // A partition the answer leaves out was not judged.
    for (const tp of tps) if (!answered.has(tp)) open.push(tp);
  }));
  return open;
}

/**
 * For a transactional client that cannot ask with its own connections (librdkafka): asks, over a
 * pure-JS admin client of its own, whether the transaction that just ended is still open in the
 * partitions it wrote to. The transaction is recognized by where it starts in each partition (the
 * offset of its first record there, from the delivery reports): a later transaction of the same
 * producer starts further on, and another producer's cannot start at that offset.
 */
export class MarkerCheck {
  readonly #admin: PltAdmin;

  constructor(brokers: string[], clientId: string) {
    // No retries of its own, and short waits: the caller polls, and a failed round counts as still open.
    this.#admin = new PltAdmin({ clientId, bootstrapBrokers: brokers, retries: 0, timeout: ROUND_MS, connectTimeout: ROUND_MS, requestTimeout: ROUND_MS });
  }

  /**
   * The partitions of `started` (each with the offset where the transaction's first record there
   * landed) that still hold it open once `waitMs` has passed; [] as soon as none does. The
   * coordinator writes the markers after it answers EndTxn, so the first answers may still find
   * it open; each round asks again the partitions still open, with fresh metadata after a round
   * that failed (a leader may have moved) and every few rounds. A round takes at most ROUND_MS,
   * and the whole at most `waitMs` + ROUND_MS: what is unanswered by then counts as open.
   */
  async stillOpen(started: readonly CommitOffset[], waitMs: number): Promise<TopicPartition[]> {
    const until = Date.now() + waitMs;
    const startOf = new PartitionMap<bigint>();
    for (const s of started) startOf.set(s, s.offset);
    let asking: TopicPartition[] = started.map(({ topic, partition }) => ({ topic, partition }));
    let delay = 2;
    let failed = false;
    for (let round = 0;; round++) {
      const forceUpdate = failed || (round > 0 && round % 5 === 0);
      try {
        asking = await deadline((async () => {
          const metadata = await this.#admin.metadata({ topics: [...new Set(asking.map((tp) => tp.topic))], forceUpdate });
          return await askLeaders(this.#admin, metadata, asking, (tp, producers) => {
            const start = startOf.get(tp);
            return producers.some((p) => p.currentTxnStartOffset === start);
          });
        })(), Math.min(ROUND_MS, Math.max(1, until + ROUND_MS - Date.now())));
        failed = false;
      } catch {
        // Unanswered: still open, as far as anyone here knows.
        failed = true;
      }
      if (asking.length === 0 || Date.now() >= until) return asking;
      await sleep(Math.min(delay, Math.max(0, until - Date.now())));
      delay = Math.min(delay * 2, 200);
    }
  }

  async close(): Promise<void> {
    await this.#admin.close().catch(() => {});
  }
}
