import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import type { Row } from "../../src/expr/index.ts";
import { compileOp, row, run, wm } from "./helpers.ts";

const W = 10;
function sliding(fields: Record<string, unknown> = {}) {
  return compileOp({ op: "windowedAggregate", timeColumn: "ts", windowMs: W, sliding: true, aggs: [{ op: "count" }, { op: "sum", column: "x" }], ...fields });
}

/**
 * Kafka Streams' SlidingWindows, computed by brute force from the definition: per group, a window
 * [t − W, t] ends at each row time t, and a window [t + 1, t + 1 + W] starts after it when some
 * row falls in that range; windows with the same start are one. Each window's count and sum of x.
 */
function reference(rows: Array<{ ts: number; g: string; x: number }>): Row[] {
  const out: Row[] = [];
  const groups = [...new Set(rows.map((r) => r.g))];
  for (const g of groups) {
    const mine = rows.filter((r) => r.g === g);
    const starts = new Set<number>();
    for (const r of mine) {
      starts.add(r.ts - W);
      if (mine.some((o) => o.ts >= r.ts + 1 && o.ts <= r.ts + 1 + W)) starts.add(r.ts + 1);
    }
    for (const start of starts) {
      const inside = mine.filter((r) => r.ts >= start && r.ts <= start + W);
      out.push({ windowStart: start, windowEnd: start + W, g, count: inside.length, sum_x: inside.reduce((s, r) => s + r.x, 0) });
    }
  }
  return out;
}

const byWindow = (a: Row, b: Row) => String(a.g).localeCompare(String(b.g)) || (a.windowStart as number) - (b.windowStart as number);

describe("windowedAggregate with sliding = true (Kafka Streams' SlidingWindows)", () => {
  test("rows at 0 and 5, windowMs 10: [−10, 0], [−5, 5] and [1, 11], each once, by end, when the watermark passes it", () => {
    const op = sliding().create();
    const out = run(op, "ts", [row({ ts: 0, x: 1 }), row({ ts: 5, x: 2 }), wm(1)]);
    expect(out.rows).toEqual([{ windowStart: -10, windowEnd: 0, count: 1, sum_x: 1 }]);
    expect(op.advance(6)).toEqual([{ windowStart: -5, windowEnd: 5, count: 2, sum_x: 3 }]);
    expect(op.advance(11)).toEqual([]);
    // [1, 11] holds 5 only; 5's own right window [6, 16] is empty, so there is none.
    expect(op.advance(12)).toEqual([{ windowStart: 1, windowEnd: 11, count: 1, sum_x: 2 }]);
    expect(op.advance(100)).toEqual([]);
    expect(op.stateSize().keys).toBe(0);
  });

  test("a row behind the watermark is late and changes nothing; a row at the watermark is not", () => {
    const op = sliding().create();
    const out = run(op, "ts", [row({ ts: 20, x: 1 }), wm(15), row({ ts: 14, x: 5 }), row({ ts: 15, x: 7 }), wm(100)]);
    expect(out.late).toEqual([{ ts: 14, x: 5 }]);
    expect(out.rows).toEqual([
      { windowStart: 5, windowEnd: 15, count: 1, sum_x: 7 },
      { windowStart: 10, windowEnd: 20, count: 2, sum_x: 8 },
      { windowStart: 16, windowEnd: 26, count: 1, sum_x: 1 },
    ]);
  });

  test('emit = "update": every window a row changes or makes, as it stands, by start; nothing at close', () => {
    const op = sliding({ emit: "update" }).create();
    const out = run(op, "ts", [row({ ts: 0, x: 1 }), row({ ts: 5, x: 2 }), wm(100)]);
    expect(out.rows).toEqual([
      { windowStart: -10, windowEnd: 0, count: 1, sum_x: 1 },
      // 5: its left window, and the right window of 0 it makes.
      { windowStart: -5, windowEnd: 5, count: 2, sum_x: 3 },
      { windowStart: 1, windowEnd: 11, count: 1, sum_x: 2 },
    ]);
    expect(op.stateSize().keys).toBe(0);
  });

  test("any order of rows within the lateness gives the windows of the definition, per group (property, against brute force)", () => {
    const rows = fc.array(fc.record({ ts: fc.integer({ min: 0, max: 60 }), g: fc.constantFrom("a", "b"), x: fc.integer({ min: -5, max: 5 }) }), { minLength: 1, maxLength: 30 });
    fc.assert(
      fc.property(rows, fc.boolean(), (items, update) => {
        const op = sliding({ groupBy: ["g"], ...(update ? { emit: "update" } : {}) }).create();
        const out = run(op, "ts", [...items.map((r) => row({ ...r })), wm(1000)]).rows;
        const want = reference(items).sort(byWindow);
        if (!update) {
          expect([...out].sort(byWindow)).toEqual(want);
          // By end, each window once.
          for (let i = 1; i < out.length; i++) expect(out[i]!.windowEnd as number).toBeGreaterThanOrEqual(out[i - 1]!.windowEnd as number);
        } else {
          // The last update of each window is its final value, and every window was emitted.
          const last = new Map<string, Row>();
          for (const r of out) last.set(`${r.g}|${r.windowStart}`, r);
          expect([...last.values()].sort(byWindow)).toEqual(want);
        }
      }),
      { numRuns: 300 },
    );
  });

  test("watermarks in the middle emit each window once, when it closes, and the union is the definition's", () => {
    const rows = fc.array(fc.record({ ts: fc.integer({ min: 0, max: 60 }), g: fc.constantFrom("a", "b"), x: fc.integer({ min: 0, max: 5 }) }), { minLength: 1, maxLength: 30 });
    fc.assert(
      fc.property(rows, (items) => {
        // In time order with a watermark after each row: nothing is late.
        const sorted = [...items].sort((a, b) => a.ts - b.ts);
        const op = sliding({ groupBy: ["g"] }).create();
        const out = run(op, "ts", [...sorted.flatMap((r) => [row({ ...r }), wm(r.ts)]), wm(1000)]);
        expect(out.late).toEqual([]);
        expect([...out.rows].sort(byWindow)).toEqual(reference(sorted).sort(byWindow));
      }),
      { numRuns: 200 },
    );
  });

  test("sliding takes no slideMs", () => {
    expect(() => sliding({ slideMs: 5 })).toThrow('field "slideMs": sliding windows have no slideMs');
  });
});
