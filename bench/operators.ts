/**
 * Stateful operator costs, in memory (no Kafka):
 *   1. rows/second through windowedAggregate: 10k keys, 1-minute tumbling windows, count + sum
 *      + avg, the watermark advanced every 500 rows as the engine would; beside it, the same
 *      aggregation hand-written over a Map (a ceiling), and the operator again with a
 *      drainChanges every 20k rows (a checkpoint);
 *   2. drainChanges cost as state grows: time per call with 1k / 10k / 100k dirty keys.
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
  return timeIt(() => {
    const windows = new Map<number, Map<string, { count: number; sum: number }>>();
    let fired = 0;
    let maxTs = -Infinity;
    const flush = (watermark: number) => {
      for (const [end, groups] of windows) {
        if (end > watermark) continue;
        for (const [key, s] of groups) {
          const out = { windowStart: end - 60_000, windowEnd: end, key, count: s.count, sum_price: s.sum, avg_price: s.sum / s.count };
          if (out.count > 0) fired++;
        }
        windows.delete(end);
      }
    };
    for (let i = 0; i < rows.length; i++) {
      const row = rows[i]!;
      const ts = row.ts as number;
      const end = Math.floor(ts / 60_000) * 60_000 + 60_000;
      let groups = windows.get(end);
      if (groups === undefined) windows.set(end, groups = new Map());
      const key = row.key as string;
      let s = groups.get(key);
      if (s === undefined) groups.set(key, s = { count: 0, sum: 0 });
      s.count++;
      s.sum += row.price as number;
      if (ts > maxTs) maxTs = ts;
      if ((i + 1) % BATCH === 0) flush(maxTs - LATENESS_MS);
    }
    flush(Number.MAX_SAFE_INTEGER);
    return fired;
  });
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
