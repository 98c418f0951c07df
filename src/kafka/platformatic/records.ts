/** Records between the port's shape and @platformatic/kafka's. */
import type { Buffer } from "node:buffer";
import type { Message, Producer } from "@platformatic/kafka";
import { murmur2 } from "../murmur2.ts";
import type { InboundRecord, OutboundRecord } from "../port.ts";
import type { LeanBatch } from "./fetch-parser.ts";
import { DecodedTexts, toBuffer } from "../shared.ts";

/** The Kafka protocol's isolation levels: read_uncommitted (0) and read_committed (1). */
export const READ_UNCOMMITTED = 0;
export const READ_COMMITTED = 1;

export type LibraryMessage = Message<Buffer, Buffer, Buffer, Buffer>;

/** Header names come on every record, the same few of them: each is decoded once (DecodedTexts, shared by this thread's consumers). */
const headerNames = new DecodedTexts();
export const headerName = (bytes: Uint8Array | null | undefined): string => headerNames.text(bytes);

export function toInbound(message: LibraryMessage): InboundRecord {
  const headers: Array<[string, Uint8Array]> = [];
  for (const [hk, hv] of message.headers) headers.push([headerName(hk), hv]);
  return {
    topic: message.topic,
    partition: message.partition,
    offset: message.offset,
    timestamp: message.timestamp,
    key: message.key ?? null,
    value: message.value ?? null,
    headers,
  };
}

/** What the library's message stream asks one broker for: each topic (by id) with its partitions' fetch offsets. */
export interface FetchRequestTopic {
  topicId: string;
  partitions: Array<{ partition: number; fetchOffset: bigint }>;
}

/** A Fetch response as far as `takeFetchedRecords` reads it (the library's shape, or fetch-parser.ts's). */
export interface FetchedRecords {
  responses: Array<{ topicId: string; partitions: Array<{ partitionIndex: number; records: LeanBatch[] | null }> }>;
}

const IS_CONTROL = 1 << 5;

/**
 * Takes the records of a Fetch response out of it, as the library's message stream would hand
 * them out, and leaves each batch in place with no records: the stream still moves its fetch
 * positions past them (from each partition's last batch) but pushes nothing. It is the same rule
 * as the stream's own: only partitions this request asked for (a partition lingering in an
 * incremental fetch session is stale), no control batches, no record below the offset asked for
 * (a batch can start before it). A topic whose name `topicOf` does not know is left to the stream.
 *
 * Why: the stream builds a message object per record (a spread of the record, a diagnostics
 * context, a bound commit function, a header Map) and pushes each through a Readable, where the
 * loop wants a plain record; that was about a tenth of a stateless exactly-once run.
 */
export function takeFetchedRecords(requested: FetchRequestTopic[], response: FetchedRecords, topicOf: (topicId: string) => string | undefined, out: InboundRecord[]): number {
  let taken = 0;
  for (const topicResponse of response.responses) {
    const topic = topicOf(topicResponse.topicId);
    if (topic === undefined) continue;
    for (const partitionResponse of topicResponse.partitions) {
      const batches = partitionResponse.records;
      if (!batches?.length) continue;
      const partition = partitionResponse.partitionIndex;
      const from = fetchOffsetOf(requested, topicResponse.topicId, partition);
      if (from === undefined) continue;
      for (const batch of batches) {
        if (batch.attributes & IS_CONTROL || batch.records.length === 0) continue;
        for (const record of batch.records) {
          const offset = batch.firstOffset + BigInt(record.offsetDelta);
          if (offset < from) continue;
          const headers: Array<[string, Uint8Array]> = [];
          for (const [hk, hv] of record.headers) headers.push([headerName(hk), hv as Uint8Array]);
          out.push({ topic, partition, offset, timestamp: batch.firstTimestamp + record.timestampDelta, key: record.key, value: record.value, headers });
          taken++;
        }
        batch.records = [];
      }
    }
  }
  return taken;
}

/** The offset a request asked for in a partition (the stream lists each partition as a topic entry of its own). */
function fetchOffsetOf(requested: FetchRequestTopic[], topicId: string, partition: number): bigint | undefined {
  for (const t of requested) {
    if (t.topicId !== topicId) continue;
    for (const p of t.partitions) if (p.partition === partition) return p.fetchOffset;
  }
  return undefined;
}

/**
 * A record as the library's producer takes it. Strings (keys, values, headers) stay strings: the
 * Produce encoder (produce-encoder.ts) writes them straight into the request, with no Buffer of
 * their own, and the partitioner hashes a string key's UTF-8 bytes.
 */
export function toMessage(r: OutboundRecord): OutgoingMessage {
  return {
    topic: r.topic,
    key: typeof r.key === "string" ? r.key : toBuffer(r.key),
    value: typeof r.value === "string" ? r.value : toBuffer(r.value),
    partition: r.partition,
    headers: r.headers?.length ? new Map(r.headers.map(([k, v]) => [k, typeof v === "string" ? v : toBuffer(v)!])) : undefined,
  };
}

export interface OutgoingMessage {
  topic: string;
  key: Buffer | string | undefined;
  value: Buffer | string | undefined;
  /** Explicit (a changelog, a watermark record), or undefined: the partitioner picks it. */
  partition: number | undefined;
  headers: Map<string, Buffer | string> | undefined;
  /**
   * Set by `partitioner`: the key's hash, before the library takes it modulo the partition count
   * (checkWritten finds the partition a keyed record went to from it, with no second hash).
   */
  hash?: number;
}

/** The library's producer as the adapters use it: values may be strings (see toMessage). */
export type LibraryProducer = Producer<Buffer | string, Buffer | string, string, Buffer | string>;

let keyless = 0;

/**
 * Kafka's default partitioner for the library's producers (src/kafka/murmur2.ts): the library
 * takes the result modulo the partition count. Its own default is not Java's (murmur2 >>> 0,
 * where Java takes & 0x7fffffff: half the keys landed elsewhere than a Java producer puts them)
 * and hashed with BigInt (11% of an exactly-once pipeline's CPU). Keyless records go round.
 */
export function partitioner(message: object, key: Buffer | string | undefined): number {
  // An empty key is a key (Java hashes every non-null key): only a missing one goes round.
  if (key == null) return (keyless = (keyless + 1) & 0x7fffffff);
  return ((message as Partial<OutgoingMessage>).hash = murmur2(key) & 0x7fffffff);
}
