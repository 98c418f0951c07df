/**
 * The lean Produce v11 encoder against the library's own `produceV11.createRequest`: the same
 * messages give the same bytes (keys, null and empty values, string keys, values and headers with
 * multi-byte characters, several topics and partitions, sequences, a transactional producer), and
 * what it writes reads back, through the library's reader, as the records asked for, timestamps
 * far apart included.
 */
import { describe, expect, test } from "bun:test";
import { Buffer } from "node:buffer";
import { DynamicBuffer } from "@platformatic/dynamic-buffer";
import { crc32c, produceV11, Reader, readRecordsBatches } from "@platformatic/kafka";
import { chunkBySize, MAX_REQUEST_BYTES } from "../../src/kafka/platformatic/producer.ts";
import { partitioner } from "../../src/kafka/platformatic/records.ts";
import { encodeProduceV11, leanProduce, type ProduceMessage } from "../../src/kafka/platformatic/produce-encoder.ts";

const T0 = 1_717_000_000_000;
const sequences = (m: Record<string, number>) => ({ getWithDefault: (k: string, d: number) => m[k] ?? d });

function messages(n: number, topics = ["t"], partitions = 1): ProduceMessage[] {
  return Array.from({ length: n }, (_, i) => ({
    topic: topics[i % topics.length]!,
    partition: (i >> 1) % partitions,
    key: i % 3 === 0 ? null : i % 3 === 1 ? Buffer.from(`k${i}`) : `kü${i}`,
    value: i % 11 === 0 ? null : i % 13 === 0 ? Buffer.alloc(0) : JSON.stringify({ id: i, note: "é€😀".repeat(i % 50) }),
    headers: i % 2 ? new Map<Uint8Array | string, Uint8Array | string>([[Buffer.from("h"), Buffer.from(`v${i}`)], ["trace", "x€".repeat(i)]]) : new Map(),
    timestamp: BigInt(T0 + (i % 7) * 1_000 - (i % 5) * 333),
  }));
}

/** The library's bytes for the same messages (it wants Buffers; it mutates messages, so it gets copies). */
function libraryBytes(acks: number, timeout: number, ms: ProduceMessage[], options: Record<string, unknown>): Buffer {
  const bytes = <T,>(v: T | string) => (typeof v === "string" ? Buffer.from(v) : v);
  const copies = ms.map((m) => ({ ...m, key: bytes(m.key), value: bytes(m.value), headers: new Map([...(m.headers ?? [])].map(([k, v]) => [bytes(k), v == null ? undefined : bytes(v)])) }));
  // deno-lint-ignore no-explicit-any
  return (produceV11.createRequest as any)(acks, timeout, copies, options).buffer as Buffer;
}

function firstDifference(a: Buffer, b: Buffer): number {
  for (let i = 0; i < Math.max(a.length, b.length); i++) if (a[i] !== b[i]) return i;
  return -1;
}

describe("the lean Produce encoder writes what the library writes", () => {
  const cases: Array<[string, ProduceMessage[], Record<string, unknown>]> = [
    ["one record", messages(1), {}],
    ["200 records of one partition, an idempotent producer", messages(200), { producerId: 4242n, producerEpoch: 7, sequences: sequences({ "t:0": 1234 }) }],
    ["three topics of four partitions, transactional", messages(300, ["orders", "t", "ü-topic"], 4), { transactionalId: "fv-app-0-1", producerId: 9n, producerEpoch: 2, sequences: sequences({ "orders:1": 5, "t:3": 2 ** 30 }) }],
  ];
  for (const [name, ms, options] of cases) {
    test(name, () => {
      const ours = encodeProduceV11(-1, 15_000, ms, options);
      const theirs = libraryBytes(-1, 15_000, ms, options);
      // Where they first differ (-1: nowhere), then the whole (a short message if they differ).
      expect({ at: firstDifference(ours, theirs), length: ours.length }).toEqual({ at: -1, length: theirs.length });
    });
  }

  test("acks and timeout are written as given", () => {
    const ms = messages(3);
    expect(encodeProduceV11(1, 30_000, ms).equals(libraryBytes(1, 30_000, ms, {}))).toBe(true);
  });
});

describe("what it writes reads back as the records asked for", () => {
  /** The record batches of a one-topic, one-partition request. */
  function batchesOf(body: Buffer) {
    // transactional_id (compact null: 1 byte), acks (2), timeout (4), topics (1), name (1 + 1), partitions (1), index (4), records length varint
    const r = Reader.from(new DynamicBuffer(body));
    r.readString(); r.readInt16(); r.readInt32(); r.readUnsignedVarInt(); r.readString(); r.readUnsignedVarInt(); r.readInt32();
    const length = r.readUnsignedVarInt() - 1;
    const start = r.position;
    return { batches: readRecordsBatches(Reader.from(new DynamicBuffer(body.subarray(start, start + length)))), records: body.subarray(start, start + length) };
  }

  test("timestamps hours apart and before the first one, and a record with no timestamp (now)", () => {
    const before = Date.now();
    const ms: ProduceMessage[] = [
      { topic: "t", partition: 0, key: "a", value: "first", timestamp: T0 },
      { topic: "t", partition: 0, key: null, value: "later", timestamp: BigInt(T0 + 5 * 3_600_000) },
      { topic: "t", partition: 0, key: "c", value: "earlier", timestamp: T0 - 86_400_000 },
      { topic: "t", partition: 0, key: "d", value: "now" },
    ];
    const { batches, records } = batchesOf(encodeProduceV11(-1, 1000, ms, {}));
    expect(batches.length).toBe(1);
    const batch = batches[0]!;
    expect(batch.firstTimestamp).toBe(BigInt(T0));
    expect(Number(batch.maxTimestamp)).toBeGreaterThanOrEqual(before);
    const got = batch.records.map((r) => [r.key?.toString() ?? null, r.value?.toString() ?? null, batch.firstTimestamp + r.timestampDelta]);
    expect(got.slice(0, 3)).toEqual([["a", "first", BigInt(T0)], [null, "later", BigInt(T0 + 5 * 3_600_000)], ["c", "earlier", BigInt(T0 - 86_400_000)]]);
    expect(Number(got[3]![2])).toBeGreaterThanOrEqual(before);
    expect(Number(got[3]![2])).toBeLessThanOrEqual(Date.now());
    // The CRC covers everything from the attributes on.
    expect(records.readUInt32BE(17)).toBe(crc32c(records.subarray(21)) >>> 0);
  });
});

describe("edges", () => {
  test("an empty string key is a key: hashed as Kafka's Java producer hashes it, not spread round-robin", () => {
    const empty = partitioner({}, "");
    expect(empty).toBe(partitioner({}, Buffer.alloc(0)));
    expect(empty).toBe(275646681); // Utils.murmur2 of no bytes (test/kafka/murmur2.test.ts)
  });

  test("a header with no value (null, as a consumer hands it on) is written as Kafka's null, as the library writes it", () => {
    const ms: ProduceMessage[] = [{ topic: "t", partition: 0, key: "k", value: "v", headers: new Map<Uint8Array | string, Uint8Array | string | null>([["none", null], ["some", "x"]]), timestamp: BigInt(T0) }];
    const theirs = libraryBytes(-1, 1000, ms, {});
    expect(firstDifference(encodeProduceV11(-1, 1000, ms, {}), theirs)).toBe(-1);
  });

  test("a message without a timestamp keeps the one it got: a retried send carries the same create time", async () => {
    const ms: ProduceMessage[] = [{ topic: "t", partition: 0, key: null, value: "v" }];
    const first = encodeProduceV11(-1, 1000, ms, {});
    await Bun.sleep(5);
    expect(encodeProduceV11(-1, 1000, ms, {}).equals(first)).toBe(true);
  });

  test("another Produce version, or a compressed send, goes to the library's own encoder with strings made Buffers", () => {
    const seen: unknown[][] = [];
    // deno-lint-ignore no-explicit-any
    const library: any = (_c: unknown, _a: number, _t: number, messages: ProduceMessage[]) => void seen.push(messages);
    library.key = 0;
    library.version = 9;
    const ms: ProduceMessage[] = [{ topic: "t", partition: 0, key: "k", value: "v", headers: new Map<Uint8Array | string, Uint8Array | string | null>([["h", "x"], ["n", null]]), timestamp: 5 }];
    leanProduce(library)({}, -1, 1000, ms, {}, () => {});
    library.version = 11;
    let sent = 0;
    leanProduce(library)({ send: () => sent++ }, -1, 1000, ms, { compression: "snappy" }, () => {});
    expect(sent).toBe(0);
    for (const [m] of seen as ProduceMessage[][]) {
      expect(Buffer.isBuffer(m!.key) && Buffer.isBuffer(m!.value)).toBe(true);
      expect([...m!.headers!].map(([k, v]) => [Buffer.isBuffer(k), v === null ? null : Buffer.isBuffer(v)])).toEqual([[true, true], [true, null]]);
      expect(m!.timestamp).toBe(5n);
    }
    expect(seen.length).toBe(2);
  });
});

describe("a send split into requests (chunkBySize)", () => {
  const row = (i: number) => ({ topic: "hop", key: `k${i}`, value: `{"i":${i}}` });
  const mark = (p: number, n: number) => ({ topic: "hop", partition: p, value: `{"watermark":${n}}` });
  const flat = (chunks: Array<Array<{ value?: unknown }>>) => chunks.flat().map((m) => m.value);

  test("rows and watermark records of several batches keep their order (a watermark ahead of its rows makes them late)", () => {
    const messages = [row(1), row(2), mark(0, 1), mark(1, 1), row(3), row(4), mark(0, 2), mark(1, 2)];
    expect(flat(chunkBySize(messages))).toEqual(messages.map((m) => m.value));
  });

  test("a changelog (every record to an explicit partition) keeps each partition's records together", () => {
    const c = (p: number, i: number) => ({ topic: "state", partition: p, key: `k${i}`, value: `${i}` });
    expect(flat(chunkBySize([c(0, 1), c(1, 2), c(0, 3), c(1, 4)]))).toEqual(["1", "3", "2", "4"]);
  });

  test("bytes are counted from above (3 per UTF-16 unit) with no UTF-8 encoding: multi-byte text stays under the limit too", () => {
    // 40 × 20,000 units of 3 UTF-8 bytes each: 2.4 MB in all.
    const wide = Array.from({ length: 40 }, (_, i) => ({ topic: "t", key: `k${i}`, value: "€".repeat(20_000) }));
    const split = chunkBySize(wide);
    expect(split.length).toBe(3);
    for (const chunk of split) expect(chunk.reduce((n, m) => n + Buffer.byteLength(m.value) + 64, 0)).toBeLessThanOrEqual(MAX_REQUEST_BYTES);
    expect(split.flat().map((m) => m.key)).toEqual(wide.map((m) => m.key));
    // Headers count: a dead letter's are most of it.
    const headed = Array.from({ length: 100 }, (_, i) => ({ topic: "t", key: `k${i}`, value: "v", headers: new Map([["fv.error.message", "x".repeat(5_000)]]) }));
    expect(chunkBySize(headed).length).toBe(2);
  });

  test("large sends are split under the request limit, in order", () => {
    const big = Array.from({ length: 40 }, (_, i) => ({ topic: "t", key: `k${i}`, value: "x".repeat(30_000) }));
    const chunks = chunkBySize(big);
    expect(chunks.length).toBeGreaterThan(1);
    expect(chunks.flat().map((m) => m.key)).toEqual(big.map((m) => m.key));
  });
});
