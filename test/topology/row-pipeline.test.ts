import { describe, expect, test } from "bun:test";
import { rowPipeline } from "../../src/index.ts";

async function* fromArray<T>(items: T[]) {
  for (const item of items) yield item;
}

describe("rowPipeline (library use without Kafka)", () => {
  test("runs the stream's steps over an async iterable and counts what happened", async () => {
    const poisoned: string[] = [];
    const pipeline = rowPipeline(
      [
        { op: "filter", expression: "qty > 0" },
        { op: "applyExpression", column: "unit", expression: "total / qty" },
        { op: "select", columns: ["sku", "unit"] },
      ],
      { onPoison: (row, error) => poisoned.push(`${row.sku}: ${(error as { reason?: string }).reason}`) },
    );
    const input = [
      { sku: "a", qty: 2, total: 10 },
      { sku: "b", qty: 0, total: 5 },
      { sku: "c", qty: 4, total: "x" },
      { sku: "d", qty: 1, total: 3 },
    ];
    const out = [];
    for await (const row of pipeline.run(fromArray(input))) out.push(row);
    expect(out).toEqual([{ sku: "a", unit: 5 }, { sku: "d", unit: 3 }]);
    expect(pipeline.counters).toEqual({ consumed: 4, emitted: 2, dropped: 1, poison: 1 });
    expect(poisoned).toEqual(["c: type_error"]);
    // Input rows are not changed.
    expect(input[0]).toEqual({ sku: "a", qty: 2, total: 10 });
  });
});
