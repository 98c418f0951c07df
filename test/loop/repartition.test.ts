/** The repartition codec: hop records and watermark records written and read back, and who announces what. */
import { describe, expect, test } from "bun:test";
import type { InboundRecord, OutboundRecord } from "../../src/kafka/port.ts";
import { HeardWatermarks, hopInputOf, hopRecord, hopSource, readWatermark, UpstreamTracker, watermarkRecords } from "../../src/loop/repartition.ts";

const encoder = new TextEncoder();
/** An outbound record as a consumer of the hop topic would read it back. */
const readBack = (out: OutboundRecord, offset = 0): InboundRecord => ({
  topic: out.topic,
  partition: out.partition ?? 0,
  offset: BigInt(offset),
  timestamp: 0n,
  key: typeof out.key === "string" ? encoder.encode(out.key) : out.key,
  value: typeof out.value === "string" ? encoder.encode(out.value) : out.value,
  headers: (out.headers ?? []).map(([k, v]) => [k, typeof v === "string" ? encoder.encode(v) : v]),
});
const source = (partition: number, offset: number): InboundRecord => ({ topic: "trades", partition, offset: BigInt(offset), timestamp: 0n, key: null, value: null, headers: [] });
const hop = { topic: "fv-repartition-p-1", partitions: 3, keyColumns: ["sym"] };

describe("hop records", () => {
  test("a row goes into the hop keyed by the operator's key, and reads back with its upstream partition and offset", () => {
    const out = hopRecord(hop, { sym: "ACME", px: 1 }, source(2, 41), { index: 0, join: false });
    expect(out.key).toBe("ACME");
    expect(out.value).toBe(JSON.stringify({ sym: "ACME", px: 1 }));
    const back = readBack(out);
    expect(hopSource(back)).toEqual({ key: "trades:2", offset: 41n });
    expect(hopInputOf(back)).toBe(0);
    expect(readWatermark(back)).toBeUndefined();
  });

  test("a row no step changed goes with its source value's bytes as they came; a changed one is encoded again", () => {
    const from = { ...source(2, 41), value: encoder.encode('{"sym": "ACME",  "px": 1e2}') };
    const unchanged = hopRecord(hop, { sym: "ACME", px: 100 }, from, { index: 0, join: false, unchanged: true });
    expect(unchanged.key).toBe("ACME");
    expect(unchanged.value).toBe(from.value);
    const changed = hopRecord(hop, { sym: "ACME", px: 100, side: "buy" }, from, { index: 0, join: false });
    expect(changed.value).toBe(JSON.stringify({ sym: "ACME", px: 100, side: "buy" }));
  });

  test("a join's row says which input it belongs to; a single-input stage's does not", () => {
    expect(hopInputOf(readBack(hopRecord(hop, { sym: "A" }, source(0, 0), { index: 1, join: true })))).toBe(1);
    expect(hopRecord(hop, { sym: "A" }, source(0, 0), { index: 0, join: false }).headers!.map(([k]) => k)).toEqual(["fv.source", "fv.offset"]);
  });

  test("rows of several upstream partitions in turn each read back their own source, offsets past 2^53 exact", () => {
    const froms: Array<[number, bigint]> = [[2, 41n], [2, 42n], [10, 7n], [2, 43n], [1, 2n ** 60n + 1n], [1, 0n], [12, 9_007_199_254_740_993n]];
    const read = froms.map(([p, o]) => hopSource(readBack(hopRecord(hop, { sym: "A" }, { ...source(p, 0), offset: o }, { index: 0, join: false }))));
    expect(read).toEqual(froms.map(([p, o]) => ({ key: `trades:${p}`, offset: o })));
  });

  test("a record without the source headers has no source", () => {
    expect(hopSource(source(0, 0))).toBeUndefined();
  });
});

describe("watermark records", () => {
  test("one per partition of the hop topic, each read back as the same watermark", () => {
    const out = watermarkRecords(hop, { source: "trades:1", watermark: 5000, idle: false });
    expect(out.map((r) => r.partition)).toEqual([0, 1, 2]);
    for (const r of out) expect(readWatermark(readBack(r))).toEqual({ source: "trades:1", watermark: 5000, idle: false });
  });

  test("a partition announced idle with no event time says so with a null watermark", () => {
    expect(readWatermark(readBack(watermarkRecords(hop, { source: "trades:0", watermark: null, idle: true })[0]!))).toEqual({ source: "trades:0", watermark: null, idle: true });
  });
});

describe("the upstream side", () => {
  const lag = { knownBehind: () => false, caughtUp: () => false };
  const owned = [{ topic: "trades", partition: 0 }, { topic: "trades", partition: 1 }];
  const tracker = () => new UpstreamTracker([{ stageIndex: 0, ...hop, inputs: new Set(["trades"]) }], 10_000);

  test("announces only partitions that sent rows (or are idle), then again only when changed (100 ms) or every 2 s", () => {
    const upstream = tracker();
    upstream.note(0, { topic: "trades", partition: 1 }, 700);
    const now = Date.now();
    expect(upstream.announce(now, 0, owned, lag).map((r) => JSON.parse(r.value as string).source)).toEqual(["trades:1", "trades:1", "trades:1"]);
    expect(upstream.announce(now + 50, 0, owned, lag)).toEqual([]);
    upstream.note(0, { topic: "trades", partition: 1 }, 900);
    expect(upstream.announce(now + 50, 0, owned, lag)).toEqual([]);
    expect(upstream.announce(now + 150, 0, owned, lag)).toHaveLength(3);
    expect(upstream.announce(now + 1000, 0, owned, lag)).toEqual([]);
    expect(upstream.announce(now + 2200, 0, owned, lag)).toHaveLength(3);
  });

  test("before a checkpoint (changedNow) a changed watermark goes out at once, inside the 100 ms; an unchanged one does not", () => {
    const upstream = tracker();
    upstream.note(0, { topic: "trades", partition: 1 }, 700);
    const now = Date.now();
    expect(upstream.announce(now, 0, owned, lag)).toHaveLength(3);
    // The close row of the partition, read 10 ms later: a checkpoint is about to commit its offset.
    upstream.note(0, { topic: "trades", partition: 1 }, 3_600_000);
    expect(upstream.announce(now + 10, 0, owned, lag)).toEqual([]);
    const forced = upstream.announce(now + 10, 0, owned, lag, true);
    expect(forced.map((r) => JSON.parse(r.value as string))).toEqual(Array(3).fill({ source: "trades:1", watermark: 3_600_000, idle: false }));
    expect(upstream.announce(now + 20, 0, owned, lag, true)).toEqual([]);
  });

  test("a partition with no rows for the idle time is announced idle, unless it is known to be behind", () => {
    const upstream = tracker();
    const later = Date.now() + 11_000;
    expect(upstream.announce(Date.now(), 0, owned, lag)).toEqual([]);
    expect(upstream.announce(later, 0, owned, { knownBehind: () => true, caughtUp: () => true })).toEqual([]);
    const idle = upstream.announce(later, 0, owned, { knownBehind: () => false, caughtUp: () => true });
    expect(idle.filter((r) => r.partition === 0).map((r) => JSON.parse(r.value as string))).toEqual([
      { source: "trades:0", watermark: null, idle: true },
      { source: "trades:1", watermark: null, idle: true },
    ]);
  });

  test("a revoked partition is forgotten: its next owner announces it", () => {
    const upstream = tracker();
    upstream.note(0, { topic: "trades", partition: 0 }, 100);
    upstream.forget({ topic: "trades", partition: 0 });
    expect(upstream.announce(Date.now(), 0, [], lag)).toEqual([]);
  });
});

describe("the downstream side", () => {
  test("the watermark of a repartition partition is the least over its upstream partitions, known once each was heard, and never goes back", () => {
    const heard = new HeardWatermarks();
    heard.setUpstream(0, ["trades:0", "trades:1"]);
    heard.hear(0, 2, "trades:0", 500, false);
    expect(heard.watermark(0, 2)).toBeUndefined();
    heard.hear(0, 2, "trades:1", 300, false);
    expect(heard.watermark(0, 2)).toBe(300);
    heard.hear(0, 2, "trades:1", 200, false);
    expect(heard.watermark(0, 2)).toBe(300);
    // An idle source no longer holds it back.
    heard.hear(0, 2, "trades:1", 300, true);
    expect(heard.watermark(0, 2)).toBe(500);
    expect(heard.dirty(0, 2)).toBe(true);
    expect(heard.take(0, 2)).toEqual({ "trades:0": 500, "trades:1": 300 });
    expect(heard.dirty(0, 2)).toBe(false);
  });

  test("a restored value never overrides what this session heard, and partitions no longer owned are forgotten", () => {
    const heard = new HeardWatermarks();
    heard.setUpstream(0, ["trades:0"]);
    heard.hear(0, 1, "trades:0", 900, false);
    heard.hear(0, 1, "trades:0", 100, false, true);
    expect(heard.watermark(0, 1)).toBe(900);
    heard.keepOnly(new Set([0]));
    expect(heard.watermark(0, 1)).toBeUndefined();
  });
});
