import { describe, expect, test } from "bun:test";
import { nodeTransformFs } from "../../runtime/compute/node-host.ts";
import { createComputeStep, runCompute, TransformRegistry } from "./imports.ts";
import { functionsDir, recordingHost } from "./helpers.ts";

async function* slowly<T>(items: T[]): AsyncGenerator<T> {
  for (const item of items) {
    await Promise.resolve();
    yield item;
  }
}

describe("a compute step without Kafka", () => {
  test("runCompute runs a wasm step over an async iterable, in batches and in order", async () => {
    const registry = await TransformRegistry.load(functionsDir, nodeTransformFs);
    const step = await createComputeStep({ op: "wasm", ref: "enrich-order" }, registry, recordingHost(), { stage: 0, step: 0 });
    try {
      const rows = Array.from({ length: 150 }, (_, i) => ({ sku: `S${i}`, customer: "Zoë", price: i, qty: 10 }));
      const out = [];
      for await (const row of runCompute(step, slowly(rows), { batchSize: 64 })) out.push(row);
      expect(out.map((r) => r.sku)).toEqual(rows.map((r) => r.sku));
      expect(out[120]).toEqual({ sku: "S120", customer: "Zoë", price: 120, qty: 10, notional: 1200, tier: "large", label: "S120 ×10" });
      expect(step.counters.calls).toBe(3); // 64 + 64 + 22
    } finally {
      await step.close();
    }
  }, 30_000);
});
