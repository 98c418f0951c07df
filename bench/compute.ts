/**
 * Compute step throughput, in memory (no Kafka): records/second through the WASM map example
 * (functions/enrich-order, AssemblyScript) against the same logic as inline steps
 * (rowPipeline with applyExpression), at batch sizes 1, 64 and 512, with the plugin in a Worker
 * and in a plugin process. The container example (python3) is shown for scale. Results are
 * printed, not asserted.
 *
 *   node_modules/.bin/bun bench/compute.ts [rows] [repeats]
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createNodeComputeHost, nodeTransformFs } from "../runtime/compute/node-host.ts";
import { type ComputeStep, createComputeStep, TransformRegistry } from "../src/compute/index.ts";
import { type Row, rowPipeline } from "../src/index.ts";

const ROWS = Number(process.argv[2] ?? 50_000);
const REPEATS = Number(process.argv[3] ?? 3);
/** Batch size 1 costs one call per row: fewer rows keep the run short. */
const ROWS_AT_BATCH_1 = Math.min(ROWS, 5_000);
const functionsDir = resolve(import.meta.dir, "../functions");

function makeRows(n: number): Row[] {
  const customers = ["Zoë Ångström", "東京商事", "Acme Corp", "Müller GmbH", "plain"];
  return Array.from({ length: n }, (_, i) => ({
    sku: `SKU-${(1_000_000 + i).toString(36)}`,
    customer: customers[i % customers.length],
    price: Math.round(((i * 7919) % 20_000)) / 100,
    qty: (i * 31) % 50,
  }));
}

/** The enrich-order logic as inline steps. */
const inlineSteps = [
  { op: "select", columns: ["sku", "customer", "price", "qty"] },
  { op: "applyExpression", column: "notional", expression: "price * qty" },
  { op: "applyExpression", column: "tier", expression: "notional >= 1000 ? 'large' : 'small'" },
  { op: "applyExpression", column: "label", expression: "sku + ' ×' + toString(qty)" },
];

function best(times: number[]): number {
  return Math.min(...times);
}

function fmt(rowsPerSecond: number): string {
  return Math.round(rowsPerSecond).toLocaleString("en-US").padStart(12);
}

const results: Array<{ what: string; batch: string; rps: number; rows: number }> = [];

// 1. Inline steps, one row at a time, as the stream runs them.
{
  const rows = makeRows(ROWS);
  const pipeline = rowPipeline(inlineSteps);
  const times: number[] = [];
  for (let r = 0; r < REPEATS + 1; r++) {
    const t = performance.now();
    for (const row of rows) pipeline.process(row);
    if (r > 0) times.push(performance.now() - t); // the first run warms up
  }
  results.push({ what: "inline steps (rowPipeline + applyExpression)", batch: "-", rps: (ROWS / best(times)) * 1000, rows: ROWS });
}

// 2. The WASM map and the container example through compute steps.
const temp = mkdtempSync(join(tmpdir(), "fv-bench-compute-"));
const host = createNodeComputeHost();

function rootWith(folder: string, top: string): string {
  const root = mkdtempSync(join(temp, "root-"));
  mkdirSync(join(root, folder));
  const text = readFileSync(join(functionsDir, folder, "transform.toml"), "utf8")
    .replace(/^batchSize = \d+$/m, "")
    .replace(/^entry = "([^"]+\.wasm)"$/m, (_, f: string) => `entry = ${JSON.stringify(join(functionsDir, folder, f))}`)
    .replace('"slugify.py"', JSON.stringify(join(functionsDir, folder, "slugify.py")));
  writeFileSync(join(root, folder, "transform.toml"), `${top}\n${text}`);
  return root;
}

async function measure(step: ComputeStep, rows: Row[]): Promise<number> {
  await step.processBatch(rows.slice(0, Math.min(rows.length, 2_000))); // warm up
  const times: number[] = [];
  for (let r = 0; r < REPEATS; r++) {
    const t = performance.now();
    const out = await step.processBatch(rows);
    times.push(performance.now() - t);
    if (out.length !== rows.length) throw new Error("lost rows");
  }
  return (rows.length / best(times)) * 1000;
}

try {
  for (const isolation of ["worker", "process"] as const) {
    for (const batch of [1, 64, 512]) {
      const rows = makeRows(batch === 1 ? ROWS_AT_BATCH_1 : ROWS);
      const registry = await TransformRegistry.load(rootWith("enrich-order", `isolation = "${isolation}"\nbatchSize = ${batch}`), nodeTransformFs);
      const step = await createComputeStep({ op: "wasm", ref: "enrich-order" }, registry, host, { stage: 0, step: 0 });
      try {
        results.push({ what: `wasm enrich-order, ${isolation}`, batch: String(batch), rps: await measure(step, rows), rows: rows.length });
      } finally {
        await step.close();
      }
    }
  }
  for (const batch of [1, 64, 512]) {
    const rows = makeRows(batch === 1 ? ROWS_AT_BATCH_1 : ROWS).map((r, i) => ({ id: i, title: `${r.customer} ${r.sku}` }));
    const registry = await TransformRegistry.load(rootWith("slugify-py", `batchSize = ${batch}`), nodeTransformFs);
    const step = await createComputeStep({ op: "container", ref: "slugify-py" }, registry, host, { stage: 0, step: 0 });
    try {
      results.push({ what: "container slugify-py (python3)", batch: String(batch), rps: await measure(step, rows), rows: rows.length });
    } finally {
      await step.close();
    }
  }
} finally {
  rmSync(temp, { recursive: true, force: true });
}

const runtime = (globalThis as { Bun?: { version: string } }).Bun ? `bun ${(globalThis as unknown as { Bun: { version: string } }).Bun.version}` : `deno/node ${process.version}`;
console.log(`compute steps, ${runtime}, best of ${REPEATS}; records/second (higher is better)\n`);
console.log(`${"step".padEnd(48)} ${"batch".padStart(5)} ${"rows".padStart(7)} ${"records/s".padStart(12)}`);
for (const r of results) console.log(`${r.what.padEnd(48)} ${r.batch.padStart(5)} ${String(r.rows).padStart(7)} ${fmt(r.rps)}`);
const inline = results[0]!.rps;
const wasm512 = results.find((r) => r.what.startsWith("wasm") && r.batch === "512")!.rps;
console.log(`\ninline steps are ${(inline / wasm512).toFixed(1)}x the WASM map at batch 512 (worker)`);
