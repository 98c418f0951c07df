/**
 * State beyond memory: an operator reading its committed state from a StateSource keeps a bounded
 * number of entities in memory and gives exactly the output of the same operator holding all of
 * its state in memory, across evictions, restarts from the source, and a source that receives each
 * checkpoint late (entities changed since must stay in memory until it has them).
 */
import { describe, expect, test } from "bun:test";
import type { Row } from "../../src/expr/index.ts";
import { type CompiledOperator, eventTimeOf, META_KEY, type Operator, RawState, type StateEntry } from "../../src/ops/index.ts";
import { compileOp, type Event, MemorySource, row, wm } from "./helpers.ts";

/** A seeded stream: `groups` keys, event time moving forward with some disorder, a watermark every 40 rows. */
function script(seed: number, rows: number, groups: number): Event[] {
  let s = seed;
  const rnd = () => ((s = (Math.imul(s, 1103515245) + 12345) >>> 0) / 2 ** 32);
  const events: Event[] = [];
  let t = 1_000;
  for (let i = 0; i < rows; i++) {
    t += Math.floor(rnd() * 3);
    const ts = t - Math.floor(rnd() * 30);
    events.push(row({ ts, g: `k${Math.floor(rnd() ** 2 * groups)}`, x: Math.floor(rnd() * 100) }));
    if (i % 40 === 39) events.push(wm(t - 25));
  }
  events.push(wm(t + 10_000));
  return events;
}

const sortRows = (rows: Row[]) => rows.map((r) => JSON.stringify(r)).sort();

/** Per event: the rows it gave (sorted: a spilling operator fires one window end's rows in another order) and the late rows. */
function reference(compiled: CompiledOperator, events: readonly Event[]): string[][] {
  const op = compiled.create();
  return events.map((e) => step(op, compiled, e));
}

function step(op: Operator, compiled: CompiledOperator, e: Event): string[] {
  if ("watermark" in e) return sortRows(op.advance(e.watermark));
  const out = op.process(e.row, eventTimeOf(e.row, compiled.timeColumn), e.input ?? 0);
  return [...sortRows(out.rows), ...out.late.map((r) => `late ${JSON.stringify(r)}`)];
}

/** A spilling operator over a fresh source from its stored bookkeeping, as the engine restores one. */
function spilled(compiled: CompiledOperator, source: MemorySource, cacheKeys: number): Operator {
  const op = compiled.create();
  const meta = source.get(META_KEY);
  if (meta !== undefined) op.restore([{ key: META_KEY, value: meta }]);
  expect(op.spill!(source, cacheKeys)).toBe(true);
  return op;
}

/**
 * Runs the script spilling: a checkpoint every `every` events drains the changes; the source
 * receives them one checkpoint later (then `settled`); at each event index in `restarts` the
 * operator is replaced by a fresh one over the source, right after a checkpoint lands.
 */
function withSpill(compiled: CompiledOperator, events: readonly Event[], cacheKeys: number, every: number, restarts: number[] = []) {
  const source = new MemorySource();
  let op = spilled(compiled, source, cacheKeys);
  let pending: { entries: StateEntry[]; drains: number } | undefined;
  const land = () => {
    if (!pending) return;
    source.commit(pending.entries);
    op.settled!(pending.drains);
    pending = undefined;
  };
  let peak = 0;
  const out = events.map((e, i) => {
    if (restarts.includes(i)) {
      land();
      source.commit(op.drainChanges());
      op = spilled(compiled, source, cacheKeys);
    }
    const got = step(op, compiled, e);
    if (i % every === every - 1) {
      // The next checkpoint is drained before the last one lands (the engine's commit overlaps the
      // next batches): what it drained is not in the source when `settled` comes for the last one.
      const next = { entries: op.drainChanges(), drains: op.drains! };
      land();
      pending = next;
    }
    peak = Math.max(peak, op.cacheStats!()!.resident);
    return got;
  });
  land();
  return { out, peak, stats: op.cacheStats!()!, source, op };
}

/**
 * Runs the script all in memory, then spilling from event `spillAt` on, as a task restored into
 * memory whose store was written behind the restore: spill({ resident: true }) comes while the
 * source still lacks the last `lag` checkpoints (each lands `lag` checkpoints after it was drained,
 * then `settled`). Those checkpoints' drains carried no stamp.
 */
function withLateSpill(compiled: CompiledOperator, events: readonly Event[], cacheKeys: number, every: number, spillAt: number, lag: number) {
  const source = new MemorySource();
  const op = compiled.create();
  const pending: Array<{ entries: StateEntry[]; drains: number }> = [];
  let spilling = false;
  const land = () => {
    const next = pending.shift()!;
    source.commit(next.entries);
    if (spilling) op.settled!(next.drains);
  };
  const out = events.map((e, i) => {
    if (i === spillAt) {
      expect(op.spill!(source, cacheKeys, { resident: true })).toBe(true);
      spilling = true;
    }
    const got = step(op, compiled, e);
    if (i % every === every - 1) {
      pending.push({ entries: op.drainChanges(), drains: op.drains! });
      if (pending.length > lag) land();
    }
    return got;
  });
  while (pending.length) land();
  return { out, stats: op.cacheStats!()! };
}

const windowed = (slideMs?: number, windowMs = 20) =>
  compileOp({ op: "windowedAggregate", timeColumn: "ts", windowMs, ...(slideMs ? { slideMs } : {}), groupBy: ["g"], aggs: [{ op: "count" }, { op: "sum", column: "x" }, { op: "max", column: "x" }] });

describe("windowedAggregate spilling to a StateSource", () => {
  for (const [name, compiled] of [["tumbling", windowed()], ["hopping", windowed(5)]] as const) {
    test(`${name}: the same rows and late rows as all in memory, with 8 windows in memory of hundreds`, () => {
      const events = script(7, 3000, 400);
      const expected = reference(compiled, events);
      expect(expected.flat().length).toBeGreaterThan(500);
      const got = withSpill(compiled, events, 8, 25);
      expect(got.out).toEqual(expected);
      // It read windows back from the source, and let go of them again.
      expect(got.stats.misses).toBeGreaterThan(100);
      expect(got.stats.hits).toBeGreaterThan(0);
      // At most the cache plus what changed in two checkpoints (the source lags one behind).
      expect(got.peak).toBeLessThanOrEqual(8 + 2 * 25 * (name === "hopping" ? 4 : 1));
    });

    test(`${name}: restarts from the source at several points give the same rows`, () => {
      const events = script(11, 2000, 300);
      const expected = reference(compiled, events);
      expect(withSpill(compiled, events, 16, 30, [101, 555, 556, 1400]).out).toEqual(expected);
    });
  }

  test("a window changed since its last checkpoint reached the source stays in memory; once it is there it may go", () => {
    const compiled = windowed();
    const source = new MemorySource();
    const op = spilled(compiled, source, 1);
    for (const g of ["a", "b", "c"]) op.process({ ts: 5, g, x: 1 }, 5, 0);
    const entries = op.drainChanges();
    op.settled!(op.drains!); // claims settled, but nothing is in the source: the drain stamp decides
    expect(op.cacheStats!()!.resident).toBe(0);
    // The eviction trusted `settled`: the windows are read back from the source now.
    source.commit(entries);
    op.process({ ts: 6, g: "a", x: 1 }, 6, 0);
    expect(op.advance(20)).toEqual(expect.arrayContaining([{ windowStart: 0, windowEnd: 20, g: "a", count: 2, sum_x: 2, max_x: 1 }]));

    const pinned = spilled(compiled, new MemorySource(), 1);
    for (const g of ["a", "b", "c"]) pinned.process({ ts: 5, g, x: 1 }, 5, 0);
    pinned.drainChanges();
    pinned.settled!(0); // the drain above is not in the source yet
    expect(pinned.cacheStats!()!.resident).toBe(3);
    pinned.process({ ts: 6, g: "a", x: 1 }, 6, 0);
    pinned.settled!(1);
    // "a" changed after drain 1: it stays; "b" and "c" may go, down to the cache (1).
    expect(pinned.cacheStats!()!.resident).toBe(1);
    expect(sortRows(pinned.advance(20))).toEqual([JSON.stringify({ windowStart: 0, windowEnd: 20, g: "a", count: 2, sum_x: 2, max_x: 1 })]);
  });

  // Windows long enough to leave memory and be read back before they close.
  for (const [name, compiled] of [["tumbling", windowed(undefined, 600)], ["hopping", windowed(150, 600)]] as const) {
    test(`${name}: spilling late, every window in memory and the source checkpoints behind (a store written behind the restore), gives the same rows`, () => {
      const events = script(13, 3000, 400);
      const expected = reference(compiled, events);
      for (const spillAt of [0, 777, 1500]) {
        const got = withLateSpill(compiled, events, 8, 25, spillAt, 2);
        expect(got.out).toEqual(expected);
        // Windows left memory and were read back (a removed pin, or a start wrongly cold, shows here).
        expect(got.stats.misses).toBeGreaterThan(500);
      }
    });
  }

  // A restore into an empty store of an operator that holds its values as bytes (holdsUndecoded):
  // every window restored undecoded, the store written behind; once it lands, spill({ resident })
  // lets go of the windows no row used since, undecoded, and reads them back from the store.
  for (const [name, compiled] of [["tumbling", windowed(undefined, 600)], ["hopping", windowed(150, 600)]] as const) {
    test(`${name}: restored undecoded and spilled once the store has the restore, the windows never used leave memory at once, and the rows are the same`, () => {
      expect(compiled.holdsUndecoded).toBe(true);
      const events = script(17, 3000, 400);
      const expected = reference(compiled, events);
      const restoreAt = 1200;
      const before = compiled.create();
      for (const e of events.slice(0, restoreAt)) step(before, compiled, e);
      const restored = before.snapshot().entries;
      const encoder = new TextEncoder();
      for (const spillAfter of [0, 60]) {
        const op = compiled.create();
        op.restore(restored.map((e, i) => (e.key === META_KEY ? e : { key: e.key, value: new RawState(encoder.encode(JSON.stringify(e.value)), `fv-state-t[0]@${i}`) })), { unique: true });
        const windows = op.stateSize().keys;
        expect(windows).toBeGreaterThan(150);
        const source = new MemorySource();
        source.commit(restored); // the write behind the restore, landed
        const pending: Array<{ entries: StateEntry[]; drains: number }> = [];
        let spilling = false;
        const out = events.slice(restoreAt).map((e, i) => {
          if (i === spillAfter) {
            expect(op.spill!(source, 8, { resident: true })).toBe(true);
            spilling = true;
            // In memory: only the windows rows used since the restore (before the spill).
            expect(op.cacheStats!()!.resident).toBeLessThan(spillAfter === 0 ? 1 : windows / 2);
            // Right after the restore, each window counted once, from the store. (After drains the
            // count is off until they land: the known lag of a late spill's count.)
            if (spillAfter === 0) expect(op.stateSize().keys).toBe(windows);
          }
          const got = step(op, compiled, e);
          if (i % 25 === 24) {
            pending.push({ entries: op.drainChanges(), drains: op.drains! });
            if (pending.length > 2) {
              const next = pending.shift()!;
              source.commit(next.entries);
              if (spilling) op.settled!(next.drains);
            }
          }
          return got;
        });
        expect(out).toEqual(expected.slice(restoreAt));
        expect(op.cacheStats!()!.misses).toBeGreaterThan(100);
      }
    });
  }

  test("spilling late, the windows in memory stay until the source has every drain taken before (those carried no stamp)", () => {
    const compiled = windowed();
    const source = new MemorySource();
    const op = compiled.create();
    for (const g of ["a", "b", "c"]) op.process({ ts: 5, g, x: 1 }, 5, 0);
    source.commit(op.drainChanges()); // drain 1 is in the source
    op.process({ ts: 6, g: "a", x: 1 }, 6, 0);
    const second = op.drainChanges(); // drain 2 is not yet
    op.spill!(source, 1, { resident: true });
    // Each window counted once: a, b and c are in the changelog (the store has them or will).
    expect(op.stateSize().keys).toBe(3);
    // Nothing is read from the source while memory holds every window: a new group's window is new.
    op.process({ ts: 7, g: "d", x: 1 }, 7, 0);
    expect(op.cacheStats!()!.misses).toBe(0);
    op.settled!(1);
    expect(op.cacheStats!()!.resident).toBe(4);
    source.commit(second);
    op.settled!(2);
    // a, b and c may go now; d changed since the last drain and stays.
    expect(op.cacheStats!()!.resident).toBe(1);
    expect(sortRows(op.advance(20))).toEqual(
      [{ g: "a", count: 2, sum_x: 2 }, { g: "b", count: 1, sum_x: 1 }, { g: "c", count: 1, sum_x: 1 }, { g: "d", count: 1, sum_x: 1 }].map((w) => JSON.stringify({ windowStart: 0, windowEnd: 20, ...w, max_x: 1 })).sort(),
    );
  });

  test("read, groups, snapshot and stateSize see the windows in the source as well as those in memory", () => {
    const compiled = windowed();
    const events = script(3, 600, 50).filter((e) => !("watermark" in e) || e.watermark < 1_200);
    const all = compiled.create();
    for (const e of events) step(all, compiled, e);
    const got = withSpill(compiled, events, 4, 20);
    const op = got.op;
    // Land what is still pending, as the engine's next checkpoint would.
    got.source.commit(op.drainChanges());
    op.settled!(op.drains!);
    expect(op.cacheStats!()!.resident).toBeLessThanOrEqual(4);
    for (const g of ["k0", "k1", "k7", "k49", "nope"]) expect(op.read!([g])).toEqual(all.read!([g]));
    expect([...op.groups!()].map((g) => JSON.stringify(g)).sort()).toEqual([...all.groups!()].map((g) => JSON.stringify(g)).sort());
    expect(op.stateSize().keys).toBe(all.stateSize().keys);
    expect(op.stateKeys()).toBe(all.stateKeys());
    const entries = (s: Operator) => s.snapshot().entries.map((e) => JSON.stringify(e)).sort();
    expect(entries(op)).toEqual(entries(all));
  });

  test("a start with more stored windows than one advance fires goes out over several advances, each window once", () => {
    const compiled = windowed();
    const source = new MemorySource();
    let op = spilled(compiled, source, 1);
    for (let i = 0; i < 45_000; i++) op.process({ ts: 5, g: `k${i}`, x: i }, 5, 0);
    source.commit(op.drainChanges());
    op = spilled(compiled, source, 1);
    const first = op.advance(20);
    expect(first.length).toBe(20_000);
    expect(op.firing!()).toBe(true);
    // Rows for the closed window are late meanwhile.
    expect(op.process({ ts: 6, g: "k1", x: 1 }, 6, 0).late.length).toBe(1);
    const rest = [...op.advance(20), ...op.advance(20), ...op.advance(20)];
    const all = [...first, ...rest];
    expect(op.firing!()).toBe(false);
    expect(all.length).toBe(45_000);
    expect(new Set(all.map((r) => r.g)).size).toBe(45_000);
    expect(op.drainChanges().filter((e) => e.value === null).length).toBe(45_000);
  });
});

describe("lastN spilling to a StateSource", () => {
  const compiled = compileOp({ op: "lastN", timeColumn: "ts", n: 3, column: "x", groupBy: ["g"] });

  test("the same rows as all in memory, with 8 groups in memory of 300, across restarts", () => {
    const events = script(5, 3000, 300);
    const expected = reference(compiled, events);
    const got = withSpill(compiled, events, 8, 25, [700, 1900]);
    expect(got.out).toEqual(expected);
    expect(got.stats.misses).toBeGreaterThan(100);
    expect(got.peak).toBeLessThanOrEqual(8 + 2 * 25);
  });

  test("spilling late, the groups in memory and the source checkpoints behind, gives the same rows", () => {
    const events = script(17, 3000, 300);
    const expected = reference(compiled, events);
    for (const spillAt of [0, 900]) expect(withLateSpill(compiled, events, 8, 25, spillAt, 2).out).toEqual(expected);
  });

  test("with expireAfterMs it keeps its state in memory (its expiry timers live there): spill says no", () => {
    const expiring = compileOp({ op: "lastN", timeColumn: "ts", n: 3, groupBy: ["g"], expireAfterMs: 10 });
    expect(expiring.create().spill!(new MemorySource(), 10)).toBe(false);
  });
});
