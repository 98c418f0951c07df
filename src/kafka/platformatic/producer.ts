/**
 * Producing on @platformatic/kafka: sends split to stay under the broker's request limit, and
 * checked against what the library says it wrote.
 */
import { Buffer } from "node:buffer";
import { Producer as PltProducer } from "@platformatic/kafka";
import { deadline } from "../../async.ts";
import { FvError } from "../../errors.ts";
import type { CommitOffset, OutboundRecord, Producer, Written } from "../port.ts";
import { classify } from "./errors.ts";
import { partitionOfKey } from "../murmur2.ts";
import { DELIVERY_TIMEOUT_MS } from "../shared.ts";
import { type LibraryProducer, type OutgoingMessage, partitioner, toMessage } from "./records.ts";
import { useLeanProduce } from "./produce-encoder.ts";

/**
 * Produce requests stay under Kafka's limits (a producer's max.request.size and the broker's
 * message.max.bytes, 1 MiB by default): a send is split into chunks of at most this many bytes,
 * sent one after another. The bytes are counted from above, with no UTF-8 encoding: a string is
 * at most 3 bytes per UTF-16 unit, and a record's framing at most 64 bytes plus its headers. (Counting
 * exactly cost a `Buffer.byteLength` per key and value: 3-4% of a stateless exactly-once run. ASCII
 * text now makes requests of about 350 KB, where 512 KB counted exactly did before.)
 *
 * A send of records all sent to an explicit partition (a state changelog) never splits a (topic,
 * partition) group, so one partition's changelog stays one atomic batch; the state topic allows
 * large batches. A send that mixes them with keyed records keeps its order instead: a
 * repartition hop's rows and the watermark records that follow them go to the same partitions,
 * and a watermark moved ahead of rows it covers makes them late downstream. (The exactly-once
 * queue joins the sends of several batches into one: grouping then moved each batch's
 * watermarks up to the first batch's, and rows were dropped as late.)
 */
export const MAX_REQUEST_BYTES = 1024 * 1024;

export function chunkBySize<T extends { topic: string; partition?: number; key?: Buffer | string; value?: Buffer | string; headers?: Map<string, Buffer | string> }>(messages: T[]): T[][] {
  const chunks: T[][] = [];
  let current: T[] = [];
  let bytes = 0;
  const add = (size: number) => {
    if (current.length && bytes + size > MAX_REQUEST_BYTES) {
      chunks.push(current);
      current = [];
      bytes = 0;
    }
    bytes += size;
  };
  if (!messages.every((m) => m.partition !== undefined)) {
    // Keyed (or mixed): in order, one record at a time.
    for (const m of messages) {
      add(mostBytesOf(m));
      current.push(m);
    }
  } else {
    // A changelog: its explicit-partition groups together, in the order each first appears.
    const byPartition = new Map<string, T[]>();
    for (const m of messages) {
      const k = `${m.topic}\u0000${m.partition}`;
      const group = byPartition.get(k);
      if (group) group.push(m);
      else byPartition.set(k, [m]);
    }
    for (const group of byPartition.values()) {
      add(group.reduce((sum, m) => sum + mostBytesOf(m), 0));
      // One by one: a spread of a partition's group (100k+ records of a window closing) overflows Node's stack.
      for (const m of group) current.push(m);
    }
  }
  if (current.length) chunks.push(current);
  return chunks;
}

/** At most how many bytes a record takes in a request. */
function mostBytesOf(m: { key?: Buffer | string; value?: Buffer | string; headers?: Map<string, Buffer | string> }): number {
  let bytes = most(m.key) + most(m.value) + 64;
  if (m.headers) for (const [k, v] of m.headers) bytes += most(k) + most(v) + 10;
  return bytes;
}
const most = (data: Buffer | string | undefined | null): number => (data == null ? 0 : typeof data === "string" ? 3 * data.length : data.length);

/**
 * Checks that a send the library acknowledged wrote to every partition it had records for: the
 * produce results name each partition written. In a fault soak, a transaction whose sends had
 * all resolved held 3 of a batch's 437 records (the rest were never written, not even aborted),
 * and its offsets committed: the rows were lost. Keyed records go where Kafka's default
 * partitioner puts them (murmur2 of the key, modulo the partition count); keyless ones are not
 * checked. A gap is retryable: the transaction aborts (exactly-once), the send is retried
 * (at-least-once). Notes in `firstOffsets` the first offset the send wrote in each partition
 * (the batch's base offset, as Kafka reports it).
 */
export function checkWritten(producer: LibraryProducer, messages: OutgoingMessage[], result: unknown, firstOffsets?: Map<string, CommitOffset>): void {
  const offsets = (result as { offsets?: Array<{ topic: string; partition: number; offset: bigint }> } | undefined)?.offsets;
  if (!offsets) return;
  if (firstOffsets) {
    for (const o of offsets) {
      const key = `${o.topic}\u0000${o.partition}`;
      const seen = firstOffsets.get(key);
      if (!seen || o.offset < seen.offset) firstOffsets.set(key, { topic: o.topic, partition: o.partition, offset: BigInt(o.offset) });
    }
  }
  const metadata = (producer as unknown as { currentMetadata?: { topics: Map<string, { partitionsCount: number }> } }).currentMetadata;
  // Per topic sent to, which partitions were written (and how many): the usual case, every
  // partition of the topic written, checks no record.
  const perTopic = new Map<string, { written: Uint8Array; count: number }>();
  for (const o of offsets) {
    let topic = perTopic.get(o.topic);
    if (!topic) perTopic.set(o.topic, (topic = { written: new Uint8Array(metadata?.topics.get(o.topic)?.partitionsCount ?? 0), count: 0 }));
    if (o.partition < topic.written.length && topic.written[o.partition] === 0) {
      topic.written[o.partition] = 1;
      topic.count++;
    }
  }
  // Messages come in runs of one topic: it is looked up once per run.
  let topic: string | undefined;
  let written: Uint8Array | undefined;
  for (const m of messages) {
    if (m.topic !== topic) {
      topic = m.topic;
      const count = metadata?.topics.get(topic)?.partitionsCount ?? 0;
      const seen = perTopic.get(topic);
      // Nothing to check: every partition written, or the partition count is unknown.
      written = count === 0 || seen?.count === count ? undefined : (seen?.written ?? new Uint8Array(count));
    }
    if (written === undefined || (m.partition === undefined && m.key == null)) continue;
    const partition = m.partition !== undefined ? m.partition % written.length : m.hash !== undefined ? m.hash % written.length : partitionOfKey(m.key!, written.length);
    if (written[partition] !== 1) {
      throw new FvError("KAFKA_RETRYABLE", `the client acknowledged a send that wrote nothing to ${m.topic}[${partition}] (${offsets.length} partitions written)`);
    }
  }
}

/**
 * Sends `records` chunk by chunk with `sendChunk`, within `ms`. The library's idempotent producer
 * retries a failed request without end: past `ms` (the delivery timeout) this fails as retryable,
 * marked `deliveryTimedOut` (not to be retried on the same producer, whose connection still
 * retries it), and writes no more chunks. Other failures are classified as `what` failing.
 */
export async function sendWithin(records: OutboundRecord[], ms: number, what: string, sendChunk: (messages: OutgoingMessage[]) => Promise<void>): Promise<void> {
  let givenUp = false;
  const sending = (async () => {
    for (const messages of chunkBySize(records.map(toMessage))) {
      if (givenUp) return;
      await sendChunk(messages);
    }
  })();
  const timedOut = () => {
    givenUp = true;
    return new FvError("KAFKA_RETRYABLE", `${what}: the brokers did not acknowledge ${records.length} record(s) within ${ms} ms (the delivery timeout); the send is given up, and the session starts again from the last commit`, { context: { deliveryTimedOut: true } });
  };
  try {
    await deadline(sending, ms, timedOut);
  } catch (error) {
    throw classify(error, what);
  }
}

export class PlatformaticProducer implements Producer {
  readonly #producer: LibraryProducer;
  readonly #deliveryTimeoutMs: number;
  constructor(brokers: string[], clientId: string, deliveryTimeoutMs = DELIVERY_TIMEOUT_MS) {
    this.#deliveryTimeoutMs = deliveryTimeoutMs;
    // Idempotent: a retried send (e.g. while a new topic's leaders settle) never writes a record twice.
    this.#producer = new PltProducer<Buffer | string, Buffer | string, string, Buffer | string>({ clientId, bootstrapBrokers: brokers, acks: -1, idempotent: true, autocreateTopics: false, partitioner });
    useLeanProduce(this.#producer);
  }

  async send(records: OutboundRecord[]): Promise<Written> {
    if (records.length === 0) return [];
    const written = new Map<string, CommitOffset>();
    await sendWithin(records, this.#deliveryTimeoutMs, "producing", async (messages) => checkWritten(this.#producer, messages, await this.#producer.send({ messages }), written));
    return [...written.values()];
  }

  async close(): Promise<void> {
    await this.#producer.close();
  }
}
