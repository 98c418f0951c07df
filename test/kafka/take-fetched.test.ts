import { describe, expect, test } from "bun:test";
import { Buffer } from "node:buffer";
import type { LeanBatch, LeanRecord } from "../../src/kafka/platformatic/fetch-parser.ts";
import { type FetchedRecords, headerName, takeFetchedRecords } from "../../src/kafka/platformatic/records.ts";
import { DecodedTexts } from "../../src/kafka/shared.ts";
import type { InboundRecord } from "../../src/kafka/port.ts";

const record = (offsetDelta: number, value: string, headers: LeanRecord["headers"] = []): LeanRecord => ({
  length: 0,
  attributes: 0,
  timestampDelta: BigInt(offsetDelta * 10),
  offsetDelta,
  key: Buffer.from(`k${value}`),
  value: Buffer.from(value),
  headers,
});

const batch = (firstOffset: bigint, records: LeanRecord[], attributes = 0): LeanBatch => ({
  firstOffset,
  length: 0,
  partitionLeaderEpoch: 0,
  magic: 2,
  crc: 0,
  attributes,
  lastOffsetDelta: Math.max(0, ...records.map((r) => r.offsetDelta)),
  firstTimestamp: 1_000n,
  maxTimestamp: 1_000n,
  producerId: -1n,
  producerEpoch: -1,
  firstSequence: -1,
  records,
});

const names: Record<string, string> = { "id-a": "a", "id-b": "b" };
const topicOf = (id: string) => names[id];
const summary = (out: InboundRecord[]) => out.map((r) => `${r.topic}/${r.partition}@${r.offset}:${Buffer.from(r.value!).toString()}`);

describe("takeFetchedRecords", () => {
  test("takes the records the stream would hand out, in order, and leaves their batches empty", () => {
    const p0 = [batch(10n, [record(0, "x"), record(1, "y")]), batch(12n, [record(0, "z", [[Buffer.from("h"), Buffer.from("v")]])])];
    const response: FetchedRecords = { responses: [{ topicId: "id-a", partitions: [{ partitionIndex: 0, records: p0 }] }] };
    const out: InboundRecord[] = [];
    const taken = takeFetchedRecords([{ topicId: "id-a", partitions: [{ partition: 0, fetchOffset: 10n }] }], response, topicOf, out);
    expect(taken).toBe(3);
    expect(summary(out)).toEqual(["a/0@10:x", "a/0@11:y", "a/0@12:z"]);
    expect(out.map((r) => r.timestamp)).toEqual([1_000n, 1_010n, 1_000n]);
    expect(Buffer.from(out[0]!.key!).toString()).toBe("kx");
    expect(out[2]!.headers.map(([k, v]) => [k, Buffer.from(v).toString()])).toEqual([["h", "v"]]);
    expect(out[0]!.headers).toEqual([]);
    // The batches stay, so the stream still advances its fetch position past offset 12, but hand out nothing.
    expect(p0.map((b) => [b.firstOffset, b.lastOffsetDelta, b.records.length])).toEqual([[10n, 1, 0], [12n, 0, 0]]);
  });

  test("skips records below the offset asked for, control batches, partitions not asked for, and leaves unknown topics to the stream", () => {
    const control = batch(5n, [record(0, "marker")], 1 << 5);
    const early = batch(3n, [record(0, "old"), record(1, "old2"), record(3, "new")]);
    const lingering = batch(0n, [record(0, "stale")]);
    const unknown = batch(0n, [record(0, "elsewhere")]);
    const response: FetchedRecords = {
      responses: [
        { topicId: "id-a", partitions: [{ partitionIndex: 1, records: [early, control] }, { partitionIndex: 2, records: [lingering] }, { partitionIndex: 3, records: null }] },
        { topicId: "id-c", partitions: [{ partitionIndex: 0, records: [unknown] }] },
        { topicId: "id-b", partitions: [{ partitionIndex: 0, records: [batch(7n, [record(0, "b7")])] }] },
      ],
    };
    const out: InboundRecord[] = [];
    // As the library's stream asks: one entry per partition, the same topic more than once.
    const requested = [
      { topicId: "id-a", partitions: [{ partition: 3, fetchOffset: 0n }] },
      { topicId: "id-a", partitions: [{ partition: 1, fetchOffset: 5n }] },
      { topicId: "id-c", partitions: [{ partition: 0, fetchOffset: 0n }] },
      { topicId: "id-b", partitions: [{ partition: 0, fetchOffset: 7n }] },
    ];
    expect(takeFetchedRecords(requested, response, topicOf, out)).toBe(2);
    expect(summary(out)).toEqual(["a/1@6:new", "b/0@7:b7"]);
    expect(early.records).toEqual([]);
    // A control batch, a lingering partition and a topic with no known name are left as they were.
    expect(control.records.length).toBe(1);
    expect(lingering.records.length).toBe(1);
    expect(unknown.records.length).toBe(1);
  });
});

describe("DecodedTexts", () => {
  const bytes = (s: string) => Buffer.from(s);
  test("decodes each name, same-length names told apart by their bytes, multi-byte ones included, past the ones it keeps", () => {
    const names = new DecodedTexts(4);
    const all = ["fv.source", "fv.offset", "fv.sourcf", "", "ü-name", "😀", ...Array.from({ length: 10 }, (_, i) => `h${i}`)];
    for (let round = 0; round < 2; round++) expect(all.map((n) => names.text(bytes(n)))).toEqual(all);
    expect(names.text(null)).toBe("");
    expect(headerName(bytes("fv.source"))).toBe("fv.source");
  });

  test("keeps a copy of a name's bytes, not a view: the buffer it came from may be reused", () => {
    const names = new DecodedTexts(4);
    const buffer = bytes("x-reused-name");
    expect(names.text(buffer)).toBe("x-reused-name");
    buffer.write("y");
    expect(names.text(buffer)).toBe("y-reused-name");
    expect(names.text(bytes("x-reused-name"))).toBe("x-reused-name");
  });
});
