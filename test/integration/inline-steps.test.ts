/**
 * Inline steps end to end through the real broker: exact output, and poison rows (bad types,
 * division by zero, non-JSON) isolated, dead-lettered with their reason and counted.
 */
import { describe, expect, test } from "bun:test";
import type { InboundRecord, OutboundRecord } from "../../src/kafka/port.ts";
import { lastRecord, waitFor } from "../helpers/cli.ts";
import { collect, createTopic, header, json, produce, text, uniqueName } from "../helpers/kafka.ts";
import { pipelineFile } from "../helpers/pipelines.ts";
import { startStream, stopStream } from "../helpers/streams.ts";

function pricedPipeline(name: string, input: string, output: string, dlq: string): string {
  return pipelineFile({
    name,
    datasets: { orders: { topic: input, deadLetter: dlq }, priced: { topic: output } },
    transforms: [{
      inputs: ["orders"],
      output: "priced",
      steps: [
        { op: "filter", expression: "status == 'open' && qty != null" },
        { op: "applyExpression", column: "unit", expression: "roundTo(total / qty, 2)" },
        { op: "applyExpression", column: "label", expression: "upper(sku) + '-' + toString(qty)" },
        { op: "rename", mapping: { sku: "product" } },
        { op: "drop", columns: ["internal"] },
        { op: "select", columns: ["id", "product", "qty", "unit", "label", "missing"] },
      ],
    }],
  });
}

/** Order i: every 5th one is closed (filtered out). Every 10th row (i % 10 == 3) is replaced by poison. */
function order(i: number) {
  return { id: i, sku: `sku${i % 7}`, qty: 1 + (i % 4), total: 10 * (1 + (i % 4)) + (i % 3), status: i % 5 === 0 ? "closed" : "open", internal: "secret" };
}
function expectedRow(i: number) {
  const o = order(i);
  return { id: i, product: o.sku, qty: o.qty, unit: Math.round((o.total / o.qty) * 100) / 100, label: `${o.sku.toUpperCase()}-${o.qty}`, missing: null };
}

/** Poison kinds: a type error, a division by zero, and a value that is not JSON. */
function poison(i: number, topic: string): { record: OutboundRecord; reason: string } {
  switch (i % 3) {
    case 0:
      return { record: { topic, key: `bad${i}`, value: JSON.stringify({ ...order(i), status: "open", qty: "three" }) }, reason: "type_error" };
    case 1:
      return { record: { topic, key: `bad${i}`, value: JSON.stringify({ ...order(i), status: "open", qty: 0 }) }, reason: "division_by_zero" };
    default:
      return { record: { topic, key: `bad${i}`, value: `{"id": ${i}, broken` }, reason: "invalid_json" };
  }
}

describe("inline steps through the real broker", () => {
  test("select, rename, drop, filter and applyExpression give exactly the expected output; 10% poison is dead-lettered with reasons", async () => {
    const name = uniqueName("inline");
    const input = `${name}-in`;
    const output = `${name}-out`;
    const dlq = `${name}-dlq`;
    await createTopic(input, 4);
    const records: OutboundRecord[] = [];
    const bad = new Map<string, string>();
    for (let i = 0; i < 2000; i++) {
      if (i % 10 === 3) {
        const p = poison(i, input);
        records.push(p.record);
        bad.set(String(p.record.key), p.reason);
      } else {
        records.push({ topic: input, key: `k${i}`, value: JSON.stringify(order(i)) });
      }
    }
    await produce(records);
    const good = [...Array(2000).keys()].filter((i) => i % 10 !== 3);
    const expected = good.filter((i) => i % 5 !== 0).map(expectedRow);

    // Poison rows pass the filter (open, qty not null), so they reach the division and the '+'.
    const file = pricedPipeline(name, input, output, dlq);
    const stream = await startStream(file, output);
    const { run, out } = stream;
    const dead = collect(dlq);
    await waitFor(() => out.records.length >= expected.length && dead.records.length >= bad.size, 120_000, "all output and dead letters");
    await waitFor(() => (lastRecord(run.records)?.metrics?.consumed ?? 0) >= 2000, 30_000, "the counters");
    const outRecords = await stopStream(stream);
    const deadRecords = await dead.stop();

    const byId = (rows: Array<{ id: number }>) => [...rows].sort((a, b) => a.id - b.id);
    expect(byId(outRecords.map(json))).toEqual(byId(expected));
    // Columns come out in the select's order.
    expect(Object.keys(json(outRecords[0]!))).toEqual(["id", "product", "qty", "unit", "label", "missing"]);

    expect(deadRecords.length).toBe(bad.size);
    for (const r of deadRecords as InboundRecord[]) {
      expect(header(r, "fv.error.reason")).toBe(bad.get(text(r.key)!)!);
      expect(header(r, "fv.source.topic")).toBe(input);
      expect(header(r, "fv.error.message")!.length).toBeGreaterThan(0);
    }

    const m = lastRecord(run.records)!.metrics!;
    const reasons: Record<string, number> = {};
    for (const reason of bad.values()) reasons[reason] = (reasons[reason] ?? 0) + 1;
    expect(m.consumed).toBe(2000);
    expect(m.poison).toBe(bad.size);
    expect(m.deadLettered).toBe(bad.size);
    expect(m.poisonByReason).toEqual(reasons);
    expect(m.emitted).toBe(expected.length);
    expect(m.dropped).toBe(good.length - expected.length);
  });
});
