/**
 * The lean Fetch v17 parser against the library's own: record batches the library writes (keys,
 * null values, headers, timestamps far apart, transactional batches, each compression codec, a
 * batch cut short at the end) read the same, field by field; and a whole v17 response with a
 * partition error throws the library's ResponseError, as the library's parser does.
 */
import { describe, expect, test } from "bun:test";
import { Buffer } from "node:buffer";
import { DynamicBuffer } from "@platformatic/dynamic-buffer";
import { createRecordsBatch, fetchV17, Reader, readRecordsBatches, ResponseError, Writer } from "@platformatic/kafka";
import { parseFetchV17, readBatches } from "../../src/kafka/platformatic/fetch-parser.ts";

const T0 = 1_717_000_000_000n;
// deno-lint-ignore no-explicit-any
const batchBytes = (messages: any[], options: Record<string, unknown> = {}): Buffer => (createRecordsBatch(messages, options) as any).buffer as Buffer;
const message = (i: number, extra: Record<string, unknown> = {}) => ({
  topic: "t", partition: 0,
  key: i % 3 === 0 ? null : Buffer.from(`k${i}`),
  value: i % 5 === 0 ? null : Buffer.from(JSON.stringify({ id: i, note: "é".repeat(i % 7) })),
  headers: i % 2 ? new Map([[Buffer.from("h"), Buffer.from(`v${i}`)]]) : new Map(),
  timestamp: T0 + BigInt(i * 1_000_003) * (i % 4 === 0 ? 1_000_000n : 1n), // deltas past 28 bits too
  ...extra,
});
const library = (buffer: Buffer) => readRecordsBatches(Reader.from(new DynamicBuffer(buffer)));
const plain = (batches: unknown) => JSON.parse(JSON.stringify(batches, (_, v) => (typeof v === "bigint" ? `${v}n` : v?.type === "Buffer" ? Buffer.from(v.data).toString("hex") : v)));

describe("the lean Fetch parser reads what the library reads", () => {
  test("batches of records with and without keys, values and headers, far-apart timestamps, a transactional batch", () => {
    const buffer = Buffer.concat([
      batchBytes(Array.from({ length: 40 }, (_, i) => message(i))),
      batchBytes(Array.from({ length: 3 }, (_, i) => message(100 + i)), { transactionalId: "tx", producerId: 77n, producerEpoch: 3 }),
      batchBytes([message(7, { timestamp: T0 - 5_000_000_000n })]),
    ]);
    const ours = readBatches(buffer);
    expect(ours.length).toBe(3);
    expect(ours[1]!.producerId).toBe(77n);
    // A delta past 28 bits (the parser's long path). (Its value is what the library's writer wrote:
    // both readers agree on it, 605 ms off what was asked; a writer quirk, not a read.)
    expect(ours[0]!.records[4]!.timestampDelta > 1n << 40n).toBe(true);
    expect(plain(ours)).toEqual(plain(library(buffer)));
  });

  for (const compression of ["gzip", "snappy", "lz4", "zstd"]) {
    test(`a ${compression} batch`, () => {
      let buffer: Buffer;
      try {
        buffer = batchBytes(Array.from({ length: 25 }, (_, i) => message(i)), { compression });
      } catch (error) {
        // A codec this runtime's library cannot write (zstd needs node:zlib's zstd): nothing to compare.
        if (/zstd/i.test(String(error))) return;
        throw error;
      }
      const ours = readBatches(buffer);
      expect(ours[0]!.records.length).toBe(25);
      expect(plain(ours)).toEqual(plain(library(buffer)));
    });
  }

  test("a batch cut short at the end of the fetch is left for the next one", () => {
    const whole = Buffer.concat([batchBytes([message(1), message(2)]), batchBytes([message(3)])]);
    const cut = whole.subarray(0, whole.length - 5);
    expect(readBatches(cut).map((b) => b.records.length)).toEqual([2]);
    expect(plain(readBatches(cut))).toEqual(plain(library(cut)));
    expect(readBatches(Buffer.alloc(0))).toEqual([]);
    // A length shorter than a batch's own header is refused, not read forever.
    const bad = Buffer.from(whole);
    bad.writeInt32BE(-1, 8);
    expect(() => readBatches(bad)).toThrow("less than its own header");
  });

  test("a whole v17 response: the same object as the library's, and a partition error thrown as its ResponseError", () => {
    const records = batchBytes(Array.from({ length: 10 }, (_, i) => message(i)));
    const response = (partitionError: number) => {
      const w = Writer.create()
        .appendInt32(0).appendInt16(0).appendInt32(0) // throttle, error, session
        .appendArray([0], (w) => {
          w.appendUUID("0b5a7c1e-0000-4000-8000-000000000001").appendArray([0], (w) => {
            w.appendInt32(3).appendInt16(partitionError).appendInt64(99n).appendInt64(98n).appendInt64(0n)
              .appendArray([{ producerId: 5n, firstOffset: 10n }], (w, a) => void w.appendInt64(a.producerId).appendInt64(a.firstOffset))
              .appendInt32(-1)
              .appendUnsignedVarInt(records.length + 1);
            w.appendFrom(new DynamicBuffer(records)).appendTaggedFields();
          });
        })
        .appendTaggedFields();
      // As the connection hands it over: a Reader over a DynamicBuffer of several chunks.
      const bytes = w.buffer as Buffer;
      const chunks = [bytes.subarray(0, 7), bytes.subarray(7, 50), bytes.subarray(50)];
      return () => Reader.from(new DynamicBuffer(chunks.map((c) => Buffer.from(c))));
    };
    const ok = response(0);
    expect(plain(parseFetchV17(1, 1, 17, ok()))).toEqual(plain(fetchV17.parseResponse(1, 1, 17, ok())));
    const parsed = parseFetchV17(1, 1, 17, ok());
    expect(parsed.responses[0].partitions[0].records[0].records.length).toBe(10);
    expect(parsed.responses[0].partitions[0].abortedTransactions).toEqual([{ producerId: 5n, firstOffset: 10n }]);
    const failing = response(6); // NOT_LEADER_OR_FOLLOWER
    const theirs = (() => { try { fetchV17.parseResponse(1, 1, 17, failing()); } catch (e) { return e; } })() as Error;
    const ours = (() => { try { parseFetchV17(1, 1, 17, failing()); } catch (e) { return e; } })() as Error;
    expect(ours).toBeInstanceOf(ResponseError);
    expect(ours.message).toBe(theirs.message);
    expect(plain((ours as unknown as { response: unknown }).response)).toEqual(plain((theirs as unknown as { response: unknown }).response));
  });
});
