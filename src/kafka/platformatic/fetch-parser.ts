/**
 * A leaner parser for Fetch v17 responses, in the shape @platformatic/kafka's own parser gives
 * (`fetchV17.parseResponse`), so the library's consumer and our restore reader take it unchanged.
 *
 * Why: the library reads every field of a response through a DynamicBuffer, a list of the socket's
 * chunks searched from the first one for each read, and through a generic Reader. For a fetch of
 * a megabyte of small records that was most of the consume path: dynamic-buffer and the record
 * reader took about a fifth of a stateless exactly-once run's samples. Here the few fields around
 * the records are read with the library's Reader as before, and each partition's records section
 * is copied once into one Buffer and read straight from it. Keys, values and header bytes are views
 * of that copy, as the library's are views of its chunks.
 *
 * Nothing else changes: the same fields and types (offsets and timestamps bigint), control and
 * transactional batches as they are (read_committed filtering stays in ../aborted-transactions.ts),
 * compressed batches decompressed with the library's own codecs, and a partition or response error
 * thrown as the library's ResponseError.
 */
import { Buffer } from "node:buffer";
import { compressionsAlgorithmsByBitmask, fetchV17, type Reader, readKnownTaggedFields, ResponseError } from "@platformatic/kafka";

const IS_COMPRESSED = 0b111;
/** firstOffset (int64) + length (int32): what a batch must have for its length to be read. */
const BATCH_HEAD = 12;
/** Where a batch's records start: after its 61 bytes of header (the record count last). */
const RECORDS_AT = 61;

export interface LeanRecord {
  length: number;
  attributes: number;
  timestampDelta: bigint;
  offsetDelta: number;
  key: Buffer | null;
  value: Buffer | null;
  headers: Array<[Buffer | null, Buffer | null]>;
}

export interface LeanBatch {
  firstOffset: bigint;
  length: number;
  partitionLeaderEpoch: number;
  magic: number;
  crc: number;
  attributes: number;
  lastOffsetDelta: number;
  firstTimestamp: bigint;
  maxTimestamp: bigint;
  producerId: bigint;
  producerEpoch: number;
  firstSequence: number;
  records: LeanRecord[];
}

const ZERO = 0n;

/** Reads varints and bytes from one Buffer. */
class Cursor {
  position = 0;
  constructor(readonly buffer: Buffer) {}

  /** An unsigned varint of up to 32 bits (5 bytes at most). */
  unsignedVarInt(): number {
    const b = this.buffer;
    let value = 0;
    for (let shift = 0; shift <= 28; shift += 7) {
      if (this.position >= b.length) throw new RangeError("a record ends inside a varint");
      const byte = b[this.position++]!;
      value |= (byte & 0x7f) << shift;
      if ((byte & 0x80) === 0) return value >>> 0;
    }
    throw new RangeError("a varint longer than 5 bytes");
  }

  /** A zigzag varint of up to 32 bits. */
  varInt(): number {
    const u = this.unsignedVarInt();
    return (u >>> 1) ^ -(u & 1);
  }

  /** A zigzag varint of up to 64 bits (10 bytes at most), as a bigint. */
  varLong(): bigint {
    const b = this.buffer;
    const start = this.position;
    // The common case, up to 4 bytes (28 bits): plain numbers.
    let value = 0;
    for (let shift = 0; shift < 28; shift += 7) {
      if (this.position >= b.length) throw new RangeError("a record ends inside a varint");
      const byte = b[this.position++]!;
      value |= (byte & 0x7f) << shift;
      if ((byte & 0x80) === 0) return value === 0 ? ZERO : BigInt((value >>> 1) ^ -(value & 1));
    }
    // Longer: bigint arithmetic from the start.
    this.position = start;
    let wide = 0n;
    for (let bits = 0n; bits <= 63n; bits += 7n) {
      if (this.position >= b.length) throw new RangeError("a record ends inside a varint");
      const byte = b[this.position++]!;
      wide |= BigInt(byte & 0x7f) << bits;
      if ((byte & 0x80) === 0) return BigInt.asIntN(64, (wide >> 1n) ^ -(wide & 1n));
    }
    throw new RangeError("a varint longer than 10 bytes");
  }

  /** Bytes with a zigzag varint length; -1 is null. */
  bytes(): Buffer | null {
    const length = this.varInt();
    if (length === -1) return null;
    if (length < 0 || this.position + length > this.buffer.length) throw new RangeError(`a record's field of ${length} bytes runs past its batch`);
    const value = this.buffer.subarray(this.position, this.position + length);
    this.position += length;
    return value;
  }
}

function readRecord(c: Cursor): LeanRecord {
  const length = c.varInt();
  const attributes = c.buffer.readInt8(c.position++);
  const timestampDelta = c.varLong();
  const offsetDelta = c.varInt();
  const key = c.bytes();
  const value = c.bytes();
  const count = c.varInt();
  const headers: Array<[Buffer | null, Buffer | null]> = [];
  for (let i = 0; i < count; i++) headers.push([c.bytes(), c.bytes()]);
  return { length, attributes, timestampDelta, offsetDelta, key, value, headers };
}

/** The record batches of one partition's records section (a Buffer of its own). */
export function readBatches(buffer: Buffer): LeanBatch[] {
  const batches: LeanBatch[] = [];
  let at = 0;
  // As the library: a batch cut short at the end of the fetch (its size limit) is left for the next fetch.
  while (buffer.length - at >= BATCH_HEAD && buffer.length - at - BATCH_HEAD >= buffer.readInt32BE(at + 8)) {
    const length = buffer.readInt32BE(at + 8);
    if (length < RECORDS_AT - BATCH_HEAD) throw new RangeError(`a record batch at offset ${buffer.readBigInt64BE(at)} declares ${length} bytes, less than its own header`);
    const end = at + BATCH_HEAD + length;
    const batch: LeanBatch = {
      firstOffset: buffer.readBigInt64BE(at),
      length,
      partitionLeaderEpoch: buffer.readInt32BE(at + 12),
      magic: buffer.readInt8(at + 16),
      crc: buffer.readUInt32BE(at + 17),
      attributes: buffer.readInt16BE(at + 21),
      lastOffsetDelta: buffer.readInt32BE(at + 23),
      firstTimestamp: buffer.readBigInt64BE(at + 27),
      maxTimestamp: buffer.readBigInt64BE(at + 35),
      producerId: buffer.readBigInt64BE(at + 43),
      producerEpoch: buffer.readInt16BE(at + 51),
      firstSequence: buffer.readInt32BE(at + 53),
      records: [],
    };
    const count = buffer.readInt32BE(at + 57);
    const recordsAt = at + RECORDS_AT;
    let records = new Cursor(buffer.subarray(recordsAt, end));
    const compression = batch.attributes & IS_COMPRESSED;
    if (compression !== 0) {
      const algorithm = (compressionsAlgorithmsByBitmask as Record<number, { decompressSync(data: Buffer): Uint8Array } | undefined>)[compression];
      if (!algorithm) throw new RangeError(`a record batch at offset ${batch.firstOffset} is compressed with an unknown codec (attributes ${batch.attributes})`);
      const plain = algorithm.decompressSync(buffer.subarray(recordsAt, end));
      records = new Cursor(Buffer.isBuffer(plain) ? plain : Buffer.from(plain.buffer, plain.byteOffset, plain.byteLength));
    }
    for (let i = 0; i < count; i++) batch.records.push(readRecord(records));
    batches.push(batch);
    at = end;
  }
  return batches;
}

/** Fetch v17's response, as `fetchV17.parseResponse` gives it (see the file's comment). */
// deno-lint-ignore no-explicit-any
export function parseFetchV17(_correlationId: number, apiKey: number, apiVersion: number, reader: Reader): any {
  const errors: Array<[string, [number, null]]> = [];
  const throttleTimeMs = reader.readInt32();
  const errorCode = reader.readInt16();
  if (errorCode !== 0) errors.push(["", [errorCode, null]]);
  // deno-lint-ignore no-explicit-any
  const response: any = {
    throttleTimeMs,
    errorCode,
    sessionId: reader.readInt32(),
    nodeEndpoints: [],
    responses: reader.readArray((r: Reader, i: number) => ({
      topicId: r.readUUID(),
      partitions: r.readArray((r: Reader, j: number) => {
        // deno-lint-ignore no-explicit-any
        const partition: any = {
          partitionIndex: r.readInt32(),
          errorCode: r.readInt16(),
          highWatermark: r.readInt64(),
          lastStableOffset: r.readInt64(),
          logStartOffset: r.readInt64(),
          divergingEpoch: { epoch: -1, endOffset: -1n },
          currentLeader: { leaderId: -1, leaderEpoch: -1 },
          snapshotId: { endOffset: -1n, epoch: -1 },
          abortedTransactions: r.readNullableArray((r: Reader) => ({ producerId: r.readInt64(), firstOffset: r.readInt64() })),
          preferredReadReplica: r.readInt32(),
          records: [],
        };
        if (partition.errorCode !== 0) errors.push([`/responses/${i}/partitions/${j}`, [partition.errorCode, null]]);
        // COMPACT_RECORDS: the size plus one; 0 is null.
        let size = r.readUnsignedVarInt();
        if (size === 0) partition.records = null;
        if (size > 1) {
          size--;
          // One copy of the section (the response arrives as a list of socket chunks), read straight from it.
          partition.records = readBatches(r.buffer.slice(r.position, r.position + size) as Buffer);
          r.skip(size);
        }
        readKnownTaggedFields(r, {
          0: (t: Reader) => void (partition.divergingEpoch = { epoch: t.readInt32(), endOffset: t.readInt64() }),
          1: (t: Reader) => void (partition.currentLeader = { leaderId: t.readInt32(), leaderEpoch: t.readInt32() }),
          2: (t: Reader) => void (partition.snapshotId = { endOffset: t.readInt64(), epoch: t.readInt32() }),
        });
        return partition;
      }, true, false),
    })),
  };
  readKnownTaggedFields(reader, {
    0: (t: Reader) => void (response.nodeEndpoints = t.readArray((r: Reader) => ({ nodeId: r.readInt32(), host: r.readString(), port: r.readInt32(), rack: r.readNullableString() }))),
  });
  if (errors.length) throw new ResponseError(apiKey, apiVersion, Object.fromEntries(errors), response);
  return response;
}

/**
 * Whether fetches are parsed here (true) or by the library: for benchmarks that compare the two
 * in one process (bench/restore.ts, bench/client-ceiling.ts). Read at each fetch.
 */
export const fetchParsing = { lean: true };

/**
 * The library's Fetch API with this parser, when the version the broker and library agreed on is
 * 17 (Kafka 3.9 and up); any other version is the library's own, unchanged.
 */
// deno-lint-ignore no-explicit-any
export function leanFetch(api: any): any {
  if (api?.key !== 1 || api?.version !== 17 || !fetchParsing.lean) return api;
  // deno-lint-ignore no-explicit-any
  return (connection: any, ...args: unknown[]) => {
    const callback = typeof args[args.length - 1] === "function" ? args.pop() : () => {};
    // As the library's createAPI(1, 17, createRequest, parseResponse) sends it: flexible headers both ways.
    connection.send(1, 17, () => (fetchV17.createRequest as (...a: unknown[]) => unknown)(...args), parseFetchV17, true, true, callback);
  };
}
