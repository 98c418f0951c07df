/**
 * The state contract, run against every operator: snapshot and changelog restore give the same
 * subsequent output, bad state is refused, stateSize follows the live keys.
 */
import { describe, expect, test } from "bun:test";
import { type CompiledOperator, type Operator, RawState, type StateEntry } from "../../src/ops/index.ts";
import { compacted, compileOp, type Event, row, run, thrown, viaJson, wm } from "./helpers.ts";

interface Case {
  name: string;
  compiled: CompiledOperator;
  /** A script that fills, fires and evicts state; restores are tried at every point of it. (clearAt < 0: nothing clears by time.) */
  events: Event[];
  /** Events that leave a value JSON cannot carry in the state. */
  poison: Event[];
  /** Events after which state has grown, then a watermark that clears it. */
  grow: Event[];
  clearAt: number;
}

const L = 0;
const R = 1;

const cases: Case[] = [
  {
    name: "windowedAggregate",
    compiled: compileOp({
      op: "windowedAggregate",
      timeColumn: "ts",
      windowMs: 10,
      slideMs: 5,
      groupBy: ["g"],
      aggs: [
        { op: "count" },
        { op: "sum", column: "x" },
        { op: "avg", column: "x" },
        { op: "first", column: "x" },
        { op: "last", column: "x" },
        { op: "countDistinct", column: "x" },
        { op: "countDistinct", column: "x", exactUpTo: 2, alias: "approx" },
        { op: "percentile", column: "x", q: 0.9, exactUpTo: 2, alias: "p90" },
        { op: "percentile", column: "x", q: 0.5, alias: "p50" },
        { op: "stddev", column: "x" },
        { op: "variancePop", column: "x" },
        { op: "argmax", column: "x" },
        { op: "argmin", column: "x" },
        { op: "sma", column: "x", n: 2 },
        { op: "ema", column: "x", alpha: 0.3 },
      ],
    }),
    events: [
      row({ ts: 1, g: "a", x: 1.5 }), row({ ts: 3, g: "b", x: 2 }), row({ ts: 4, g: "a", x: 0.1 }), row({ ts: 6, g: "a", x: 7 }),
      wm(5), row({ ts: 2, g: "a", x: 4 }), row({ ts: 8, g: "b", x: null }), row({ ts: 9, g: "a", x: 3 }), wm(10),
      row({ ts: 4, g: "a", x: 9 }), row({ ts: 12, g: "c", x: 0.2 }), row({ ts: 11, g: "a", x: 5 }), wm(16), row({ ts: 18, g: "a", x: 1 }), wm(40),
    ],
    poison: [row({ ts: 1, g: "a", x: 1e308 }), row({ ts: 2, g: "a", x: 1e308 })],
    grow: [row({ ts: 1, g: "a", x: 1 }), row({ ts: 2, g: "b", x: 1 }), row({ ts: 13, g: "a", x: 1 })],
    clearAt: 100,
  },
  {
    name: "sessionAggregate",
    compiled: compileOp({
      op: "sessionAggregate",
      timeColumn: "ts",
      gapMs: 10,
      groupBy: ["u"],
      aggs: [{ op: "count" }, { op: "sum", column: "x" }, { op: "avg", column: "x" }, { op: "last", column: "x" }, { op: "countDistinct", column: "x" }, { op: "countDistinct", column: "x", exactUpTo: 1, alias: "approx" }, { op: "percentile", column: "x", q: 0.25, exactUpTo: 1, alias: "p25" }, { op: "stddevPop", column: "x" }, { op: "variance", column: "x" }],
    }),
    events: [
      row({ ts: 0, u: "a", x: 1 }), row({ ts: 25, u: "a", x: 2 }), row({ ts: 3, u: "b", x: 0.3 }), wm(12), row({ ts: 14, u: "a", x: 4 }),
      row({ ts: 5, u: "b", x: 5 }), wm(16), row({ ts: 40, u: "b", x: 6 }), row({ ts: 1, u: "c", x: 7 }), wm(36), row({ ts: 44, u: "b", x: 0.1 }), wm(100),
    ],
    poison: [row({ ts: 1, u: "a", x: 1e308 }), row({ ts: 2, u: "a", x: 1e308 })],
    grow: [row({ ts: 0, u: "a", x: 1 }), row({ ts: 1, u: "b", x: 1 }), row({ ts: 30, u: "a", x: 1 })],
    clearAt: 100,
  },
  {
    name: "windowedAggregate (emit update)",
    compiled: compileOp({ op: "windowedAggregate", timeColumn: "ts", windowMs: 10, slideMs: 5, groupBy: ["g"], emit: "update", aggs: [{ op: "count" }, { op: "sum", column: "x" }, { op: "argmax", column: "x" }] }),
    events: [
      row({ ts: 1, g: "a", x: 1 }), row({ ts: 3, g: "b", x: 2 }), wm(5), row({ ts: 2, g: "a", x: 4 }), row({ ts: 9, g: "a", x: 3 }), wm(10),
      row({ ts: 4, g: "a", x: 9 }), row({ ts: 12, g: "c", x: 0.2 }), wm(16), row({ ts: 18, g: "a", x: 1 }), wm(40),
    ],
    poison: [row({ ts: 1, g: "a", x: 1e308 }), row({ ts: 2, g: "a", x: 1e308 })],
    grow: [row({ ts: 1, g: "a", x: 1 }), row({ ts: 2, g: "b", x: 1 }), row({ ts: 13, g: "a", x: 1 })],
    clearAt: 100,
  },
  {
    name: "windowedAggregate (sliding)",
    compiled: compileOp({ op: "windowedAggregate", timeColumn: "ts", windowMs: 10, sliding: true, groupBy: ["g"], aggs: [{ op: "count" }, { op: "last", column: "x" }, { op: "sma", column: "y", n: 2 }] }),
    events: [
      row({ ts: 1, g: "a", x: 1 }), row({ ts: 3, g: "b", x: 2 }), wm(2), row({ ts: 2, g: "a", x: 4 }), row({ ts: 9, g: "a", x: 3 }), wm(10),
      row({ ts: 12, g: "a", x: 9 }), row({ ts: 12, g: "c", x: 0.2 }), wm(16), row({ ts: 18, g: "a", x: 1 }), row({ ts: 30, g: "a", x: 2 }), wm(60),
    ],
    poison: [row({ ts: 1, g: "a", x: Number.NaN })],
    grow: [row({ ts: 1, g: "a", x: 1 }), row({ ts: 2, g: "b", x: 1 }), row({ ts: 13, g: "a", x: 1 })],
    clearAt: 100,
  },
  {
    name: "windowedAggregate (sliding, emit update)",
    compiled: compileOp({ op: "windowedAggregate", timeColumn: "ts", windowMs: 10, sliding: true, emit: "update", groupBy: ["g"], aggs: [{ op: "count" }, { op: "first", column: "x" }, { op: "max", column: "y" }] }),
    events: [
      row({ ts: 1, g: "a", x: 1 }), row({ ts: 3, g: "b", x: 2 }), wm(2), row({ ts: 2, g: "a", x: 4 }), row({ ts: 9, g: "a", x: 3 }), wm(10),
      row({ ts: 12, g: "a", x: 9 }), wm(16), row({ ts: 18, g: "a", x: 1 }), wm(60),
    ],
    poison: [row({ ts: 1, g: "a", x: Number.NaN })],
    grow: [row({ ts: 1, g: "a", x: 1 }), row({ ts: 2, g: "b", x: 1 }), row({ ts: 13, g: "a", x: 1 })],
    clearAt: 100,
  },
  {
    name: "sessionAggregate (emit update)",
    compiled: compileOp({ op: "sessionAggregate", timeColumn: "ts", gapMs: 10, groupBy: ["u"], emit: "update", aggs: [{ op: "count" }, { op: "sum", column: "x" }, { op: "variance", column: "x" }] }),
    events: [
      row({ ts: 0, u: "a", x: 1 }), row({ ts: 25, u: "a", x: 2 }), row({ ts: 3, u: "b", x: 0.3 }), wm(12), row({ ts: 14, u: "a", x: 4 }),
      row({ ts: 5, u: "b", x: 5 }), wm(16), row({ ts: 40, u: "b", x: 6 }), wm(100),
    ],
    poison: [row({ ts: 1, u: "a", x: 1e308 }), row({ ts: 2, u: "a", x: 1e308 })],
    grow: [row({ ts: 0, u: "a", x: 1 }), row({ ts: 1, u: "b", x: 1 }), row({ ts: 30, u: "a", x: 1 })],
    clearAt: 100,
  },
  {
    name: "tableJoin (processing time, left)",
    compiled: compileOp({ op: "tableJoin", on: "sym", timeColumn: "ts", type: "left", columns: ["px"] }, 2),
    events: [
      row({ sym: "a", px: 1 }, R), row({ ts: 1, sym: "a", q: 1 }, L), row({ ts: 2, sym: "b", q: 2 }, L), row({ sym: "b", px: 2 }, R), wm(1),
      row({ ts: 3, sym: "b", q: 3 }, L), row({ sym: "a", px: 5 }, R), row({ ts: 4, sym: "a", q: 4 }, L), wm(10), row({ ts: 5, sym: "c", q: 5 }, L),
    ],
    poison: [row({ sym: "a", px: Number.NaN }, R)],
    grow: [row({ sym: "a", px: 1 }, R), row({ sym: "b", px: 1 }, R), row({ sym: "c", px: 1 }, R)],
    clearAt: -1,
  },
  {
    name: "tableJoin (as of event time)",
    compiled: compileOp({ op: "tableJoin", on: "sym", timeColumn: "ts", asOf: "eventTime", historyMs: 10 }, 2),
    events: [
      row({ ts: 0, sym: "a", px: 1 }, R), row({ ts: 5, sym: "a", px: 2 }, R), row({ ts: 3, sym: "a", q: 1 }, L), row({ ts: 7, sym: "a", q: 2 }, L),
      row({ ts: 30, sym: "a", px: 3 }, R), row({ ts: 6, sym: "a", q: 3 }, L), row({ ts: 31, sym: "a", q: 4 }, L), wm(10), row({ ts: 2, sym: "b", px: 9 }, R), row({ ts: 2, sym: "b", q: 5 }, L),
    ],
    poison: [row({ ts: 0, sym: "a", px: Number.NaN }, R)],
    grow: [row({ ts: 0, sym: "a", px: 1 }, R), row({ ts: 0, sym: "b", px: 1 }, R), row({ ts: 0, sym: "c", px: 1 }, R)],
    clearAt: -1,
  },
  {
    name: "streamJoin (left)",
    compiled: compileOp({ op: "streamJoin", timeColumn: "ts", on: "id", withinMs: 5, type: "left", rightColumns: ["px"] }, 2),
    events: [
      row({ id: 1, ts: 0, q: 1 }, L), row({ id: 2, ts: 1, q: 2 }, L), row({ id: 1, ts: 4, px: 10 }, R), row({ id: 3, ts: 6, px: 11 }, R),
      wm(3), row({ id: 3, ts: 8, q: 3 }, L), row({ id: 2, ts: 2, q: 4 }, L), wm(7), row({ id: 1, ts: 9, px: 12 }, R),
      row({ id: 4, ts: 12, q: 5 }, L), row({ id: null, ts: 12, q: 6 }, L), wm(14), row({ id: 4, ts: 15, px: 13 }, R), wm(50),
    ],
    poison: [row({ id: 1, ts: 0, q: Number.NaN }, L)],
    grow: [row({ id: 1, ts: 0 }, L), row({ id: 1, ts: 1 }, R), row({ id: 2, ts: 2 }, L)],
    clearAt: 100,
  },
  {
    name: "streamJoin (inner)",
    compiled: compileOp({ op: "streamJoin", timeColumn: "ts", leftKey: "a", rightKey: "b", withinMs: 3 }, 2),
    events: [
      row({ a: 1, ts: 0 }, L), row({ b: 1, ts: 2 }, R), row({ b: 1, ts: 3 }, R), wm(2), row({ a: 1, ts: 5 }, L),
      row({ a: 2, ts: 5 }, L), wm(6), row({ b: 2, ts: 7 }, R), row({ a: 1, ts: 4 }, L), wm(30),
    ],
    poison: [row({ a: 1, ts: 0, v: undefined }, L)],
    grow: [row({ a: 1, ts: 0 }, L), row({ b: 1, ts: 1 }, R), row({ a: 2, ts: 2 }, L)],
    clearAt: 100,
  },
  {
    name: "topN (running)",
    compiled: compileOp({ op: "topN", timeColumn: "ts", n: 2, by: "s", groupBy: ["g"], expireAfterMs: 20 }),
    events: [
      row({ ts: 0, g: "a", s: 1 }), row({ ts: 1, g: "a", s: 3 }), row({ ts: 2, g: "b", s: 1 }), row({ ts: 3, g: "a", s: 3 }),
      wm(10), row({ ts: 4, g: "a", s: 2 }), row({ ts: 5, g: "a", s: 4 }), wm(23), row({ ts: 30, g: "b", s: 0 }), row({ ts: 31, g: "a", s: 1 }), wm(60),
    ],
    poison: [row({ ts: 0, g: "a", s: 1, note: Number.POSITIVE_INFINITY })],
    grow: [row({ ts: 0, g: "a", s: 1 }), row({ ts: 1, g: "b", s: 1 }), row({ ts: 2, g: "a", s: 2 })],
    clearAt: 100,
  },
  {
    name: "topN (windowed, emit update)",
    compiled: compileOp({ op: "topN", timeColumn: "ts", n: 2, by: "s", groupBy: ["g"], windowMs: 10, emit: "update" }),
    events: [
      row({ ts: 0, g: "a", s: 5 }), row({ ts: 1, g: "a", s: 3 }), row({ ts: 2, g: "b", s: 1 }), row({ ts: 3, g: "a", s: 3 }),
      row({ ts: 12, g: "a", s: 0 }), wm(10), row({ ts: 9, g: "a", s: 1 }), row({ ts: 14, g: "a", s: 2 }), row({ ts: 15, g: "a", s: 9 }), wm(30),
    ],
    poison: [row({ ts: 0, g: "a", s: 1, note: Number.NaN })],
    grow: [row({ ts: 0, g: "a", s: 1 }), row({ ts: 1, g: "b", s: 1 }), row({ ts: 12, g: "a", s: 2 })],
    clearAt: 100,
  },
  {
    name: "topN (windowed)",
    compiled: compileOp({ op: "topN", timeColumn: "ts", n: 2, by: "s", order: "asc", groupBy: ["g"], windowMs: 10 }),
    events: [
      row({ ts: 0, g: "a", s: 5 }), row({ ts: 1, g: "a", s: 3 }), row({ ts: 2, g: "b", s: 1 }), row({ ts: 3, g: "a", s: 3 }),
      row({ ts: 12, g: "a", s: 0 }), wm(10), row({ ts: 9, g: "a", s: 1 }), row({ ts: 14, g: "a", s: 2 }), row({ ts: 15, g: "a", s: -1 }), wm(30),
    ],
    poison: [row({ ts: 0, g: "a", s: 1, note: Number.NaN })],
    grow: [row({ ts: 0, g: "a", s: 1 }), row({ ts: 1, g: "b", s: 1 }), row({ ts: 12, g: "a", s: 2 })],
    clearAt: 100,
  },
  {
    name: "lastN",
    compiled: compileOp({ op: "lastN", timeColumn: "ts", n: 3, groupBy: ["g"], expireAfterMs: 20 }),
    events: [
      row({ ts: 0, g: "a", x: 1 }), row({ ts: 1, g: "a", x: 2 }), row({ ts: 2, g: "b", x: 3 }), row({ ts: 3, g: "a", x: 4 }),
      row({ ts: 4, g: "a", x: 5 }), wm(21), row({ ts: 5, g: "a", x: 6 }), row({ ts: 6, g: "a", x: 7 }), wm(30), row({ ts: 7, g: "b", x: 8 }), wm(100),
    ],
    poison: [row({ ts: 0, g: "a", x: Number.NaN })],
    grow: [row({ ts: 0, g: "a" }), row({ ts: 1, g: "b" }), row({ ts: 2, g: "a" })],
    clearAt: 100,
  },
];

const encoder = new TextEncoder();

/** The latest entry of each key as a restore from the state topic hands them over: entities as the records' bytes, unparsed. */
function asRead(log: readonly StateEntry[]): StateEntry[] {
  return compacted(log).map((e, i) => (e.value === null || e.key === "meta" ? e : { key: e.key, value: new RawState(encoder.encode(JSON.stringify(e.value)), `fv-state-t[0]@${i}`) }));
}

/** Runs the whole script on one instance: the reference output. */
function reference(c: Case) {
  return run(c.compiled.create(), c.compiled, c.events);
}

/** Runs events[0..cut) on one instance, moves its state to a fresh one with `transfer`, runs the rest there. */
function withRestoreAt(c: Case, cut: number, transfer: (from: Operator, log: StateEntry[]) => Operator) {
  const first = c.compiled.create();
  const log: StateEntry[] = [];
  const before = run(first, c.compiled, c.events.slice(0, cut), () => log.push(...viaJson(first.drainChanges())));
  const second = transfer(first, log);
  const after = run(second, c.compiled, c.events.slice(cut));
  return { rows: [...before.rows, ...after.rows], late: [...before.late, ...after.late] };
}

describe.each(cases)("$name state", (c) => {
  const cuts = Array.from({ length: c.events.length + 1 }, (_, i) => i);

  test("the script emits rows (so the restore checks below compare something)", () => {
    expect(reference(c).rows.length).toBeGreaterThan(0);
  });

  test("snapshot → restoreSnapshot into a fresh instance gives identical subsequent output, at every point of the script", () => {
    const expected = reference(c);
    for (const cut of cuts) {
      const got = withRestoreAt(c, cut, (from) => {
        const fresh = c.compiled.create();
        fresh.restoreSnapshot(viaJson(from.snapshot()));
        return fresh;
      });
      expect({ cut, ...got }).toEqual({ cut, ...expected });
    }
  });

  test("drainChanges → restore into a fresh instance gives identical subsequent output, at every point of the script", () => {
    const expected = reference(c);
    for (const cut of cuts) {
      const got = withRestoreAt(c, cut, (_from, log) => {
        const fresh = c.compiled.create();
        fresh.restore(log);
        return fresh;
      });
      expect({ cut, ...got }).toEqual({ cut, ...expected });
    }
  });

  test("a compacted changelog (latest entry per key), read in several calls, restores the same", () => {
    const expected = reference(c);
    for (const cut of cuts) {
      const got = withRestoreAt(c, cut, (_from, log) => {
        const fresh = c.compiled.create();
        const kept = compacted(log);
        const half = Math.floor(kept.length / 2);
        fresh.restore(kept.slice(0, half));
        fresh.restore(kept.slice(half));
        return fresh;
      });
      expect({ cut, ...got }).toEqual({ cut, ...expected });
    }
  });

  // The engine's restore (OperatorTasks): the last version of each key, values unparsed; a
  // windowed aggregate decodes each window when first needed (a row, its firing, a snapshot).
  test("the last version of each key as unparsed record bytes, distinct keys, restores the same, at every point of the script", () => {
    const expected = reference(c);
    for (const cut of cuts) {
      const got = withRestoreAt(c, cut, (_from, log) => {
        const fresh = c.compiled.create();
        fresh.restore(asRead(log), { unique: true });
        return fresh;
      });
      expect({ cut, ...got }).toEqual({ cut, ...expected });
    }
  });

  test("restored from unparsed record bytes: its snapshot, keys and reads equal the original's, before and after more rows", () => {
    for (const cut of cuts) {
      const op = c.compiled.create();
      const log: StateEntry[] = [];
      run(op, c.compiled, c.events.slice(0, cut), () => log.push(...viaJson(op.drainChanges())));
      log.push(...viaJson(op.drainChanges()));
      const fresh = c.compiled.create();
      fresh.restore(asRead(log), { unique: true });
      expect(fresh.stateKeys()).toBe(op.stateKeys());
      for (const g of ["a", "b", "c"]) expect({ g, rows: fresh.read?.([g]) }).toEqual({ g, rows: op.read?.([g]) });
      expect(viaJson(fresh.snapshot())).toEqual(viaJson(op.snapshot()));
      const more = c.events.slice(cut, cut + 3);
      expect(run(fresh, c.compiled, more)).toEqual(run(op, c.compiled, more));
      expect(viaJson(fresh.snapshot())).toEqual(viaJson(op.snapshot()));
    }
  });

  test("a restored instance's snapshot equals the original's", () => {
    for (const cut of cuts) {
      const op = c.compiled.create();
      run(op, c.compiled, c.events.slice(0, cut));
      const snapshot = viaJson(op.snapshot());
      const fresh = c.compiled.create();
      fresh.restoreSnapshot(snapshot);
      expect(viaJson(fresh.snapshot())).toEqual(snapshot);
      expect(fresh.stateSize().keys).toBe(op.stateSize().keys);
      expect(fresh.stateKeys()).toBe(op.stateKeys());
    }
  });

  test("a snapshot of an unknown format version, or of another op, is refused with STATE_CORRUPTED", () => {
    const op = c.compiled.create();
    run(op, c.compiled, c.events.slice(0, 3));
    const snapshot = viaJson(op.snapshot());
    expect(snapshot.version).toBe(1);
    const future = thrown(() => c.compiled.create().restoreSnapshot({ ...snapshot, version: 2 }));
    expect(future.code).toBe("STATE_CORRUPTED");
    expect(future.message).toContain("version 2");
    const other = thrown(() => c.compiled.create().restoreSnapshot({ ...snapshot, op: "somethingElse" }));
    expect(other.code).toBe("STATE_CORRUPTED");
    expect(thrown(() => c.compiled.create().restoreSnapshot(null as never)).code).toBe("STATE_CORRUPTED");
  });

  test("snapshot and drainChanges refuse state JSON cannot carry (NaN, Infinity, undefined) instead of writing part of it", () => {
    const op = c.compiled.create();
    run(op, c.compiled, c.poison);
    const error = thrown(() => op.snapshot());
    expect(error.code).toBe("STATE_CORRUPTED");
    expect(error.message).toMatch(/NaN|Infinity|undefined/);
    expect(thrown(() => op.drainChanges()).code).toBe("STATE_CORRUPTED");
    // The refused batch stays dirty: it is refused again, not silently dropped.
    expect(thrown(() => op.drainChanges()).code).toBe("STATE_CORRUPTED");
  });

  test("a changelog entry of the wrong shape is refused with STATE_CORRUPTED", () => {
    const op = c.compiled.create();
    run(op, c.compiled, c.grow);
    const [entry] = op.drainChanges();
    for (const value of [{}, [], 7, "x", { ...(entry!.value as object), seq: -1 }]) {
      expect(thrown(() => c.compiled.create().restore([{ key: entry!.key, value }])).code).toBe("STATE_CORRUPTED");
    }
    expect(thrown(() => c.compiled.create().restore([{ key: "meta", value: { v: 9, watermark: null, seq: 0 } }])).code).toBe("STATE_CORRUPTED");
    expect(thrown(() => c.compiled.create().restore([{ key: entry!.key, value: undefined }])).code).toBe("STATE_CORRUPTED");
  });

  test("restore is refused once processing began", () => {
    const op = c.compiled.create();
    run(op, c.compiled, c.grow.slice(0, 1));
    expect(() => op.restore([])).toThrow("before the first process()");
    expect(() => op.restoreSnapshot(viaJson(op.snapshot()))).toThrow("before the first process()");
  });

  test("stateSize grows with live keys and shrinks to nothing when the watermark clears them", () => {
    const op = c.compiled.create();
    expect(op.stateSize()).toEqual({ keys: 0, bytes: 0 });
    let previous = op.stateSize();
    for (const event of c.grow) {
      run(op, c.compiled, [event]);
      const size = op.stateSize();
      // stateKeys: the same count, without the walk.
      expect(op.stateKeys()).toBe(size.keys);
      expect(size.bytes).toBeGreaterThan(previous.bytes);
      expect(size.keys).toBeGreaterThanOrEqual(previous.keys);
      previous = size;
    }
    expect(previous.keys).toBeGreaterThanOrEqual(2);
    // A table is never cleared by time (clearAt < 0): only its tombstones delete.
    if (c.clearAt < 0) return;
    op.drainChanges();
    op.advance(c.clearAt);
    expect(op.stateSize()).toEqual({ keys: 0, bytes: 0 });
    expect(op.stateKeys()).toBe(0);
    // Everything it cleared (and the log had seen) is deleted in the changelog too.
    const changes = op.drainChanges().filter((e) => e.key !== "meta");
    expect(changes.length).toBeGreaterThan(0);
    expect(changes.every((e) => e.value === null)).toBe(true);
  });
});
