/**
 * Stateful operator costs, in memory (no Kafka):
 *   1. rows/second through windowedAggregate: 10k keys, 1-minute tumbling windows, count + sum
 *      + avg, the watermark advanced every 500 rows as the engine would; beside it, the same
 *      aggregation hand-written over a Map (a ceiling), and the operator again with a
 *      drainChanges every 20k rows (a checkpoint);
 *   2. drainChanges cost as state grows: time per call with 1k / 10k / 100k dirty keys;
 *   3. the newer aggregates (variance, argmax, percentile exact and as a t-digest, countDistinct
 *      exact and as HyperLogLog), sliding windows and tableJoin, each through the operator and
 *      hand-written over a Map (exact answers: the ceiling of what they cost).
 * Results are printed, not asserted.
 *
 *   node_modules/.bin/bun bench/operators.ts [rows] [repeats]
 */
import * as v from "valibot";
import type { Row } from "../src/expr/index.ts";
import { type CompiledOperator, operatorSteps } from "../src/ops/index.ts";
import { mulberry32 as random } from "./random.ts";

const ROWS = Number(process.argv[2] ?? 1_000_000);
const REPEATS = Number(process.argv[3] ?? 5);
const KEYS = 10_000;
const BATCH = 500;
const LATENESS_MS = 5_000;


function compile(def: Record<string, unknown>): CompiledOperator {
  const kind = operatorSteps[def.op as string]!;
  return kind.compile(v.parse(kind.schema, def), { stage: 0, step: 0, inputs: 1 });
}

const windowed = compile({
  op: "windowedAggregate",
  timeColumn: "ts",
  windowMs: 60_000,
  allowedLatenessMs: LATENESS_MS,
  groupBy: ["key"],
  aggs: [{ op: "count" }, { op: "sum", column: "price" }, { op: "avg", column: "price" }],
});

/**
 * ~2k rows per second of event time (so a 1-minute window sees ~120k rows over the 10k keys),
 * up to a second out of order. Each row is parsed from its own JSON text, as the engine gets
 * it, so no two rows share a key string (and its cached hash).
 */
function makeRows(n: number): Row[] {
  const next = random(7);
  const rows: Row[] = [];
  const base = 1_717_000_000_000;
  for (let i = 0; i < n; i++) {
    const line = JSON.stringify({ key: `k${Math.floor(next() * KEYS)}`, ts: base + Math.floor(i / 2) + Math.floor(next() * 1000), price: Math.round(next() * 20_000) / 100, qty: 1 + Math.floor(next() * 50) });
    rows.push(JSON.parse(line) as Row);
  }
  return rows;
}

function timeIt(fn: () => number): { ms: number; out: number } {
  const start = performance.now();
  const out = fn();
  return { ms: performance.now() - start, out };
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

function throughput(rows: Row[], drainEvery: number): { ms: number; out: number } {
  return timeIt(() => {
    const op = windowed.create();
    let fired = 0;
    let maxTs = -Infinity;
    for (let i = 0; i < rows.length; i++) {
      const row = rows[i]!;
      const ts = row.ts as number;
      op.process(row, ts, 0);
      if (ts > maxTs) maxTs = ts;
      if ((i + 1) % BATCH === 0) fired += op.advance(maxTs - LATENESS_MS).length;
      if (drainEvery > 0 && (i + 1) % drainEvery === 0) op.drainChanges();
    }
    fired += op.advance(Number.MAX_SAFE_INTEGER).length;
    return fired;
  });
}

/** The same aggregation written by hand: a Map per window, closed by the same watermark. */
function handWritten(rows: Row[]): { ms: number; out: number } {
  return handTumbling(rows, () => ({ count: 0, sum: 0 }), (s, row) => {
    s.count++;
    s.sum += row.price as number;
  }, (s, end, key) => ({ windowStart: end - 60_000, windowEnd: end, key, count: s.count, sum_price: s.sum, avg_price: s.sum / s.count }));
}

function drainCost(keys: number): { perCallMs: number; perKeyNs: number; bytes: number } {
  const op = windowed.create();
  const rows: Row[] = [];
  for (let k = 0; k < keys; k++) rows.push({ key: `k${k}`, ts: 1_000, price: k % 100 });
  const times: number[] = [];
  for (let r = 0; r < REPEATS + 1; r++) {
    for (const row of rows) op.process(row, 1_000, 0);
    const { ms, out } = timeIt(() => op.drainChanges().length);
    // Every key, plus the meta entry when the arrival sequence moved (the first round).
    if (out !== keys && out !== keys + 1) throw new Error(`expected ${keys} entries, got ${out}`);
    if (r > 0) times.push(ms);
  }
  const perCallMs = median(times);
  return { perCallMs, perKeyNs: (perCallMs * 1e6) / keys, bytes: op.stateSize().bytes };
}

const rows = makeRows(ROWS);
console.log(`windowedAggregate, ${ROWS.toLocaleString("en")} rows over ${KEYS.toLocaleString("en")} keys, 1-minute tumbling windows, count + sum + avg, watermark every ${BATCH} rows; median of ${REPEATS}`);
const runs: Record<string, Array<{ ms: number; out: number }>> = { operator: [], "operator + drainChanges every 20k rows": [], "hand-written Map (ceiling)": [] };
throughput(rows, 0); // warm up
for (let r = 0; r < REPEATS; r++) {
  runs.operator!.push(throughput(rows, 0));
  runs["operator + drainChanges every 20k rows"]!.push(throughput(rows, 20_000));
  runs["hand-written Map (ceiling)"]!.push(handWritten(rows));
}
for (const [name, results] of Object.entries(runs)) {
  const ms = median(results.map((x) => x.ms));
  console.log(`  ${name.padEnd(42)} ${(ROWS / (ms / 1000)).toLocaleString("en", { maximumFractionDigits: 0 }).padStart(12)} rows/s  (${ms.toFixed(0)} ms, ${results[0]!.out.toLocaleString("en")} window rows fired)`);
}

console.log(`\ndrainChanges cost by dirty keys (one window, every key dirty, median of ${REPEATS})`);
for (const keys of [1_000, 10_000, 100_000]) {
  const { perCallMs, perKeyNs, bytes } = drainCost(keys);
  console.log(`  ${keys.toLocaleString("en").padStart(7)} dirty keys: ${perCallMs.toFixed(2).padStart(8)} ms per call, ${perKeyNs.toFixed(0).padStart(5)} ns per key  (state ≈ ${(bytes / 1e6).toFixed(1)} MB)`);
}

/** Runs `def` over the rows as the engine would (watermark every BATCH rows); returns the rows fired. */
function operatorRun(def: Record<string, unknown>, rows: Row[]): { ms: number; out: number } {
  const compiled = compile(def);
  return timeIt(() => {
    const op = compiled.create();
    let fired = 0;
    let maxTs = -Infinity;
    for (let i = 0; i < rows.length; i++) {
      const ts = rows[i]!.ts as number;
      op.process(rows[i]!, ts, 0);
      if (ts > maxTs) maxTs = ts;
      if ((i + 1) % BATCH === 0) fired += op.advance(maxTs - LATENESS_MS).length;
    }
    return fired + op.advance(Number.MAX_SAFE_INTEGER).length;
  });
}

/** Hand-written 1-minute tumbling windows per key, closed by the same watermark as the operator: `add` folds a row into the key's state, `close` reads it out. */
function handTumbling<S>(rows: Row[], init: () => S, add: (s: S, row: Row) => void, close: (s: S, end: number, key: string) => unknown): { ms: number; out: number } {
  return timeIt(() => {
    const windows = new Map<number, Map<string, S>>();
    let fired = 0;
    let maxTs = -Infinity;
    const flush = (watermark: number) => {
      for (const [end, groups] of windows) {
        if (end > watermark) continue;
        for (const [key, s] of groups) if (close(s, end, key) !== undefined) fired++;
        windows.delete(end);
      }
    };
    for (let i = 0; i < rows.length; i++) {
      const row = rows[i]!;
      const ts = row.ts as number;
      const end = Math.floor(ts / 60_000) * 60_000 + 60_000;
      let groups = windows.get(end);
      if (groups === undefined) windows.set(end, (groups = new Map()));
      let s = groups.get(row.key as string);
      if (s === undefined) groups.set(row.key as string, (s = init()));
      add(s, row);
      if (ts > maxTs) maxTs = ts;
      if ((i + 1) % BATCH === 0) flush(maxTs - LATENESS_MS);
    }
    flush(Number.MAX_SAFE_INTEGER);
    return fired;
  });
}

const tumbling = (aggs: unknown[]) => ({ op: "windowedAggregate", timeColumn: "ts", windowMs: 60_000, allowedLatenessMs: LATENESS_MS, groupBy: ["key"], aggs });
const quantile = (values: number[], q: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  const h = (sorted.length - 1) * q;
  return sorted[Math.floor(h)]! + (h - Math.floor(h)) * (sorted[Math.ceil(h)]! - sorted[Math.floor(h)]!);
};
/** A second key space for the one-key-per-window cases (percentile / countDistinct past their bounds). */
const fewKeys = rows.map((r) => ({ ...r, key: `k${(r.key as string).length % 4}` }));
const cases: Array<{ name: string; rows: Row[]; def: Record<string, unknown>; hand: () => { ms: number; out: number } }> = [
  {
    name: "variance (Welford)",
    rows,
    def: tumbling([{ op: "variance", column: "price" }]),
    hand: () => handTumbling(rows, () => ({ n: 0, mean: 0, m2: 0 }), (s, r) => {
      const x = r.price as number;
      s.n++;
      const d = x - s.mean;
      s.mean += d / s.n;
      s.m2 += d * (x - s.mean);
    }, (s) => (s.n > 1 ? s.m2 / (s.n - 1) : null)),
  },
  {
    name: "argmax (the row at the max)",
    rows,
    def: tumbling([{ op: "argmax", column: "price" }]),
    hand: () => handTumbling(rows, () => ({ best: -Infinity, row: null as Row | null }), (s, r) => {
      if ((r.price as number) > s.best) [s.best, s.row] = [r.price as number, r];
    }, (s) => s.row),
  },
  {
    name: "percentile q = 0.99, exact (~12 values per window and key)",
    rows,
    def: tumbling([{ op: "percentile", column: "price", q: 0.99 }]),
    hand: () => handTumbling(rows, () => [] as number[], (s, r) => void s.push(r.price as number), (s) => quantile(s, 0.99)),
  },
  {
    name: "percentile q = 0.99, t-digest (4 keys: ~30k values per window and key)",
    rows: fewKeys,
    def: tumbling([{ op: "percentile", column: "price", q: 0.99 }]),
    hand: () => handTumbling(fewKeys, () => [] as number[], (s, r) => void s.push(r.price as number), (s) => quantile(s, 0.99)),
  },
  {
    name: "countDistinct qty, exact",
    rows,
    def: tumbling([{ op: "countDistinct", column: "qty" }]),
    hand: () => handTumbling(rows, () => new Set<unknown>(), (s, r) => void s.add(r.qty), (s) => s.size),
  },
  {
    name: "countDistinct price, HyperLogLog past 1,000 (4 keys)",
    rows: fewKeys,
    def: tumbling([{ op: "countDistinct", column: "price", exactUpTo: 1000 }]),
    hand: () => handTumbling(fewKeys, () => new Set<unknown>(), (s, r) => void s.add(r.price), (s) => s.size),
  },
];
console.log(`\nnewer aggregates, the same rows and windows, operator vs hand-written over a Map (exact); median of ${REPEATS}`);
for (const c of cases) {
  const op: number[] = [];
  const hand: number[] = [];
  operatorRun(c.def, c.rows);
  for (let r = 0; r < REPEATS; r++) {
    op.push(operatorRun(c.def, c.rows).ms);
    hand.push(c.hand().ms);
  }
  const [a, b] = [ROWS / (median(op) / 1000), ROWS / (median(hand) / 1000)];
  console.log(`  ${c.name.padEnd(72)} operator ${fmtRate(a)}  hand-written ${fmtRate(b)}  ratio ${(a / b).toFixed(2)}`);
}

// Sliding windows: 10 s windows over 1,000 keys (~20 rows per key per window); hand-written by the definition.
const SLIDING_ROWS = Math.min(ROWS, 200_000);
const slidingRows: Row[] = rows.slice(0, SLIDING_ROWS).map((r) => ({ ...r, key: `k${Number((r.key as string).slice(1)) % 1000}` }));
/** By the definition, all rows at once (no watermark): per key, sorted times, each window's count and sum by a scan. */
function handSliding(): { ms: number; out: number } {
  return timeIt(() => {
    const byKey = new Map<string, Array<{ ts: number; price: number }>>();
    for (const r of slidingRows) {
      let list = byKey.get(r.key as string);
      if (list === undefined) byKey.set(r.key as string, (list = []));
      list.push({ ts: r.ts as number, price: r.price as number });
    }
    let fired = 0;
    for (const list of byKey.values()) {
      list.sort((a, b) => a.ts - b.ts);
      const starts = new Set<number>();
      for (let i = 0, j = 0; i < list.length; i++) {
        starts.add(list[i]!.ts - 10_000);
        while (j < list.length && list[j]!.ts <= list[i]!.ts) j++;
        if (j < list.length && list[j]!.ts <= list[i]!.ts + 1 + 10_000) starts.add(list[i]!.ts + 1);
      }
      for (const start of starts) {
        let count = 0;
        let sum = 0;
        for (const r of list) if (r.ts >= start && r.ts <= start + 10_000) (count++, (sum += r.price));
        if (count > 0 && sum >= 0) fired++;
      }
    }
    return fired;
  });
}
const slidingDef = { op: "windowedAggregate", timeColumn: "ts", windowMs: 10_000, sliding: true, allowedLatenessMs: LATENESS_MS, groupBy: ["key"], aggs: [{ op: "count" }, { op: "sum", column: "price" }] };
const slidingOp: number[] = [];
const slidingHand: number[] = [];
let windowsFired = 0;
operatorRun(slidingDef, slidingRows);
for (let r = 0; r < REPEATS; r++) {
  const run = operatorRun(slidingDef, slidingRows);
  windowsFired = run.out;
  slidingOp.push(run.ms);
  slidingHand.push(handSliding().ms);
}
const [so, sh] = [SLIDING_ROWS / (median(slidingOp) / 1000), SLIDING_ROWS / (median(slidingHand) / 1000)];
console.log(`  ${`sliding windows, 10 s, 1,000 keys, ${SLIDING_ROWS.toLocaleString("en")} rows (${windowsFired.toLocaleString("en")} windows)`.padEnd(72)} operator ${fmtRate(so)}  hand-written ${fmtRate(sh)}  ratio ${(so / sh).toFixed(2)}`);

// tableJoin: a 10k-key table, then every row of the stream joined to it (processing time, left join of one column).
const tableDef = { op: "tableJoin", on: "key", timeColumn: "ts", type: "left", columns: ["price"] };
const tableKind = operatorSteps.tableJoin!;
const tableCompiled = tableKind.compile(v.parse(tableKind.schema, tableDef), { stage: 0, step: 0, inputs: 2 });
function tableOperator(): { ms: number; out: number } {
  return timeIt(() => {
    const op = tableCompiled.create();
    for (let k = 0; k < KEYS; k++) op.process({ key: `k${k}`, price: k }, 0, 1, `k${k}`);
    let joined = 0;
    for (const row of rows) joined += op.process(row, row.ts as number, 0).rows.length;
    return joined;
  });
}
function tableHand(): { ms: number; out: number } {
  return timeIt(() => {
    const table = new Map<string, Row>();
    for (let k = 0; k < KEYS; k++) table.set(`k${k}`, { key: `k${k}`, price: k });
    let joined = 0;
    for (const row of rows) {
      const out: Row = { ...row, price: table.get(row.key as string)?.price ?? null };
      if (out) joined++;
    }
    return joined;
  });
}
const tableOp: number[] = [];
const tableMs: number[] = [];
tableOperator();
for (let r = 0; r < REPEATS; r++) {
  tableOp.push(tableOperator().ms);
  tableMs.push(tableHand().ms);
}
const [to, th] = [ROWS / (median(tableOp) / 1000), ROWS / (median(tableMs) / 1000)];
console.log(`  ${`tableJoin, a ${KEYS.toLocaleString("en")}-key table, left join of one column`.padEnd(72)} operator ${fmtRate(to)}  hand-written ${fmtRate(th)}  ratio ${(to / th).toFixed(2)}`);

function fmtRate(x: number): string {
  return `${x.toLocaleString("en", { maximumFractionDigits: 0 }).padStart(10)} rows/s`;
}
