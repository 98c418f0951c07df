import { afterAll, describe, expect, test } from "bun:test";
import { nodeTransformFs } from "../../runtime/compute/node-host.ts";
import { type ComputeStep, createComputeStep, TransformRegistry } from "./imports.ts";
import { enriched, filtered, orders } from "./fixtures.ts";
import { exampleManifest, functionsDir, recordingHost, summarize, tempRoots } from "./helpers.ts";

const roots = tempRoots();
afterAll(() => roots.cleanup());

/** A root with the examples forced to one isolation (it overrides functions/ by id@version). */
function rootFor(isolation: "worker" | "process"): string {
  const at = `isolation = "${isolation}"`;
  return roots.root({
    enrich: exampleManifest("enrich-order", at),
    filter: exampleManifest("price-filter", at, (t) => t.replace('min_price = "100"', 'min_price = "100"\ntrap_sku = "TRAP"')),
    spin: exampleManifest("spin", at, (t) => t.replace("timeoutMs = 500", "timeoutMs = 1000").replace("batchSize = 8", "batchSize = 4")),
  });
}

async function withStep<T>(registry: TransformRegistry, ref: string, body: (step: ComputeStep) => Promise<T>): Promise<T> {
  const step = await createComputeStep({ op: "wasm", ref }, registry, recordingHost(), { stage: 0, step: 0 });
  try {
    return await body(step);
  } finally {
    await step.close();
  }
}

for (const isolation of ["worker", "process"] as const) {
  describe(`wasm steps (isolation = "${isolation}")`, () => {
    test("the AssemblyScript map enriches each row exactly, non-ASCII text included", async () => {
      const registry = await TransformRegistry.load(`${functionsDir}:${rootFor(isolation)}`, nodeTransformFs);
      await withStep(registry, "enrich-order", async (step) => {
        expect(step.op).toBe("wasm");
        expect(summarize(await step.processBatch(orders))).toEqual(enriched);
        // Input rows are not changed.
        expect(orders[0]!.note).toBe("dropped: not declared");
      });
    }, 30_000);

    test("the AssemblyScript filter keeps exactly the rows at or above min_price", async () => {
      const registry = await TransformRegistry.load(rootFor(isolation), nodeTransformFs);
      await withStep(registry, "price-filter", async (step) => {
        expect(summarize(await step.processBatch(orders))).toEqual(filtered);
      });
    }, 30_000);

    test("a row that traps the plugin is poison; the other rows of its batch go on", async () => {
      const registry = await TransformRegistry.load(rootFor(isolation), nodeTransformFs);
      await withStep(registry, "price-filter", async (step) => {
        const rows = Array.from({ length: 10 }, (_, i) => ({ sku: i === 3 || i === 7 ? "TRAP" : `S${i}`, price: 100 + i, qty: 1 }));
        const out = summarize(await step.processBatch(rows));
        expect(out).toEqual(rows.map((r) => (r.sku === "TRAP" ? "poison:plugin_error" : [{ sku: r.sku, customer: null, price: r.price, qty: 1 }])));
        expect(step.counters.poison).toBe(2);
        expect(step.counters.failedCalls).toBeGreaterThan(2);
        // After the trap, the plugin still answers whole batches.
        expect(summarize(await step.processBatch(orders))).toEqual(filtered);
      });
    }, 30_000);

    test("processBatch splits more rows than batchSize into calls and keeps their order", async () => {
      const registry = await TransformRegistry.load(rootFor(isolation), nodeTransformFs);
      await withStep(registry, "spin", async (step) => {
        expect(step.batchSize).toBe(4);
        const rows = Array.from({ length: 10 }, (_, i) => ({ id: i }));
        expect(summarize(await step.processBatch(rows))).toEqual(rows.map((r) => [{ id: r.id, spin: null }]));
        expect(step.counters.calls).toBe(3);
      });
    }, 30_000);
  });
}

describe("memoryMaxPages", () => {
  test("a call that grows the plugin's memory past the limit is split; a row that does so alone is poison (memory_limit)", async () => {
    const registry = await TransformRegistry.load(roots.root({ e: exampleManifest("enrich-order", "memoryMaxPages = 3", (t) => t.replace("batchSize = 64", "batchSize = 1000")) }), nodeTransformFs);
    await withStep(registry, "enrich-order", async (step) => {
      const rows = Array.from({ length: 1000 }, (_, i) => ({ sku: `S${i}`, customer: "x".repeat(i % 100), price: 1, qty: 1 }));
      rows.push({ sku: "huge", customer: "y".repeat(300_000), price: 1, qty: 1 });
      const out = await step.processBatch(rows);
      expect(out.slice(0, 1000).every((r) => "rows" in r && r.rows.length === 1)).toBe(true);
      expect(out.length).toBe(1001);
      expect(summarize([out[1000]!])).toEqual(["poison:memory_limit"]);
      expect(step.counters.failedCalls).toBeGreaterThan(0);
    });
  }, 30_000);
});

describe("a runaway plugin", () => {
  // Process isolation: on Bun 1.4 and Deno 2.9, Worker.terminate() does not stop a thread that
  // spins inside WebAssembly, so a worker-isolated runaway would keep burning a core of the test
  // run. functions/README.md has the details.
  test("is timed out: its batch is poison (timeout), the plugin restarts and the next batch still flows", async () => {
    const registry = await TransformRegistry.load(rootFor("process"), nodeTransformFs);
    await withStep(registry, "spin", async (step) => {
      const started = performance.now();
      const stuck = await step.processBatch([{ id: 1 }, { id: 2, spin: true }, { id: 3 }]);
      expect(summarize(stuck)).toEqual(["poison:timeout", "poison:timeout", "poison:timeout"]);
      expect(performance.now() - started).toBeLessThan(6000);
      expect(summarize(await step.processBatch([{ id: 4 }, { id: 5 }]))).toEqual([[{ id: 4, spin: null }], [{ id: 5, spin: null }]]);
      expect(step.counters).toMatchObject({ timeouts: 1, restarts: 1, poison: 3 });
      // And again: every runaway costs one timeout, not a stalled stream.
      expect(summarize(await step.processBatch([{ id: 6, spin: true }]))).toEqual(["poison:timeout"]);
      expect(summarize(await step.processBatch([{ id: 7 }]))).toEqual([[{ id: 7, spin: null }]]);
      expect(step.counters.timeouts).toBe(2);
    });
  }, 30_000);
});

describe("a batch of several plugin calls", () => {
  // The chunks of one batch are sent to the plugin host at once, which runs them one after
  // another: a chunk that times out in the middle takes only its own rows, and the chunks waiting
  // behind it in the host that was killed go to the restarted one, in order.
  test("one chunk timing out in the middle: its rows are poison, the chunks before and after it flow, in order", async () => {
    const registry = await TransformRegistry.load(rootFor("process"), nodeTransformFs);
    await withStep(registry, "spin", async (step) => {
      const rows = Array.from({ length: 12 }, (_, i) => ({ id: i, ...(i === 5 ? { spin: true } : {}) }));
      const out = summarize(await step.processBatch(rows));
      // batchSize 4: rows 0-3, 4-7 (with the spinning row 5) and 8-11.
      expect(out).toEqual(rows.map((r, i) => (i >= 4 && i < 8 ? "poison:timeout" : [{ id: r.id, spin: null }])));
      expect(step.counters).toMatchObject({ calls: 3, timeouts: 1, restarts: 1, poison: 4 });
    });
  }, 30_000);
});

describe("a plugin that answered while the stream's thread was busy", () => {
  // The stream hands a step rows while it decodes the rest of a batch: its thread can be busy
  // past a call's timeoutMs while the answer waits in the pipe, unread. That is not a timeout.
  test("is not timed out: the timer waits until it goes off on time", async () => {
    const root = roots.root({ enrich: exampleManifest("enrich-order", 'isolation = "process"', (t) => t.replace(/timeoutMs = \d+/, "timeoutMs = 100")) });
    const registry = await TransformRegistry.load(root, nodeTransformFs);
    await withStep(registry, "enrich-order", async (step) => {
      await step.processBatch(orders.slice(0, 1)); // started and warm
      for (let round = 0; round < 3; round++) {
        const results = step.processBatch(orders);
        const until = performance.now() + 400;
        while (performance.now() < until) { /* the stream's thread, busy decoding */ }
        expect(summarize(await results)).toEqual(enriched);
      }
      expect(step.counters).toMatchObject({ timeouts: 0, restarts: 0, poison: 0 });
    });
  }, 30_000);
});

describe("a WASI plugin on Bun", () => {
  test("fails validation, saying it needs WASI and where that exists", async () => {
    const registry = await TransformRegistry.load(functionsDir, nodeTransformFs);
    const error = await createComputeStep({ op: "wasm", ref: "text-stats-go" }, registry, recordingHost(), { stage: 0, step: 0 }).then(
      () => null,
      (e: Error) => e,
    );
    expect(error?.message).toContain("WASI is not supported on this platform");
    expect(error?.message).toContain("Node and Deno, not on Bun");
  }, 30_000);
});
