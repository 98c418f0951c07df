import { describe, expect, test } from "bun:test";
import { nodeTransformFs } from "../../runtime/compute/node-host.ts";
import { TransformRegistry } from "../../src/compute/index.ts";
import { computePipeline } from "../../src/topology/compute-pipeline.ts";
import { functionsDir, recordingHost } from "../compute/helpers.ts";

describe("inline and compute steps without Kafka", () => {
  test("computePipeline mixes inline, expression, wasm and container steps and counts what happened", async () => {
    const registry = await TransformRegistry.load(functionsDir, nodeTransformFs);
    const poisoned: string[] = [];
    const pipeline = await computePipeline(
      [
        { op: "filter", expression: "qty > 0" },
        { op: "expression", ref: "notional-expr" },
        { op: "wasm", ref: "price-filter" },
        { op: "applyExpression", column: "title", expression: "sku" },
        { op: "container", ref: "slugify-py" },
      ],
      { registry, host: recordingHost(), onPoison: (row, poison) => poisoned.push(`price ${row.price}: ${poison.reason}: ${poison.message}`) },
    );
    try {
      const rows = [
        { sku: "Crème-1", price: 150, qty: 10 },
        { sku: "cheap", price: 50, qty: 100 },
        { sku: "none", price: 500, qty: 0 },
        { sku: "small", price: 200, qty: 1 },
        { sku: "bad", price: "x", qty: 1 },
        { sku: 7, price: 300, qty: 10 },
      ];
      const out = [];
      for await (const row of pipeline.run(rows)) out.push(row);
      expect(out).toEqual([{ id: null, title: "Crème-1", slug: "creme-1" }]);
      // none: qty 0; small: notional < 1000; cheap: price < 100; bad: price cast to null, so the
      // notional is null and the filter drops it; 7: the sku is cast to null, so the title is null
      // and the container answers an error for that row.
      expect(pipeline.counters).toMatchObject({ consumed: 6, emitted: 1, poison: 1 });
      expect(poisoned).toEqual(["price 300: plugin_error: title is not a string"]);
    } finally {
      await pipeline.close();
    }
  }, 30_000);

  test("computePipeline fails at creation, before any row, when a ref does not resolve", async () => {
    const registry = await TransformRegistry.load(functionsDir, nodeTransformFs);
    await expect(computePipeline([{ op: "wasm", ref: "enrich-order" }, { op: "wasm", ref: "missing" }], { registry, host: recordingHost() })).rejects.toThrow(
      'stage 1, step 2 (op "wasm"), field "ref": transform "missing" not found',
    );
  }, 30_000);
});
