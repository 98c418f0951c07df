import { describe, expect, test } from "bun:test";
import { compileOp, row, run, thrown, wm } from "./helpers.ts";

function sessions(fields: Record<string, unknown>) {
  return compileOp({ op: "sessionAggregate", timeColumn: "ts", gapMs: 10, aggs: [{ op: "count" }], ...fields });
}

describe("sessionAggregate: countDistinct past exactUpTo", () => {
  test("merging sessions unions their values: two sets, a set and registers, two register sets", () => {
    for (const [left, right] of [[30, 30], [30, 3000], [3000, 3000]] as const) {
      const op = sessions({ aggs: [{ op: "countDistinct", column: "v", exactUpTo: 100 }] }).create();
      // Session A at 0 (values 0..left-1), session B at 15 (values overlapping half of A's), then a bridging row at 8.
      for (let i = 0; i < left; i++) op.process({ ts: 0, v: i }, 0, 0);
      for (let i = 0; i < right; i++) op.process({ ts: 15, v: Math.floor(left / 2) + i }, 15, 0);
      op.process({ ts: 8, v: 0 }, 8, 0);
      const fired = op.advance(100);
      expect(fired.length).toBe(1);
      const [out] = fired;
      const union = Math.floor(left / 2) + right;
      expect(Math.abs((out!.countDistinct_v as number) - union) / union).toBeLessThan(0.03);
      if (union <= 100) expect(out!.countDistinct_v).toBe(union);
    }
  });
});

describe("sessionAggregate: percentile", () => {
  test("merging sessions merges their values or digests: the median of the union", () => {
    for (const [left, right] of [[40, 40], [40, 4000], [4000, 4000]] as const) {
      const op = sessions({ aggs: [{ op: "percentile", column: "v", q: 0.5, exactUpTo: 100 }] }).create();
      // Session A at 0 holds 0 … left−1, session B at 15 holds left … left+right−1; a row at 8 (value 0) bridges them.
      for (let i = 0; i < left; i++) op.process({ ts: 0, v: i }, 0, 0);
      for (let i = 0; i < right; i++) op.process({ ts: 15, v: left + i }, 15, 0);
      op.process({ ts: 8, v: 0 }, 8, 0);
      const [out] = op.advance(100);
      const all = [...Array(left + right).keys(), 0].sort((a, b) => a - b);
      const estimate = out!.percentile_v as number;
      if (all.length <= 100) {
        // Still exact: the middle one of 81 values.
        expect(estimate).toBe(all[40]!);
        continue;
      }
      const rank = all.filter((v) => v < estimate).length / all.length;
      expect(Math.abs(rank - 0.5)).toBeLessThan(0.005);
    }
  });
});

describe("sessionAggregate: emit", () => {
  test('emit = "update": the session as it stands after each row (a bridging row gives the merged session), nothing at close', () => {
    const op = sessions({ emit: "update" }).create();
    const out = run(op, "ts", [row({ ts: 0 }), row({ ts: 5 }), row({ ts: 20 }), row({ ts: 11 }), wm(40)]);
    expect(out.rows).toEqual([
      { sessionStart: 0, sessionEnd: 10, count: 1 },
      { sessionStart: 0, sessionEnd: 15, count: 2 },
      { sessionStart: 20, sessionEnd: 30, count: 1 },
      { sessionStart: 0, sessionEnd: 30, count: 4 },
    ]);
    expect(op.stateSize().keys).toBe(0);
  });
});

describe("sessionAggregate", () => {
  test("a session fires once the watermark reaches its last event + gapMs, reported as sessionEnd", () => {
    const op = sessions({}).create();
    run(op, "ts", [row({ ts: 0 }), row({ ts: 5 })]);
    expect(op.advance(14)).toEqual([]);
    expect(op.advance(15)).toEqual([{ sessionStart: 0, sessionEnd: 15, count: 2 }]);
    expect(op.stateSize().keys).toBe(0);
  });

  test("rows less than gapMs apart share a session; exactly gapMs apart starts a new one", () => {
    const op = sessions({}).create();
    run(op, "ts", [row({ ts: 0 }), row({ ts: 9 }), row({ ts: 19 })]);
    expect(op.advance(100)).toEqual([
      { sessionStart: 0, sessionEnd: 19, count: 2 },
      { sessionStart: 19, sessionEnd: 29, count: 1 },
    ]);
  });

  test("a row that bridges two sessions merges them, and every aggregate merges (hand-computed)", () => {
    const op = sessions({
      aggs: [
        { op: "count" },
        { op: "sum", column: "v" },
        { op: "avg", column: "v" },
        { op: "min", column: "v" },
        { op: "max", column: "v" },
        { op: "first", column: "v" },
        { op: "last", column: "v" },
        { op: "countDistinct", column: "v" },
        { op: "stddev", column: "v" },
        { op: "stddevPop", column: "v" },
        { op: "variance", column: "v" },
        { op: "variancePop", column: "v" },
        { op: "argmax", column: "v" },
        { op: "argmin", column: "v" },
      ],
    }).create();
    // Two sessions: [0, 2] and [20, 22]. The row at 11 is within 10 of 2 and of 20.
    run(op, "ts", [row({ ts: 0, v: 1 }), row({ ts: 2, v: 5 }), row({ ts: 20, v: 3 }), row({ ts: 22, v: 3 })]);
    expect(op.stateSize().keys).toBe(1);
    run(op, "ts", [row({ ts: 11, v: 7 })]);
    expect(op.advance(31)).toEqual([]);
    const [out] = op.advance(32);
    // Values 1, 5, 3, 3, 7: mean 3.8, squared deviations 7.84 + 1.44 + 0.64 + 0.64 + 10.24 = 20.8.
    expect(out).toEqual({
      sessionStart: 0,
      sessionEnd: 32,
      count: 5,
      sum_v: 19,
      avg_v: 3.8,
      min_v: 1,
      max_v: 7,
      first_v: 1,
      last_v: 3,
      countDistinct_v: 4,
      stddev_v: expect.closeTo(Math.sqrt(20.8 / 4), 12) as unknown as number,
      stddevPop_v: expect.closeTo(Math.sqrt(20.8 / 5), 12) as unknown as number,
      variance_v: expect.closeTo(20.8 / 4, 12) as unknown as number,
      variancePop_v: expect.closeTo(20.8 / 5, 12) as unknown as number,
      // Across the merged sessions: the row at 7 (it bridged them) and the row at 1.
      argmax_v: { ts: 11, v: 7 },
      argmin_v: { ts: 0, v: 1 },
    });
  });

  test("without the bridging row the two sessions fire separately", () => {
    const op = sessions({ aggs: [{ op: "sum", column: "v" }] }).create();
    run(op, "ts", [row({ ts: 0, v: 1 }), row({ ts: 2, v: 5 }), row({ ts: 20, v: 3 }), row({ ts: 22, v: 3 })]);
    expect(op.advance(32)).toEqual([
      { sessionStart: 0, sessionEnd: 12, sum_v: 6 },
      { sessionStart: 20, sessionEnd: 32, sum_v: 6 },
    ]);
  });

  test("an out-of-order row before a session's start extends it backwards", () => {
    const op = sessions({}).create();
    run(op, "ts", [row({ ts: 20 }), row({ ts: 12 }), row({ ts: 3 })]);
    expect(op.advance(100)).toEqual([{ sessionStart: 3, sessionEnd: 30, count: 3 }]);
  });

  test("a row that would open an already-closed session is late; one that joins an open session is not", () => {
    const op = sessions({}).create();
    const out = run(op, "ts", [row({ ts: 0 }), row({ ts: 20 }), wm(21), row({ ts: 4 }), row({ ts: 11 }), row({ ts: 12 })]);
    // ts 4: its own session would end at 14 <= 21 and no open session takes it. ts 11 joins [20]: 11 > 20 - 10.
    expect(out.rows).toEqual([{ sessionStart: 0, sessionEnd: 10, count: 1 }]);
    expect(out.late).toEqual([{ ts: 4 }]);
    expect(op.advance(100)).toEqual([{ sessionStart: 11, sessionEnd: 30, count: 3 }]);
  });

  test("groups keep separate sessions; sessions fire in end order, ties in arrival order", () => {
    const op = sessions({ groupBy: ["user"] }).create();
    run(op, "ts", [row({ ts: 5, user: "b" }), row({ ts: 0, user: "a" }), row({ ts: 5, user: "a" }), row({ ts: 3, user: "c" })]);
    expect(op.advance(100)).toEqual([
      { sessionStart: 3, sessionEnd: 13, user: "c", count: 1 },
      { sessionStart: 5, sessionEnd: 15, user: "b", count: 1 },
      { sessionStart: 0, sessionEnd: 15, user: "a", count: 2 },
    ]);
  });

  test("sma and ema are refused at compile time: their order-dependent state cannot merge", () => {
    for (const agg of [{ op: "sma", column: "x", n: 3 }, { op: "ema", column: "x", alpha: 0.5 }]) {
      const error = thrown(() => sessions({ aggs: [{ op: "count" }, agg] }));
      expect(error.code).toBe("INVALID_TOPOLOGY");
      expect(error.context?.field).toBe("aggs.1.op");
    }
  });

  test("a poison row changes nothing, even when it would have bridged two sessions", () => {
    const op = sessions({ aggs: [{ op: "sum", column: "v" }] }).create();
    run(op, "ts", [row({ ts: 0, v: 1 }), row({ ts: 15, v: 2 })]);
    expect(thrown(() => op.process({ ts: 8, v: "x" }, 8, 0)).context?.reason).toBe("type_error");
    expect(op.advance(100)).toEqual([
      { sessionStart: 0, sessionEnd: 10, sum_v: 1 },
      { sessionStart: 15, sessionEnd: 25, sum_v: 2 },
    ]);
  });

  test("the changelog holds one entry per group, with its open sessions, and a tombstone when the last one fires", () => {
    const op = sessions({ groupBy: ["u"] }).create();
    run(op, "ts", [row({ ts: 0, u: "a" }), row({ ts: 30, u: "a" })]);
    expect(op.drainChanges()).toEqual([
      { key: 's:"a"', value: { group: ["a"], seq: 0, sessions: [{ start: 0, last: 0, seq: 1, acc: [1] }, { start: 30, last: 30, seq: 2, acc: [1] }] } },
      { key: "meta", value: { v: 1, watermark: null, seq: 3 } },
    ]);
    op.advance(10);
    expect(op.drainChanges()[0]).toEqual({ key: 's:"a"', value: { group: ["a"], seq: 0, sessions: [{ start: 30, last: 30, seq: 2, acc: [1] }] } });
    op.advance(40);
    expect(op.drainChanges()[0]).toEqual({ key: 's:"a"', value: null });
  });
});
