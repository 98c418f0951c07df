/**
 * Queryable state: an operator's `read(group)` is the current value of the key, in the shape of
 * its output rows. For a windowed or session operator, that is what it would emit for the key if
 * every open window closed now; for lastN and a running topN, the last update it emitted.
 */
import { describe, expect, test } from "bun:test";
import type { Row } from "../../src/expr/index.ts";
import type { CompiledOperator } from "../../src/ops/index.ts";
import { compileOp, type Event, row, run, viaJson, wm } from "./helpers.ts";

/** What `compiled` would emit for each group if every open window closed now (a restored copy, flushed). */
function closedNow(compiled: CompiledOperator, op: ReturnType<CompiledOperator["create"]>, column: string): Map<string, Row[]> {
  const copy = compiled.create();
  copy.restoreSnapshot(viaJson(op.snapshot()));
  const out = new Map<string, Row[]>();
  for (const r of copy.advance(Number.MAX_SAFE_INTEGER)) out.set(JSON.stringify(r[column]), [...(out.get(JSON.stringify(r[column])) ?? []), r]);
  return out;
}

const byStart = (key: string) => (a: Row, b: Row) => (a[key] as number) - (b[key] as number);

describe("read(group) and groups()", () => {
  const closing: Array<{ name: string; compiled: CompiledOperator; column: string; start: string; events: Event[] }> = [
    {
      name: "windowedAggregate (hopping)",
      compiled: compileOp({ op: "windowedAggregate", timeColumn: "ts", windowMs: 10, slideMs: 5, groupBy: ["g"], aggs: [{ op: "count" }, { op: "sum", column: "x" }] }),
      column: "g",
      start: "windowStart",
      events: [row({ ts: 1, g: "a", x: 1 }), row({ ts: 3, g: "b", x: 2 }), row({ ts: 6, g: "a", x: 7 }), wm(5), row({ ts: 9, g: "a", x: 3 }), row({ ts: 12, g: "c", x: 1 })],
    },
    {
      name: "sessionAggregate",
      compiled: compileOp({ op: "sessionAggregate", timeColumn: "ts", gapMs: 10, groupBy: ["g"], aggs: [{ op: "count" }, { op: "sum", column: "x" }] }),
      column: "g",
      start: "sessionStart",
      events: [row({ ts: 0, g: "a", x: 1 }), row({ ts: 25, g: "a", x: 2 }), row({ ts: 3, g: "b", x: 3 }), wm(12), row({ ts: 14, g: "a", x: 4 })],
    },
    {
      name: "topN (windowed)",
      compiled: compileOp({ op: "topN", timeColumn: "ts", n: 2, by: "s", groupBy: ["g"], windowMs: 10 }),
      column: "g",
      start: "windowStart",
      events: [row({ ts: 1, g: "a", s: 5 }), row({ ts: 2, g: "a", s: 9 }), row({ ts: 3, g: "a", s: 1 }), row({ ts: 12, g: "a", s: 2 }), row({ ts: 4, g: "b", s: 4 })],
    },
  ];

  for (const c of closing) {
    test(`${c.name}: after every event, each key reads what it would emit if its windows closed now`, () => {
      const op = c.compiled.create();
      for (let i = 0; i < c.events.length; i++) {
        run(op, "ts", [c.events[i]!]);
        const expected = closedNow(c.compiled, op, c.column);
        expect(new Set([...op.groups!()].map((g) => JSON.stringify(g[0])))).toEqual(new Set(expected.keys()));
        for (const [key, rows] of expected) {
          expect(op.read!([JSON.parse(key)])).toEqual(rows.sort(byStart(c.start)));
        }
        expect(op.read!(["nobody"])).toEqual([]);
      }
    });
  }

  test("lastN: a key reads as its last update; a composite key by its values in groupBy order", () => {
    const compiled = compileOp({ op: "lastN", timeColumn: "ts", n: 2, column: "px", groupBy: ["sym", "venue"] });
    const op = compiled.create();
    const out = run(op, "ts", [row({ ts: 1, sym: "A", venue: "x", px: 1 }), row({ ts: 2, sym: "A", venue: "y", px: 2 }), row({ ts: 3, sym: "A", venue: "x", px: 3 }), row({ ts: 4, sym: "A", venue: "x", px: 4 })]);
    expect(op.read!(["A", "x"])).toEqual([out.rows[3]!]);
    expect(op.read!(["A", "x"])).toEqual([{ sym: "A", venue: "x", last: [3, 4] }]);
    expect(op.read!(["A", "y"])).toEqual([{ sym: "A", venue: "y", last: [2] }]);
    expect(op.read!(["x", "A"])).toEqual([]);
    expect([...op.groups!()].map((g) => [...g]).sort()).toEqual([["A", "x"], ["A", "y"]]);
    // Restored from its changelog, it reads the same.
    const restored = compiled.create();
    restored.restore(viaJson(op.drainChanges()));
    expect(restored.read!(["A", "x"])).toEqual([{ sym: "A", venue: "x", last: [3, 4] }]);
  });

  test("topN (running): a key reads as its current ranking", () => {
    const op = compileOp({ op: "topN", timeColumn: "ts", n: 2, by: "s", groupBy: ["g"] }).create();
    const out = run(op, "ts", [row({ ts: 1, g: "a", s: 5 }), row({ ts: 2, g: "a", s: 9 }), row({ ts: 3, g: "a", s: 1 })]);
    expect(op.read!(["a"])).toEqual([out.rows[out.rows.length - 1]!]);
    expect(op.read!(["b"])).toEqual([]);
  });

  test("streamJoin keeps no state per group key: it offers no read", () => {
    const op = compileOp({ op: "streamJoin", timeColumn: "ts", on: "id", withinMs: 10 }, 2).create();
    expect(op.read).toBeUndefined();
    expect(op.groups).toBeUndefined();
  });
});
