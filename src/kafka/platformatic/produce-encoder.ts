/**
 * A leaner encoder for Produce v11 requests: the bytes @platformatic/kafka's own
 * `produceV11.createRequest` writes, built in one Buffer.
 *
 * Why: the library builds each record as a Writer of small buffers (one per varint, key and
 * value), appends it to a DynamicBuffer, concatenates the whole batch once for its CRC and once
 * more for the socket. Keys and values must be Buffers first, so every string value of a
 * pipeline was also encoded into a Buffer of its own. In a stateless exactly-once run that was a
 * fifth of the samples (record writers, `Buffer.from`, `concat`, allocations). Here sizes are
 * counted first, each record is written in place (strings encoded straight into the request), and
 * the CRC is taken over one contiguous range.
 *
 * The wire format is Kafka's (record batch v2, Produce v11), byte for byte what the library
 * writes for the same messages (test/kafka/produce-encoder.test.ts compares them), except for
 * records more than 2^31 ms (about 25 days) apart in one batch, whose timestamp delta the
 * library's 64-bit zigzag varint gets wrong and this one writes as Kafka reads it. Compressed
 * sends, and brokers that agree on another Produce version, keep the library's path.
 */
import { Buffer } from "node:buffer";
import { crc32c, produceV11, Writer } from "@platformatic/kafka";
import { wrapApi } from "./api-hook.ts";

/** A message as the library's producer hands it to its Produce API (after its partitioner). */
export interface ProduceMessage {
  topic: string;
  partition: number;
  key?: Uint8Array | string | null;
  value?: Uint8Array | string | null;
  headers?: Map<Uint8Array | string, Uint8Array | string | null | undefined> | null;
  timestamp?: bigint | number;
}

export interface ProduceOptions {
  transactionalId?: string;
  producerId?: bigint;
  producerEpoch?: number;
  sequences?: { getWithDefault(key: string, fallback: number): number };
  compression?: string;
}

const IS_TRANSACTIONAL = 1 << 4;
/** baseOffset(8) length(4) leaderEpoch(4) magic(1) crc(4) attributes(2) lastOffsetDelta(4) firstTs(8) maxTs(8) producerId(8) epoch(2) baseSequence(4) count(4). */
const BATCH_HEADER = 61;
/** Where the CRC'd part of a batch starts (its attributes), and where the CRC is. */
const CRC_FROM = 21;
const CRC_AT = 17;

/** Buffer#utf8Write where the runtime has it (Node, Bun: twice as fast as `write` on Bun), else `write`. */
// deno-lint-ignore no-explicit-any
const writeUtf8: (buf: Buffer, s: string, at: number, length: number) => number = typeof (Buffer.prototype as any).utf8Write === "function"
  // deno-lint-ignore no-explicit-any
  ? (buf, s, at, length) => (buf as any).utf8Write(s, at, length)
  : (buf, s, at, length) => buf.write(s, at, length, "utf8");

const byteLength = (data: Uint8Array | string): number => (typeof data === "string" ? Buffer.byteLength(data, "utf8") : data.byteLength);

/** Bytes of Kafka's zigzag varint of a 32-bit signed value. */
function varIntSize(value: number): number {
  return unsignedVarIntSize(((value << 1) ^ (value >> 31)) >>> 0);
}

function unsignedVarIntSize(value: number): number {
  let size = 1;
  while (value >= 0x80) {
    value = Math.floor(value / 128);
    size++;
  }
  return size;
}

/** Zigzag of a 64-bit signed value held in a number (timestamps and their deltas are safe integers). */
const zigzag64 = (value: number): number => (value >= 0 ? value * 2 : -value * 2 - 1);

/** A request in the making: one Buffer and a cursor. */
class Out {
  readonly buf: Buffer;
  at = 0;
  constructor(size: number) {
    this.buf = Buffer.allocUnsafe(size);
  }
  int8(v: number) {
    this.buf[this.at++] = v;
  }
  int16(v: number) {
    this.buf.writeInt16BE(v, this.at);
    this.at += 2;
  }
  int32(v: number) {
    this.buf.writeInt32BE(v, this.at);
    this.at += 4;
  }
  int64(v: bigint) {
    this.buf.writeBigInt64BE(v, this.at);
    this.at += 8;
  }
  /** Unsigned varint, for values up to Number.MAX_SAFE_INTEGER. */
  uvarint(v: number) {
    while (v >= 0x80) {
      this.buf[this.at++] = (v % 128) | 0x80;
      v = Math.floor(v / 128);
    }
    this.buf[this.at++] = v;
  }
  varint(v: number) {
    this.uvarint(((v << 1) ^ (v >> 31)) >>> 0);
  }
  bytes(data: Uint8Array | string, length: number) {
    if (typeof data === "string") writeUtf8(this.buf, data, this.at, length);
    else this.buf.set(data, this.at);
    this.at += length;
  }
  /** COMPACT_STRING / COMPACT_NULLABLE_STRING. */
  compactString(s: string | null | undefined) {
    if (s == null) return this.uvarint(0);
    const length = Buffer.byteLength(s, "utf8");
    this.uvarint(length + 1);
    this.bytes(s, length);
  }
}

/** Sizes of one record: its body (what its length prefix counts) and its key, value and header bytes. */
interface Sized {
  message: ProduceMessage;
  key: number;
  value: number;
  /** Each header: key, its byte length, value (null: no value), its byte length (-1: null). */
  headers: Array<[Uint8Array | string, number, Uint8Array | string | null | undefined, number]> | null;
  /** Its timestamp less the batch's first, zigzagged. */
  timestampDelta: number;
  body: number;
}

interface Batch {
  topic: string;
  partition: number;
  records: Sized[];
  firstTimestamp: number;
  maxTimestamp: number;
  size: number;
}

/**
 * A message's timestamp; one without gets `now`, kept on the message as the library keeps it, so a
 * retried send carries the same create time.
 */
const timestampOf = (message: ProduceMessage, now: number): number => Number((message.timestamp ??= now));

function sizeRecord(message: ProduceMessage, offsetDelta: number, timestampDelta: number): Sized {
  const key = message.key == null ? -1 : byteLength(message.key);
  const value = message.value == null ? -1 : byteLength(message.value);
  const delta = zigzag64(timestampDelta);
  let body = 1 + unsignedVarIntSize(delta) + varIntSize(offsetDelta) + varIntSize(key) + Math.max(key, 0) + varIntSize(value) + Math.max(value, 0);
  let headers: Sized["headers"] = null;
  const count = message.headers?.size ?? 0;
  body += varIntSize(count);
  if (count) {
    headers = [];
    for (const [k, v] of message.headers!) {
      const kl = byteLength(k);
      const vl = v == null ? -1 : byteLength(v);
      headers.push([k, kl, v, vl]);
      body += varIntSize(kl) + kl + varIntSize(vl) + Math.max(vl, 0);
    }
  }
  return { message, key, value, headers, timestampDelta: delta, body };
}

/**
 * The messages grouped by topic, then partition: topics in the order each first appears,
 * partitions in ascending order (as the library's grouping, by object keys, orders them; the
 * order means nothing to Kafka, but equal bytes are easy to test).
 */
function batchesOf(messages: ProduceMessage[], now: number): Map<string, Map<number, Batch>> {
  const topics = new Map<string, Map<number, Batch>>();
  for (const message of messages) {
    let partitions = topics.get(message.topic);
    if (!partitions) topics.set(message.topic, (partitions = new Map()));
    let batch = partitions.get(message.partition);
    const ts = timestampOf(message, now);
    if (!batch) {
      batch = { topic: message.topic, partition: message.partition, records: [], firstTimestamp: ts, maxTimestamp: ts, size: BATCH_HEADER };
      partitions.set(message.partition, batch);
    }
    if (ts > batch.maxTimestamp) batch.maxTimestamp = ts;
    const record = sizeRecord(message, batch.records.length, ts - batch.firstTimestamp);
    batch.records.push(record);
    batch.size += varIntSize(record.body) + record.body;
  }
  return topics;
}

function writeBatch(out: Out, batch: Batch, options: ProduceOptions) {
  const start = out.at;
  out.int64(0n); // baseOffset: the broker assigns it
  out.int32(batch.size - 12); // length: all that follows this field
  out.int32(0); // partitionLeaderEpoch
  out.int8(2); // magic
  out.int32(0); // crc, written below
  out.int16(options.transactionalId ? IS_TRANSACTIONAL : 0);
  out.int32(batch.records.length - 1);
  out.int64(BigInt(batch.firstTimestamp));
  out.int64(BigInt(batch.maxTimestamp));
  out.int64(options.producerId ?? -1n);
  out.int16(options.producerEpoch ?? 0);
  out.int32(options.sequences ? options.sequences.getWithDefault(`${batch.topic}:${batch.partition}`, 0) : 0);
  out.int32(batch.records.length);
  for (let i = 0; i < batch.records.length; i++) {
    const r = batch.records[i]!;
    const m = r.message;
    out.varint(r.body);
    out.int8(0); // record attributes
    out.uvarint(r.timestampDelta);
    out.varint(i);
    out.varint(r.key);
    if (r.key > 0) out.bytes(m.key!, r.key);
    out.varint(r.value);
    if (r.value > 0) out.bytes(m.value!, r.value);
    out.varint(r.headers?.length ?? 0);
    if (r.headers) {
      for (const [k, kl, v, vl] of r.headers) {
        out.varint(kl);
        out.bytes(k, kl);
        out.varint(vl);
        if (vl > 0) out.bytes(v!, vl);
      }
    }
  }
  if (out.at - start !== batch.size) throw new Error(`produce encoder: a batch of ${batch.topic}[${batch.partition}] took ${out.at - start} bytes, ${batch.size} were counted`);
  out.buf.writeUInt32BE(crc32c(out.buf.subarray(start + CRC_FROM, out.at)) >>> 0, start + CRC_AT);
}

/** The body of a Produce v11 request (what follows the request header), as one Buffer. */
export function encodeProduceV11(acks: number, timeout: number, messages: ProduceMessage[], options: ProduceOptions = {}): Buffer {
  const now = Date.now();
  const topics = batchesOf(messages, now);
  const transactionalId = options.transactionalId ?? null;
  let size = 5 + (transactionalId === null ? 0 : Buffer.byteLength(transactionalId, "utf8")) + 2 + 4 + 5 + 1;
  for (const [topic, partitions] of topics) {
    size += 5 + Buffer.byteLength(topic, "utf8") + 5 + 1;
    for (const batch of partitions.values()) size += 4 + 5 + batch.size + 1;
  }
  const out = new Out(size);
  out.compactString(transactionalId);
  out.int16(acks);
  out.int32(timeout);
  out.uvarint(topics.size + 1);
  for (const [topic, partitions] of topics) {
    out.compactString(topic);
    out.uvarint(partitions.size + 1);
    for (const batch of [...partitions.values()].sort((a, b) => a.partition - b.partition)) {
      out.int32(batch.partition);
      out.uvarint(batch.size + 1); // COMPACT_RECORDS
      writeBatch(out, batch, options);
      out.int8(0); // tagged fields of the partition
    }
    out.int8(0); // tagged fields of the topic
  }
  out.int8(0); // tagged fields of the request
  return out.buf.subarray(0, out.at);
}

const bytes = <T>(data: T | string): T | Buffer => (typeof data === "string" ? Buffer.from(data, "utf8") : data);

/** A message as the library's own encoder takes it: Buffers, not strings. */
function asBuffers(m: ProduceMessage): ProduceMessage {
  const timestamp = typeof m.timestamp === "number" ? BigInt(m.timestamp) : m.timestamp;
  return { ...m, timestamp, key: bytes(m.key), value: bytes(m.value), headers: m.headers && new Map([...m.headers].map(([k, v]) => [bytes(k), v == null ? v : bytes(v)])) };
}

/**
 * The library's Produce API with this encoder, when the version the broker and library agreed
 * on is 11 (Kafka 3.8 and up) and the send is not compressed; otherwise the library's own, with
 * string keys, values and headers turned into the Buffers it needs.
 */
// deno-lint-ignore no-explicit-any
export function leanProduce(api: any): any {
  if (api?.key !== 0) return api;
  if (api?.version !== 11) return (connection: unknown, acks: number, timeout: number, messages: ProduceMessage[], options: ProduceOptions, callback: unknown) => api(connection, acks, timeout, messages.map(asBuffers), options, callback);
  // deno-lint-ignore no-explicit-any
  return (connection: any, acks: number, timeout: number, messages: ProduceMessage[], options: ProduceOptions, callback: (error: unknown, response?: unknown) => void) => {
    if ((options?.compression ?? "none") !== "none") return api(connection, acks, timeout, messages.map(asBuffers), options, callback);
    connection.send(0, 11, () => {
      const writer = Writer.create().append(encodeProduceV11(acks, timeout, messages, options));
      if (acks === 0) writer.context.noResponse = true;
      return writer;
    }, produceV11.parseResponse, true, true, callback);
  };
}

/** Makes a library producer send with this encoder (through its protocol-API lookup: api-hook.ts). */
// deno-lint-ignore no-explicit-any
export function useLeanProduce(producer: any): void {
  wrapApi(producer, "Produce", leanProduce, "src/kafka/platformatic/produce-encoder.ts");
}
