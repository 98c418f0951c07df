/**
 * Expression throughput, in memory (no Kafka): a 3-clause filter plus 2 computed fields on
 * ~200-byte JSON rows, compiled expressions vs the same logic written by hand in TypeScript,
 * in the same run. Also shown: the same expressions run through the engine's filter and
 * applyExpression steps, and in CEL. Results are printed, not asserted.
 *
 *   node_modules/.bin/bun bench/expressions.ts [rows] [repeats]
 */
import { compileExpression, type CompiledExpression, type Row } from "../src/expr/index.ts";
import { compileApplyExpression } from "../src/steps/apply-expression.ts";
import { compileFilter } from "../src/steps/filter.ts";
import type { InlineStep } from "../src/steps/step.ts";
import { mulberry32 as random } from "./random.ts";

const ROWS = Number(process.argv[2] ?? 200_000);
const REPEATS = Number(process.argv[3] ?? 7);

const FILTER = "price > 100 && sym != 'XYZ' && qty >= 10";
const APPLY: [string, string][] = [
  ["notional", "price * qty"],
  ["tag", "upper(venue) + '-' + side"],
];
// The same logic in CEL, which keeps ints and doubles apart, hence the `.0`s.
const CEL_FILTER = "price > 100.0 && sym != 'XYZ' && qty >= 10.0";
const CEL_APPLY: [string, string][] = [
  ["notional", "price * qty"],
  ["tag", "venue.upperAscii() + '-' + side"],
];


function makeLines(n: number): string[] {
  const next = random(42);
  const syms = ["AAPL", "MSFT", "XYZ", "GOOG", "AMZN", "NVDA", "TSLA", "META"];
  const venues = ["xnas", "xnys", "bats", "arca", "iexg"];
  const lines: string[] = [];
  for (let i = 0; i < n; i++) {
    lines.push(JSON.stringify({
      id: `ord-${(1_000_000 + i).toString(36)}`,
      sym: syms[Math.floor(next() * syms.length)],
      price: Math.round(next() * 20_000) / 100,
      qty: Math.floor(next() * 50),
      side: next() < 0.5 ? "buy" : "sell",
      venue: venues[Math.floor(next() * venues.length)],
      ts: 1_717_000_000_000 + i * 37,
      account: `acct-${Math.floor(next() * 10_000)}`,
      strategy: "twap-passive",
      note: "limit order, good till cancelled, desk 7",
    }));
  }
  return lines;
}

interface Pipeline {
  name: string;
  /** Filters and computes fields in place; returns how many rows passed, as a checksum. */
  run(rows: Row[]): number;
}

function compiledPipeline(name: string, filter: CompiledExpression, applies: [string, CompiledExpression][]): Pipeline {
  const [first, second] = [applies[0]!, applies[1]!];
  return {
    name,
    run(rows) {
      let kept = 0;
      for (let i = 0; i < rows.length; i++) {
        const row = rows[i]!;
        if (filter.evaluate(row) !== true) continue;
        row[first[0]] = first[1].evaluate(row);
        row[second[0]] = second[1].evaluate(row);
        kept++;
      }
      return kept;
    },
  };
}

/** The same expressions as the engine runs them: through the filter and applyExpression steps. */
function stepsPipeline(steps: InlineStep[]): Pipeline {
  return {
    name: "via src/steps",
    run(rows) {
      let kept = 0;
      next: for (let i = 0; i < rows.length; i++) {
        let row: Row | null = rows[i]!;
        for (let s = 0; s < steps.length; s++) {
          row = steps[s]!.apply(row);
          if (row === null) continue next;
        }
        kept++;
      }
      return kept;
    },
  };
}

interface Order {
  sym: string;
  price: number;
  qty: number;
  side: string;
  venue: string;
  notional?: number;
  tag?: string;
}

const handWritten: Pipeline = {
  name: "hand-written TS",
  run(rows) {
    let kept = 0;
    for (let i = 0; i < rows.length; i++) {
      const row = rows[i] as unknown as Order;
      if (!(row.price > 100 && row.sym !== "XYZ" && row.qty >= 10)) continue;
      row.notional = row.price * row.qty;
      row.tag = row.venue.toUpperCase() + "-" + row.side;
      kept++;
    }
    return kept;
  },
};

/**
 * Times `pipelines` on the same rows, interleaving their passes so machine noise hits all of
 * them alike, and keeps each one's best pass (after a warm-up pass), in rows per second.
 * Each pipeline gets its own copy of the rows, since it writes fields into them.
 */
function measure(pipelines: Pipeline[], lines: string[], repeats: number, endToEnd: boolean): { rowsPerSecond: number; kept: number }[] {
  const copies = pipelines.map(() => lines.map((l) => JSON.parse(l) as Row));
  const best = pipelines.map(() => Infinity);
  const kept = pipelines.map(() => 0);
  const pass = (p: number): number => {
    const pipeline = pipelines[p]!;
    const start = performance.now();
    if (endToEnd) {
      // Parse, transform, serialise: what a stage does per record.
      const rows = lines.map((l) => JSON.parse(l) as Row);
      kept[p] = pipeline.run(rows);
      let bytes = 0;
      for (const row of rows) bytes += JSON.stringify(row).length;
      if (bytes === 0) throw new Error("unreachable");
    } else {
      kept[p] = pipeline.run(copies[p]!);
    }
    return performance.now() - start;
  };
  for (let p = 0; p < pipelines.length; p++) pass(p);
  for (let r = 0; r < repeats; r++) {
    for (let p = 0; p < pipelines.length; p++) best[p] = Math.min(best[p]!, pass(p));
  }
  return pipelines.map((_, p) => ({ rowsPerSecond: (lines.length / best[p]!) * 1000, kept: kept[p]! }));
}

const fmt = (n: number): string => `${(n / 1e6).toFixed(2)} M rows/s`;

const lines = makeLines(ROWS);
const avgBytes = lines.reduce((sum, l) => sum + l.length, 0) / lines.length;
const fv = compiledPipeline(
  "compiled fv expressions",
  compileExpression(FILTER),
  APPLY.map(([field, src]) => [field, compileExpression(src)]),
);
const viaSteps = stepsPipeline([
  compileFilter({ op: "filter", expression: FILTER, language: undefined }),
  ...APPLY.map(([column, expression]) => compileApplyExpression({ op: "applyExpression", column, expression, language: undefined })),
]);
const cel = compiledPipeline(
  "CEL (@bufbuild/cel)",
  compileExpression(CEL_FILTER, { language: "cel" }),
  CEL_APPLY.map(([field, src]) => [field, compileExpression(src, { language: "cel" })]),
);

const runtime = typeof Bun !== "undefined" ? `bun ${Bun.version}` : "not bun";
console.log(`${runtime}; rows: ${ROWS} x ${REPEATS} repeats (best pass), ~${avgBytes.toFixed(0)} bytes per row`);
console.log(`filter: ${FILTER}`);
for (const [field, src] of APPLY) console.log(`apply:  ${field} = ${src}`);
for (const endToEnd of [false, true]) {
  console.log(endToEnd ? "\nend to end (JSON.parse + transform + JSON.stringify):" : "\ntransform only (rows already parsed):");
  type Result = { rowsPerSecond: number; kept: number };
  const [hand, compiled, steps] = measure([handWritten, fv, viaSteps], lines, REPEATS, endToEnd) as [Result, Result, Result];
  if (hand.kept !== compiled.kept || hand.kept !== steps.kept) {
    throw new Error(`pipelines disagree: ${hand.kept}, ${compiled.kept}, ${steps.kept} rows kept`);
  }
  const ratio = (r: Result): string => `ratio ${((r.rowsPerSecond / hand.rowsPerSecond) * 100).toFixed(0)}% of hand-written`;
  console.log(`  ${handWritten.name.padEnd(24)} ${fmt(hand.rowsPerSecond)}  (kept ${hand.kept})`);
  console.log(`  ${fv.name.padEnd(24)} ${fmt(compiled.rowsPerSecond)}  ${ratio(compiled)}`);
  console.log(`  ${viaSteps.name.padEnd(24)} ${fmt(steps.rowsPerSecond)}  ${ratio(steps)}`);
  const celLines = lines.slice(0, Math.min(lines.length, 20_000));
  const [celResult] = measure([cel], celLines, Math.min(REPEATS, 3), endToEnd);
  console.log(`  ${cel.name.padEnd(24)} ${fmt(celResult!.rowsPerSecond)}  (on ${celLines.length} rows, for reference)`);
}
