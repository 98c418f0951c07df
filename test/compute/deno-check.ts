/**
 * Runs the WASM examples through the engine on Deno and prints what came out as one JSON line.
 * deno.test.ts runs it with `node_modules/.bin/deno run -A` and compares with fixtures.ts.
 */
import { createComputeStep, TransformRegistry } from "../../src/compute/index.ts";
import { createNodeComputeHost, nodeTransformFs } from "../../runtime/compute/node-host.ts";
import { orders, texts } from "./fixtures.ts";

const functionsDir = new URL("../../functions", import.meta.url).pathname;
const registry = await TransformRegistry.load(functionsDir, nodeTransformFs);
const host = createNodeComputeHost();
const out: Record<string, unknown> = {};
for (const isolation of ["worker", "process"] as const) {
  for (const [ref, rows] of [["enrich-order", orders], ["price-filter", orders], ["text-stats-go", texts]] as const) {
    // Each example in both isolations: the registry's manifests are plain objects.
    (registry.resolve(ref) as { isolation?: string }).isolation = isolation;
    const step = await createComputeStep({ op: "wasm", ref }, registry, host, { stage: 0, step: 0 });
    try {
      const results = await step.processBatch(rows as unknown as Record<string, unknown>[]);
      out[`${ref}/${isolation}`] = results.map((r) => ("rows" in r ? r.rows : `poison:${r.poison.reason}`));
    } finally {
      await step.close();
    }
  }
}
console.log(JSON.stringify(out));
