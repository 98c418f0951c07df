/**
 * What a repartition hop costs: the same windowed count (1-minute tumbling windows, count + sum
 * per key, 1,000 keys) over the same pre-loaded 4-partition topic, keyed by the grouped column,
 * once with the hop (the default) and once with `repartition = false`. Each run is timed from the
 * start to the moment every expected window has been emitted (the input ends with a far-ahead
 * row per partition, which closes them all), so the hop's second trip through Kafka is inside the
 * time. Three interleaved rounds; medians and the ratio are printed, nothing is asserted.
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
const rates: Record<"hop" | "noHop", number[]> = { hop: [], noHop: [] };
for (let round = 0; round < 3; round++) {
  for (const variant of ["noHop", "hop"] as const) {
    const rate = await timeEngine(input, ROWS, [step(variant === "hop" ? undefined : false)], { STREAM_CONSUMERS: CONSUMERS }, (m) => m.emitted >= expectedWindows);
    rates[variant].push(rate);
  }
}
const hop = median(rates.hop);
const noHop = median(rates.noHop);
console.log(`repartition hop cost (${runtimeName()}, ${ROWS.toLocaleString("en")} rows, ${expectedWindows.toLocaleString("en")} windows, ${CONSUMERS} consumer(s), median of 3)`);
console.log(`  without hop (repartition = false) ${fmt(noHop)} rows/s`);
console.log(`  with hop                          ${fmt(hop)} rows/s   ratio ${(hop / noHop).toFixed(2)}`);
process.exit(0);
