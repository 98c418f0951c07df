import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import type { Row } from "../../src/expr/index.ts";
import { RawState, type StateEntry } from "../../src/ops/index.ts";
import { compileOp, type Event, row, run, thrown, viaJson, wm } from "./helpers.ts";

function windowed(fields: Record<string, unknown>) {
  return compileOp({ op: "windowedAggregate", timeColumn: "ts", windowMs: 10, aggs: [{ op: "count" }], ...fields });
}

describe("windowedAggregate: tumbling windows", () => {
  test("a window [start, start + windowMs) fires once the watermark reaches its end, and a row exactly at the end goes to the next window", () => {
    const op = windowed({}).create();
    const out = run(op, "ts", [row({ ts: 0 }), row({ ts: 9 }), row({ ts: 10 }), wm(9)]);
    expect(out.rows).toEqual([]);
    expect(op.advance(10)).toEqual([{ windowStart: 0, windowEnd: 10, count: 2 }]);
    expect(op.advance(19)).toEqual([]);
    expect(op.advance(20)).toEqual([{ windowStart: 10, windowEnd: 20, count: 1 }]);
  });

  test("windows align to epoch 0, also before 1970", () => {
    const op = windowed({}).create();
    run(op, "ts", [row({ ts: -1 }), row({ ts: -10 }), row({ ts: -11 })]);
    expect(op.advance(0)).toEqual([
      { windowStart: -20, windowEnd: -10, count: 1 },
      { windowStart: -10, windowEnd: 0, count: 2 },
    ]);
  });

  test("ISO-8601 event times land in the same windows as their epoch milliseconds", () => {
    const compiled = windowed({ windowMs: 60_000 });
    const op = compiled.create();
    run(op, "ts", [row({ ts: "1970-01-01T00:00:59.999Z" }), row({ ts: "1970-01-01T00:01:00Z" })]);
    expect(op.advance(120_000)).toEqual([
      { windowStart: 0, windowEnd: 60_000, count: 1 },
      { windowStart: 60_000, windowEnd: 120_000, count: 1 },
    ]);
  });

  test("one row per group and window, groups in the order their first row arrived, windows in end order", () => {
    const op = windowed({ groupBy: ["sym", "venue"] }).create();
    run(op, "ts", [
      row({ ts: 1, sym: "B", venue: "x" }),
      row({ ts: 2, sym: "A", venue: "x" }),
      row({ ts: 12, sym: "A", venue: "x" }),
      row({ ts: 3, sym: "B", venue: "x" }),
      row({ ts: 4, sym: "A" }),
    ]);
    expect(op.advance(100)).toEqual([
      { windowStart: 0, windowEnd: 10, sym: "B", venue: "x", count: 2 },
      { windowStart: 0, windowEnd: 10, sym: "A", venue: "x", count: 1 },
      { windowStart: 0, windowEnd: 10, sym: "A", venue: null, count: 1 },
      { windowStart: 10, windowEnd: 20, sym: "A", venue: "x", count: 1 },
    ]);
  });

  test("group values compare by kind and content: 1 and \"1\" are two groups, equal objects one, a string never meets an object", () => {
    const op = windowed({ groupBy: ["k"] }).create();
    const keys = [1, "1", { a: 1 }, { a: 1 }, '\u0000j{"a":1}', '{"a":1}', null, undefined, "\u0000s1"];
    run(op, "ts", keys.map((k, i) => row({ ts: i, k })));
    expect(op.advance(10).map((r) => [r.k, r.count])).toEqual([
      [1, 1], ["1", 1], [{ a: 1 }, 2], ['\u0000j{"a":1}', 1], ['{"a":1}', 1], [null, 2], ["\u0000s1", 1],
    ]);
  });

  test("an instance that never drains its changelog does not keep fired windows: the first drain holds only live ones", () => {
    const op = windowed({ groupBy: ["k"] }).create();
    for (let t = 0; t < 5_000; t++) {
      op.process({ ts: t, k: t % 3 }, t, 0);
      if (t % 10 === 9) op.advance(t + 1);
    }
    const entries = op.drainChanges();
    expect(entries.map((e) => e.key)).toEqual(["meta"]);
    op.process({ ts: 5_000, k: 0 }, 5_000, 0);
    expect(op.drainChanges().map((e) => e.key)).toEqual(["w:5000:0", "meta"]);
  });

  test("a row inside the allowed lateness (its window still open) is counted even though it arrives out of order", () => {
    const compiled = windowed({ allowedLatenessMs: 5 });
    expect(compiled.allowedLatenessMs).toBe(5);
    const op = compiled.create();
    // The engine's watermark trails the highest event time by 5 ms: after ts 13 it is 8.
    const out = run(op, "ts", [row({ ts: 1 }), row({ ts: 13 }), wm(8), row({ ts: 2 }), wm(10)]);
    expect(out.late).toEqual([]);
    expect(out.rows).toEqual([{ windowStart: 0, windowEnd: 10, count: 2 }]);
  });

  test("a row whose window the watermark already closed is returned as late and changes nothing", () => {
    const op = windowed({}).create();
    const out = run(op, "ts", [row({ ts: 5 }), wm(10), row({ ts: 9 }), row({ ts: 0 }), row({ ts: 10 }), wm(20)]);
    expect(out.late).toEqual([{ ts: 9 }, { ts: 0 }]);
    expect(out.rows).toEqual([
      { windowStart: 0, windowEnd: 10, count: 1 },
      { windowStart: 10, windowEnd: 20, count: 1 },
    ]);
  });

  test("the watermark never moves back", () => {
    const op = windowed({}).create();
    run(op, "ts", [wm(10), wm(5)]);
    expect(op.process({ ts: 7 }, 7, 0).late).toEqual([{ ts: 7 }]);
    expect(op.snapshot().watermark).toBe(10);
  });
});

describe("windowedAggregate: hopping windows", () => {
  test("a row belongs to every window covering it: windowMs 10, slideMs 5 puts ts 7 in [0,10) and [5,15)", () => {
    const op = windowed({ slideMs: 5 }).create();
    run(op, "ts", [row({ ts: 7 }), row({ ts: 12 })]);
    expect(op.advance(10)).toEqual([{ windowStart: 0, windowEnd: 10, count: 1 }]);
    expect(op.advance(15)).toEqual([{ windowStart: 5, windowEnd: 15, count: 2 }]);
    expect(op.advance(20)).toEqual([{ windowStart: 10, windowEnd: 20, count: 1 }]);
  });

  test("a row at a slide boundary starts a window and leaves the one ending there", () => {
    const op = windowed({ windowMs: 9, slideMs: 3 }).create();
    run(op, "ts", [row({ ts: 6 })]);
    expect(op.advance(100).map((r) => [r.windowStart, r.windowEnd])).toEqual([[0, 9], [3, 12], [6, 15]]);
  });

  test("before 1970 too: ts -3 is in [-10,0) and [-5,5)", () => {
    const op = windowed({ slideMs: 5 }).create();
    run(op, "ts", [row({ ts: -3 })]);
    expect(op.advance(100).map((r) => [r.windowStart, r.windowEnd])).toEqual([[-10, 0], [-5, 5]]);
  });

  test("a row whose earlier windows closed still counts in its open ones, and is late only when all closed", () => {
    const op = windowed({ slideMs: 5 }).create();
    const out = run(op, "ts", [wm(10), row({ ts: 7 }), row({ ts: 4 }), wm(15)]);
    expect(out.late).toEqual([{ ts: 4 }]);
    expect(out.rows).toEqual([{ windowStart: 5, windowEnd: 15, count: 1 }]);
  });
});

describe("windowedAggregate: countDistinct past exactUpTo (HyperLogLog)", () => {
  const distinct = (n: number, exactUpTo?: number) => {
    const op = windowed({ aggs: [{ op: "countDistinct", column: "v", ...(exactUpTo ? { exactUpTo } : {}) }] }).create();
    const value = (i: number) => (i % 3 === 0 ? `user-${i}` : i);
    // Every value twice: repeats do not count.
    for (let i = 0; i < n; i++) op.process({ ts: 1, v: value(i) }, 1, 0);
    for (let i = 0; i < n; i++) op.process({ ts: 2, v: value(i) }, 2, 0);
    return op;
  };

  test("exact up to exactUpTo distinct values", () => {
    expect(distinct(100, 100).advance(10)).toEqual([{ windowStart: 0, windowEnd: 10, countDistinct_v: 100 }]);
    expect(distinct(5000).advance(10)[0]!.countDistinct_v).toBe(5000);
  });

  test.each([1_000, 20_000, 200_000])("past it, %i distinct values are counted within 3% (about 3.7 standard errors of 0.81%)", (n) => {
    const [row] = distinct(n, 100).advance(10);
    const estimate = row!.countDistinct_v as number;
    expect(Math.abs(estimate - n) / n).toBeLessThan(0.03);
  });

  test("state past the bound is 16 KiB of registers, whatever the count; it survives the changelog", () => {
    const op = distinct(50_000, 100);
    expect(op.stateSize().bytes).toBeLessThan(20_000);
    const restored = windowed({ aggs: [{ op: "countDistinct", column: "v", exactUpTo: 100 }] }).create();
    restored.restore(viaJson(op.drainChanges()));
    expect(restored.advance(10)).toEqual(op.advance(10));
  });
});

describe("windowedAggregate: sma and ema over event time", () => {
  const indicators = (rows: Array<{ ts: number; v: number }>, n = 2, alpha = 0.5) => {
    const op = windowed({ windowMs: 1000, aggs: [{ op: "sma", column: "v", n }, { op: "ema", column: "v", alpha }] }).create();
    for (const r of rows) op.process({ ...r }, r.ts, 0);
    return op.advance(1000)[0]!;
  };

  test("rows out of order give what they give in event-time order (ties: the later arrival is the later value)", () => {
    // In event time: 20 (t1), 30 (t3), 10 (t5). sma of the last 2: (30 + 10) / 2; ema: 20 → 25 → 17.5.
    expect(indicators([{ ts: 5, v: 10 }, { ts: 1, v: 20 }, { ts: 3, v: 30 }])).toMatchObject({ sma_v: 20, ema_v: 17.5 });
    expect(indicators([{ ts: 1, v: 20 }, { ts: 3, v: 30 }, { ts: 5, v: 10 }])).toMatchObject({ sma_v: 20, ema_v: 17.5 });
    // A row older than the n kept by sma does not count for it.
    expect(indicators([{ ts: 5, v: 10 }, { ts: 6, v: 20 }, { ts: 1, v: 1000 }])).toMatchObject({ sma_v: 15 });
    expect(indicators([{ ts: 2, v: 1 }, { ts: 2, v: 3 }])).toMatchObject({ sma_v: 2, ema_v: 2 });
  });

  test("any arrival order of rows with distinct times gives the event-time answer (property)", () => {
    fc.assert(
      fc.property(fc.uniqueArray(fc.integer({ min: 0, max: 999 }), { minLength: 1, maxLength: 60 }), fc.integer({ min: 1, max: 5 }), fc.double({ min: 0.01, max: 1, noNaN: true }), (times, n, alpha) => {
        const rows = times.map((ts, k) => ({ ts, v: (k * 37) % 101 }));
        const sorted = [...rows].sort((a, b) => a.ts - b.ts);
        const want = { sma: sorted.slice(-n).reduce((s, r) => s + r.v, 0) / Math.min(n, sorted.length), ema: sorted.reduce<number | null>((e, r) => (e === null ? r.v : alpha * r.v + (1 - alpha) * e), null) };
        const got = indicators(rows, n, alpha);
        expect(got.sma_v).toBeCloseTo(want.sma, 9);
        expect(got.ema_v).toBeCloseTo(want.ema!, 9);
      }),
      { numRuns: 300 },
    );
  });

  test("an older engine's state (values in arrival order, no times) still restores", () => {
    const op = windowed({ aggs: [{ op: "sma", column: "v", n: 3 }, { op: "ema", column: "v", alpha: 0.5 }] }).create();
    op.restore([{ key: "w:0:", value: { start: 0, group: [], seq: 0, acc: [[1, 2, 3], 2.5] } }, { key: "meta", value: { v: 1, watermark: null, seq: 1 } }]);
    op.process({ ts: 5, v: 7 }, 5, 0);
    // sma: the 3 latest of 1, 2, 3, 7 → 2, 3, 7; ema: 0.5 · 7 + 0.5 · 2.5.
    expect(op.advance(10)).toEqual([{ windowStart: 0, windowEnd: 10, sma_v: 4, ema_v: 4.75 }]);
  });
});

describe("windowedAggregate: percentile", () => {
  const percentile = (values: readonly number[], q: number, exactUpTo?: number) => {
    const op = windowed({ aggs: [{ op: "percentile", column: "v", q, ...(exactUpTo ? { exactUpTo } : {}) }] }).create();
    for (const v of values) op.process({ ts: 1, v }, 1, 0);
    op.process({ ts: 1, v: null }, 1, 0);
    return op.advance(10)[0]!.percentile_v as number | null;
  };

  test("exact up to exactUpTo values: linear between the two nearest ranks (numpy's default)", () => {
    const values = Array.from({ length: 100 }, (_, i) => 100 - i); // 100 … 1, out of order
    expect(percentile(values, 0.5)).toBe(50.5);
    expect(percentile(values, 0.99)).toBeCloseTo(99.01, 10);
    expect(percentile(values, 0)).toBe(1);
    expect(percentile(values, 1)).toBe(100);
    expect(percentile([7], 0.3)).toBe(7);
    expect(percentile([], 0.5)).toBe(null);
  });

  let seed = 7;
  const random = () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32;
  const cases: Array<[string, () => number[]]> = [
    ["uniform", () => Array.from({ length: 50_000 }, () => random() * 1000)],
    ["log-normal (a long tail)", () => Array.from({ length: 50_000 }, () => Math.exp(2 * Math.sqrt(-2 * Math.log(random() + 1e-12)) * Math.cos(2 * Math.PI * random())))],
    ["ascending", () => Array.from({ length: 50_000 }, (_, i) => i)],
  ];
  test.each(cases)("past it (a t-digest), %s values: each quantile within 0.5%% of its rank", (_, make) => {
    const values = make();
    const sorted = [...values].sort((a, b) => a - b);
    for (const q of [0.01, 0.1, 0.5, 0.9, 0.99, 0.999]) {
      const estimate = percentile(values, q, 100)!;
      const rank = sorted.filter((v) => v < estimate).length / sorted.length;
      expect(Math.abs(rank - q)).toBeLessThan(0.005);
      expect(estimate).toBeGreaterThanOrEqual(sorted[0]!);
      expect(estimate).toBeLessThanOrEqual(sorted.at(-1)!);
    }
  });

  test("q outside [0, 1] is refused, naming the field", () => {
    expect(() => windowed({ aggs: [{ op: "percentile", column: "v", q: 99 }] })).toThrow("q is between 0 and 1");
  });
});

describe("windowedAggregate: emit", () => {
  test('emit = "update": a row with the window\'s aggregates at every change, in each window the row joins, and nothing at close', () => {
    const op = windowed({ emit: "update", groupBy: ["g"], aggs: [{ op: "count" }, { op: "sum", column: "x" }] }).create();
    const out = run(op, "ts", [row({ ts: 1, g: "a", x: 2 }), row({ ts: 2, g: "a", x: 3 }), row({ ts: 4, g: "b", x: 1 }), row({ ts: 12, g: "a", x: 5 }), wm(20)]);
    expect(out.rows).toEqual([
      { windowStart: 0, windowEnd: 10, g: "a", count: 1, sum_x: 2 },
      { windowStart: 0, windowEnd: 10, g: "a", count: 2, sum_x: 5 },
      { windowStart: 0, windowEnd: 10, g: "b", count: 1, sum_x: 1 },
      { windowStart: 10, windowEnd: 20, g: "a", count: 1, sum_x: 5 },
    ]);
    expect(op.stateSize().keys).toBe(0);
    const hopping = windowed({ emit: "update", slideMs: 5 }).create();
    expect(run(hopping, "ts", [row({ ts: 7 })]).rows).toEqual([{ windowStart: 0, windowEnd: 10, count: 1 }, { windowStart: 5, windowEnd: 15, count: 1 }]);
  });

  test('emit = "final" is the default; any other value is refused, naming the field', () => {
    const op = windowed({ emit: "final" }).create();
    expect(run(op, "ts", [row({ ts: 1 }), wm(10)]).rows).toEqual([{ windowStart: 0, windowEnd: 10, count: 1 }]);
    expect(() => windowed({ emit: "changes" })).toThrow('emit is "final" (a row when the window closes) or "update" (a row at every change)');
  });
});

describe("windowedAggregate: aggregates", () => {
  const rows: Row[] = [
    { ts: 1, price: 4, sym: "a" },
    { ts: 2, price: 2, sym: "b" },
    { ts: 3, price: null, sym: "a" },
    { ts: 4, price: 8, sym: "c" },
    { ts: 5, sym: "a" },
    { ts: 6, price: 2, sym: "b" },
  ];

  test("every aggregate over one window, null and missing values skipped (hand-computed)", () => {
    const op = windowed({
      aggs: [
        { op: "count" },
        { op: "count", column: "price" },
        { op: "sum", column: "price" },
        { op: "avg", column: "price" },
        { op: "min", column: "price" },
        { op: "max", column: "price" },
        { op: "first", column: "price" },
        { op: "last", column: "price" },
        { op: "countDistinct", column: "price" },
        { op: "countDistinct", column: "sym", alias: "symbols" },
        { op: "stddev", column: "price" },
        { op: "stddevPop", column: "price" },
        { op: "variance", column: "price" },
        { op: "variancePop", column: "price" },
        { op: "argmax", column: "price" },
        { op: "argmin", column: "price" },
        { op: "sma", column: "price", n: 3 },
        { op: "ema", column: "price", alpha: 0.5 },
      ],
    }).create();
    run(op, "ts", rows.map((r) => row(r)));
    const [out] = op.advance(10);
    // Non-null prices in arrival order: 4, 2, 8, 2. Mean 4; squared deviations 0 + 4 + 16 + 4 = 24.
    expect(out).toEqual({
      windowStart: 0,
      windowEnd: 10,
      count: 6,
      count_price: 4,
      sum_price: 16,
      avg_price: 4,
      min_price: 2,
      max_price: 8,
      first_price: 4,
      last_price: 2,
      countDistinct_price: 3,
      symbols: 3,
      stddev_price: Math.sqrt(24 / 3),
      stddevPop_price: Math.sqrt(24 / 4),
      variance_price: 24 / 3,
      variancePop_price: 24 / 4,
      // The row at the largest price; the smallest, 2, twice: the earlier arrival.
      argmax_price: { ts: 4, price: 8, sym: "c" },
      argmin_price: { ts: 2, price: 2, sym: "b" },
      // The last 3 values: 2, 8, 2.
      sma_price: 4,
      // 4 → 0.5·2 + 0.5·4 = 3 → 0.5·8 + 0.5·3 = 5.5 → 0.5·2 + 0.5·5.5 = 3.75
      ema_price: 3.75,
    });
  });

  test("an aggregate with no value in the window is null; counts are 0", () => {
    const op = windowed({
      aggs: ["sum", "avg", "min", "max", "first", "last", "stddev", "stddevPop"].map((name) => ({ op: name, column: "price" }))
        .concat([{ op: "count", column: "price" }, { op: "countDistinct", column: "price" }])
        .concat([{ op: "sma", column: "price", n: 2 } as never, { op: "ema", column: "price", alpha: 0.3 } as never]),
    }).create();
    run(op, "ts", [row({ ts: 1, price: null }), row({ ts: 2 })]);
    expect(op.advance(10)).toEqual([{
      windowStart: 0,
      windowEnd: 10,
      sum_price: null,
      avg_price: null,
      min_price: null,
      max_price: null,
      first_price: null,
      last_price: null,
      stddev_price: null,
      stddevPop_price: null,
      count_price: 0,
      countDistinct_price: 0,
      sma_price: null,
      ema_price: null,
    }]);
  });

  test("stddev (sample) of one value is null, stddevPop of it is 0", () => {
    const op = windowed({ aggs: [{ op: "stddev", column: "x" }, { op: "stddevPop", column: "x" }] }).create();
    run(op, "ts", [row({ ts: 1, x: 5 })]);
    expect(op.advance(10)).toEqual([{ windowStart: 0, windowEnd: 10, stddev_x: null, stddevPop_x: 0 }]);
  });

  test("stddev of 2, 4, 4, 4, 5, 5, 7, 9: population 2, sample sqrt(32/7)", () => {
    const op = windowed({ aggs: [{ op: "stddev", column: "x" }, { op: "stddevPop", column: "x" }] }).create();
    run(op, "ts", [2, 4, 4, 4, 5, 5, 7, 9].map((x, i) => row({ ts: i, x })));
    const [out] = op.advance(10);
    expect(out!.stddevPop_x).toBeCloseTo(2, 12);
    expect(out!.stddev_x).toBeCloseTo(Math.sqrt(32 / 7), 12);
  });

  test("first and last go by event time, not arrival; ties go to the earlier arrival for first and the later for last", () => {
    const op = windowed({ aggs: [{ op: "first", column: "v" }, { op: "last", column: "v" }] }).create();
    run(op, "ts", [row({ ts: 5, v: "a" }), row({ ts: 3, v: "b" }), row({ ts: 5, v: "c" }), row({ ts: 3, v: "d" })]);
    expect(op.advance(10)).toEqual([{ windowStart: 0, windowEnd: 10, first_v: "b", last_v: "c" }]);
  });

  test("sma keeps the last n values (in order, here arrival is event time) and averages fewer while warming up", () => {
    const op = windowed({ aggs: [{ op: "sma", column: "x", n: 2 }] }).create();
    run(op, "ts", [row({ ts: 1, x: 3 }), row({ ts: 11, x: 1 }), row({ ts: 12, x: 2 }), row({ ts: 13, x: 3 }), row({ ts: 14, x: 4 }), row({ ts: 15, x: 5 })]);
    expect(op.advance(20)).toEqual([
      { windowStart: 0, windowEnd: 10, sma_x: 3 },
      { windowStart: 10, windowEnd: 20, sma_x: 4.5 },
    ]);
  });

  test("ema starts at the first value and weighs each new one by alpha", () => {
    const op = windowed({ aggs: [{ op: "ema", column: "x", alpha: 0.25 }] }).create();
    run(op, "ts", [row({ ts: 1, x: 8 }), row({ ts: 2, x: 0 }), row({ ts: 3, x: 16 })]);
    // 8 → 0.25·0 + 0.75·8 = 6 → 0.25·16 + 0.75·6 = 8.5
    expect(op.advance(10)).toEqual([{ windowStart: 0, windowEnd: 10, ema_x: 8.5 }]);
  });

  test("countDistinct tells 1 from \"1\" and compares lists and objects by value", () => {
    const op = windowed({ aggs: [{ op: "countDistinct", column: "v" }] }).create();
    run(op, "ts", [1, "1", 1, true, [1, 2], [1, 2], { a: 1 }, { a: 1 }, -0, 0].map((v, i) => row({ ts: i, v })));
    expect(op.advance(10)).toEqual([{ windowStart: 0, windowEnd: 10, countDistinct_v: 6 }]);
  });

  test.each(["sum", "avg", "min", "max", "stddev", "stddevPop", "variance", "variancePop", "argmax", "argmin"])("a non-number for %s is a poison row (type_error) that leaves the state unchanged", (name) => {
    const op = windowed({ aggs: [{ op: "count" }, { op: name, column: "x" }] }).create();
    // What one row of x = 2 gives, where it is not 2.
    const after: Record<string, unknown> = { stddev: null, variance: null, stddevPop: 0, variancePop: 0, argmax: { ts: 1, x: 2 }, argmin: { ts: 1, x: 2 } };
    run(op, "ts", [row({ ts: 1, x: 2 })]);
    for (const bad of ["3", true, [1], { n: 1 }, Number.NaN, Number.POSITIVE_INFINITY]) {
      const error = thrown(() => op.process({ ts: 2, x: bad }, 2, 0));
      expect(error.code).toBe("POISON_ROW");
      expect(error.context?.reason).toBe("type_error");
      expect(error.context?.field).toBe("x");
    }
    expect(op.advance(10)).toEqual([{ windowStart: 0, windowEnd: 10, count: 1, [`${name}_x`]: name in after ? after[name] : 2 }]);
  });

  test("a non-finite event time is a poison row with reason bad_event_time", () => {
    const op = windowed({}).create();
    expect(thrown(() => op.process({ ts: 1 }, Number.NaN, 0)).context?.reason).toBe("bad_event_time");
  });
});

describe("windowedAggregate: compile checks", () => {
  test.each([
    [{ slideMs: 20 }, "slideMs"],
    [{ aggs: [{ op: "sum", column: "x" }, { op: "count", alias: "sum_x" }] }, "aggs.1.alias"],
    [{ aggs: [{ op: "count", alias: "windowStart" }] }, "aggs.0.alias"],
    [{ groupBy: ["count"] }, "aggs.0.alias"],
  ])("refuses %j naming field %s", (fields, field) => {
    const error = thrown(() => windowed(fields));
    expect(error.code).toBe("INVALID_TOPOLOGY");
    expect(error.context?.field).toBe(field);
  });

  test("the schema refuses unknown fields, unknown aggregates and an sma without n", () => {
    expect(() => windowed({ windowSize: 5 })).toThrow();
    expect(() => windowed({ aggs: [{ op: "median", column: "x" }] })).toThrow();
    expect(() => windowed({ aggs: [{ op: "sma", column: "x" }] })).toThrow();
    expect(() => windowed({ aggs: [{ op: "ema", column: "x", alpha: 0 }] })).toThrow();
    expect(() => windowed({ windowMs: 0 })).toThrow();
  });

  test("reports the time column, lateness and group columns for the engine", () => {
    const compiled = windowed({ groupBy: ["sym"], allowedLatenessMs: 3 });
    expect(compiled.timeColumn).toBe("ts");
    expect(compiled.allowedLatenessMs).toBe(3);
    expect(compiled.keyColumns).toEqual(["sym"]);
    expect(compiled.inputKeyColumns).toEqual([["sym"]]);
  });
});

describe("windowedAggregate: changelog", () => {
  test("drainChanges gives each dirty window once, then tombstones for fired ones, and forgets windows the log never saw", () => {
    const op = windowed({ groupBy: ["sym"], aggs: [{ op: "sum", column: "x" }] }).create();
    run(op, "ts", [row({ ts: 1, sym: "a", x: 1 }), row({ ts: 2, sym: "a", x: 2 })]);
    expect(op.drainChanges()).toEqual([
      { key: 'w:0:"a"', value: { start: 0, group: ["a"], seq: 0, acc: [3] } },
      { key: "meta", value: { v: 1, watermark: null, seq: 1 } },
    ]);
    expect(op.drainChanges()).toEqual([]);
    run(op, "ts", [row({ ts: 3, sym: "b", x: 5 }), wm(10)]);
    // "b" was born and fired between two drains: nothing to delete.
    expect(op.drainChanges()).toEqual([
      { key: 'w:0:"a"', value: null },
      { key: "meta", value: { v: 1, watermark: 10, seq: 2 } },
    ]);
  });

  test("a random in-order stream restored from its changelog at a random point ends with the same output as one never restored", () => {
    const compiled = windowed({
      windowMs: 20,
      slideMs: 10,
      allowedLatenessMs: 5,
      groupBy: ["g"],
      aggs: [
        { op: "count" },
        { op: "sum", column: "x" },
        { op: "avg", column: "x" },
        { op: "min", column: "x" },
        { op: "max", column: "x" },
        { op: "first", column: "x" },
        { op: "last", column: "x" },
        { op: "countDistinct", column: "x" },
        { op: "stddev", column: "x" },
        { op: "sma", column: "x", n: 3 },
        { op: "ema", column: "x", alpha: 0.3 },
      ],
    });
    const stream = fc.array(
      fc.record({ dt: fc.integer({ min: 0, max: 7 }), g: fc.constantFrom("a", "b", "c"), x: fc.option(fc.double({ min: -1e3, max: 1e3, noNaN: true }), { nil: null }) }),
      { minLength: 1, maxLength: 120 },
    );
    fc.assert(
      fc.property(stream, fc.nat(), fc.nat(), (items, cutAt, drainEvery) => {
        // Engine-like: event times never decrease, the watermark trails the highest by 5.
        const events: Event[] = [];
        let ts = 0;
        for (const { dt, g, x } of items) {
          ts += dt;
          events.push(row({ ts, g, x }), wm(ts - 5));
        }
        events.push(wm(1e9));
        const cut = cutAt % (events.length + 1);
        const every = 1 + (drainEvery % 4);

        const plain = run(compiled.create(), "ts", events);

        const first = compiled.create();
        const log: StateEntry[] = [];
        let steps = 0;
        const before = run(first, "ts", events.slice(0, cut), () => {
          if (++steps % every === 0) log.push(...viaJson(first.drainChanges()));
        });
        log.push(...viaJson(first.drainChanges()));
        const second = compiled.create();
        second.restore(log);
        const after = run(second, "ts", events.slice(cut));
        expect([...before.rows, ...after.rows]).toEqual(plain.rows);
        expect([...before.late, ...after.late]).toEqual(plain.late);
      }),
      { numRuns: 200 },
    );
  });
});

describe("windowedAggregate: restored windows decoded on first use", () => {
  const encoder = new TextEncoder();
  /** Entries as the engine's restore hands them over: each value its record's bytes, unparsed. */
  const raw = (entries: StateEntry[]) => entries.map((e) => (e.value === null || e.key === "meta" ? e : { key: e.key, value: new RawState(encoder.encode(JSON.stringify(e.value)), `fv-state-t[0]@${e.key}`) }));
  /** A changelog of windows for groups a and b in [0, 10). */
  function changelog(): { first: StateEntry[]; second: StateEntry[] } {
    const op = windowed({ groupBy: ["g"] }).create();
    run(op, "ts", [row({ ts: 1, g: "a" }), row({ ts: 2, g: "b" })]);
    const first = viaJson(op.drainChanges());
    run(op, "ts", [row({ ts: 3, g: "a" }), row({ ts: 12, g: "c" })]);
    const second = viaJson(op.drainChanges());
    return { first, second };
  }

  // A second restore must see the first one's held windows: it may replace or delete them.
  test("a second restore after one whose windows were all held replaces them, as it replaces decoded ones", () => {
    const { first, second } = changelog();
    const eager = windowed({ groupBy: ["g"] }).create();
    eager.restore(first, { unique: true });
    eager.restore(second, { unique: true });
    const lazy = windowed({ groupBy: ["g"] }).create();
    lazy.restore(raw(first), { unique: true });
    lazy.restore(second, { unique: true });
    expect(lazy.stateKeys()).toBe(3);
    expect(lazy.stateKeys()).toBe(eager.stateKeys());
    expect(lazy.advance(20)).toEqual(eager.advance(20));
    expect(lazy.stateKeys()).toBe(0);
  });

  test("a held window that does not decode fails every use with STATE_CORRUPTED naming its record, and is never dropped", () => {
    const { first } = changelog();
    const entries = raw(first).map((e) => (e.key.includes('"a"') ? { key: e.key, value: new RawState(encoder.encode("{not json"), "fv-state-t[0]@7") } : e));
    const op = windowed({ groupBy: ["g"] }).create();
    op.restore(entries, { unique: true });
    for (let i = 0; i < 2; i++) {
      const error = thrown(() => op.read!(["a"]));
      expect(error.code).toBe("STATE_CORRUPTED");
      expect(error.message).toBe("state record fv-state-t[0]@7 is not JSON");
    }
    expect(op.read!(["b"])).toEqual([{ windowStart: 0, windowEnd: 10, g: "b", count: 1 }]);
    expect(op.stateKeys()).toBe(2);
    expect(thrown(() => op.advance(10)).message).toBe("state record fv-state-t[0]@7 is not JSON");
    // Nothing fired and the watermark did not move: the same call fails the same way.
    expect(thrown(() => op.advance(10)).message).toBe("state record fv-state-t[0]@7 is not JSON");
    expect(op.stateKeys()).toBe(2);
  });

  test("a held key whose start is not written as the window's own key writes it is refused at the restore", () => {
    const { first } = changelog();
    const entries = raw(first).map((e) => (e.key.startsWith("w:0:") ? { key: e.key.replace("w:0:", "w:00:"), value: e.value } : e));
    const op = windowed({ groupBy: ["g"] }).create();
    op.restore(entries, { unique: true });
    const error = thrown(() => op.stateKeys());
    expect(error.code).toBe("STATE_CORRUPTED");
    expect(error.message).toContain("the key is not w:<start>:<group>");
  });
});
