/**
 * What a repartition hop costs: the same windowed count (1-minute tumbling windows, count + sum
 * per key, 1,000 keys) over the same pre-loaded 4-partition topic, keyed by the grouped column,
 * once with the hop (the default) and once with `repartition = false`. Each run is timed from the
 * start to the moment every expected window has been emitted (the input ends with a far-ahead
 * row per partition, which closes them all), so the hop's second trip through Kafka is inside the
 * time. Three interleaved rounds; medians and the ratio are printed, nothing is asserted.
 *
 * A third run in each round, `copy`, measures what the hop adds, on its own: every row consumed,
 * parsed and produced to an output topic unchanged (a filter that keeps every row), which is the
 * hop's extra trip through Kafka (its produce, its consume and its second parse). A hop costs at
 * least that on this one thread, so the ratio cannot pass copy ÷ (copy + without hop); the
 * bound is printed next to the ratio.
 *
 *   node_modules/.bin/bun bench/repartition.ts [rows=200000] [consumers=1]
 */
import type { OutboundRecord } from "../src/kafka/port.ts";
import { client, fmt, median, nextName, runtimeName, timeEngine } from "./lib.ts";

const ROWS = Number(process.argv[2] ?? 200_000);
const CONSUMERS = process.argv[3] ?? "1";
const KEYS = 1000;
const BASE = 1_717_000_000_000;
const step = (repartition?: boolean) => ({
  op: "windowedAggregate",
  timeColumn: "ts",
  windowMs: 60_000,
  groupBy: ["key"],
  aggs: [{ op: "count" }, { op: "sum", column: "price" }],
  ...(repartition === undefined ? {} : { repartition }),
});

async function load(topic: string): Promise<number> {
  const admin = client.admin({ clientId: "bench-admin" });
  await admin.createTopics([{ topic, partitions: 4 }]);
  await admin.close();
  const producer = client.producer({ clientId: "bench-loader" });
  const windows = new Set<string>();
  for (let i = 0; i < ROWS; i += 5000) {
    const records: OutboundRecord[] = [];
    for (let j = i; j < Math.min(ROWS, i + 5000); j++) {
      const key = `k${j % KEYS}`;
      const ts = BASE + j * 5;
      windows.add(`${key}@${Math.floor(ts / 60_000)}`);
      records.push({ topic, key, value: JSON.stringify({ key, price: j % 200, ts, note: "n".repeat(120) }) });
    }
    await producer.send(records);
  }
  // One far-ahead row per partition closes every window (its own never closes).
  await producer.send([0, 1, 2, 3].map((partition) => ({ topic, partition, key: "flush", value: JSON.stringify({ key: "flush", price: 0, ts: BASE + ROWS * 5 + 3_600_000 }) })));
  await producer.close();
  return windows.size;
}

const input = nextName("bench-hop-in");
const expectedWindows = await load(input);
const rates: Record<"hop" | "noHop" | "copy", number[]> = { hop: [], noHop: [], copy: [] };
const rows = ROWS + 4;
for (let round = 0; round < 3; round++) {
  for (const variant of ["noHop", "hop", "copy"] as const) {
    const rate = variant === "copy"
      ? await timeEngine(input, rows, [{ op: "filter", expression: "price >= 0" }], { STREAM_CONSUMERS: CONSUMERS }, (m) => m.emitted >= rows)
      : await timeEngine(input, ROWS, [step(variant === "hop" ? undefined : false)], { STREAM_CONSUMERS: CONSUMERS }, (m) => m.emitted >= expectedWindows);
    rates[variant].push(rate);
  }
}
const hop = median(rates.hop);
const noHop = median(rates.noHop);
const copy = median(rates.copy);
console.log(`repartition hop cost (${runtimeName()}, ${ROWS.toLocaleString("en")} rows, ${expectedWindows.toLocaleString("en")} windows, ${CONSUMERS} consumer(s), median of 3)`);
console.log(`  without hop (repartition = false) ${fmt(noHop)} rows/s`);
console.log(`  with hop                          ${fmt(hop)} rows/s   ratio ${(hop / noHop).toFixed(2)}`);
console.log(`  copy (consume, parse, produce)    ${fmt(copy)} rows/s   bound on the ratio: copy / (copy + without hop) = ${(copy / (copy + noHop)).toFixed(2)}; the hop's own extra cost ${((1 / hop - 1 / noHop - 1 / copy) * 1e6).toFixed(2)} µs/row beyond a copy`);
process.exit(0);
