import { describe, expect, test } from "bun:test";
import { dropAbortedRecords, type FetchedBatch } from "../../src/kafka/aborted-transactions.ts";

const TX = 1 << 4;
const CONTROL = 1 << 5;
const data = (producerId: bigint, first: number, n: number, transactional = true): FetchedBatch => ({
  firstOffset: BigInt(first),
  lastOffsetDelta: n - 1,
  attributes: transactional ? TX : 0,
  producerId,
  records: Array.from({ length: n }, () => ({ key: null })),
});
const marker = (producerId: bigint, offset: number, type: 0 | 1): FetchedBatch => ({
  firstOffset: BigInt(offset),
  lastOffsetDelta: 0,
  attributes: TX | CONTROL,
  producerId,
  records: [{ key: new Uint8Array([0, 0, 0, type]) }],
});
const kept = (batches: FetchedBatch[]) => batches.filter((b) => !(b.attributes & CONTROL)).map((b) => [Number(b.firstOffset), b.records.length]);

describe("dropAbortedRecords", () => {
  test("two aborted transactions of one producer in one response: both are dropped, the committed one between them stays", () => {
    const records = [data(7n, 0, 10), marker(7n, 10, 0), data(7n, 11, 5), marker(7n, 16, 1), data(7n, 17, 10), marker(7n, 27, 0), data(7n, 28, 3), marker(7n, 31, 1)];
    const removed = dropAbortedRecords({ responses: [{ partitions: [{ abortedTransactions: [{ producerId: 7n, firstOffset: 17n }, { producerId: 7n, firstOffset: 0n }], records }] }] });
    expect(removed).toBe(20);
    expect(kept(records)).toEqual([[0, 0], [11, 5], [17, 0], [28, 3]]);
  });

  test("an aborted transaction whose marker is beyond the response is still dropped, and keeps its offsets", () => {
    const records = [data(3n, 100, 4), marker(3n, 104, 1), data(3n, 105, 50)];
    dropAbortedRecords({ responses: [{ partitions: [{ abortedTransactions: [{ producerId: 3n, firstOffset: 105n }], records }] }] });
    expect(kept(records)).toEqual([[100, 4], [105, 0]]);
    expect(records[2]!.lastOffsetDelta).toBe(49);
  });

  test("other producers, non-transactional batches and batches before the aborted start are untouched", () => {
    const records = [data(1n, 0, 3), data(2n, 3, 3), data(9n, 6, 2, false), marker(2n, 8, 0), data(1n, 9, 2), marker(1n, 11, 1)];
    const removed = dropAbortedRecords({ responses: [{ partitions: [{ abortedTransactions: [{ producerId: 2n, firstOffset: 3n }], records }] }] });
    expect(removed).toBe(3);
    expect(kept(records)).toEqual([[0, 3], [3, 0], [6, 2], [9, 2]]);
  });

  test("no aborted transactions listed: nothing changes", () => {
    const records = [data(1n, 0, 3), marker(1n, 3, 0)];
    expect(dropAbortedRecords({ responses: [{ partitions: [{ abortedTransactions: [], records }, { records: null }] }] })).toBe(0);
    expect(kept(records)).toEqual([[0, 3]]);
  });
});
