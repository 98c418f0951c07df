/**
 * The small Deno suite (`deno task test`): the engine's pure parts load and behave the same on
 * Deno. The end-to-end Deno run against Kafka is in test/integration/spine.test.ts.
 */
import { compileExpression, compileTopology, parseSettings, rowPipeline } from "../../../src/index.ts";

declare const Deno: { test(name: string, fn: () => void | Promise<void>): void };

function assertEquals(actual: unknown, expected: unknown): void {
  const a = JSON.stringify(actual);
  const e = JSON.stringify(expected);
  if (a !== e) throw new Error(`expected ${e}, got ${a}`);
}

Deno.test("expressions evaluate the same on Deno", () => {
  assertEquals(compileExpression("price * qty > 100 ? upper(sym) : null").evaluate({ price: 60, qty: 2, sym: "ab" }), "AB");
  assertEquals(compileExpression("price > 1", { language: "cel" }).evaluate({ price: 2.0 }), true);
});

Deno.test("a topology compiles and runs its steps on Deno", () => {
  const { stages } = compileTopology({
    stages: [{ inputs: ["a"], output: "b", steps: [{ op: "filter", expression: "x > 1" }, { op: "select", columns: ["x"] }] }],
  });
  assertEquals(stages[0]!.process({ x: 2, y: 1 }), { x: 2 });
  assertEquals(stages[0]!.process({ x: 1 }), null);
});

Deno.test("rowPipeline runs over an async iterable on Deno", async () => {
  const pipeline = rowPipeline([{ op: "applyExpression", column: "z", expression: "x / y" }]);
  const out = [];
  for await (const row of pipeline.run([{ x: 4, y: 2 }, { x: 1, y: 0 }])) out.push(row);
  assertEquals(out, [{ x: 4, y: 2, z: 2 }]);
  assertEquals(pipeline.counters, { consumed: 2, emitted: 1, dropped: 0, poison: 1 });
});

Deno.test("settings are read the same on Deno", () => {
  assertEquals(parseSettings({ STREAM_CONSUMERS: "3" }).consumers, 3);
});
