/**
 * The http step through the real broker: one consumer, a local service that answers after
 * `latencyMs`, rows keyed over `keys` message keys (so same-key rows queue behind each other, in
 * order). Prints rows/s with `concurrency` calls in flight, then the same with concurrency = 1
 * (one call at a time, as Kafka Streams' one-record-at-a-time processing would make it), and
 * checks the output: every row once, and per key in input order. Results are printed, not asserted.
 *
 *   node_modules/.bin/bun bench/http-step.ts [rows] [latencyMs] [concurrency] [keys]
 */
import { startScoreService } from "../test/helpers/score-service.ts";
import type { OutboundRecord } from "../src/kafka/port.ts";
import { BROKERS, client, fmt, nextName, runEngine, runtimeName } from "./lib.ts";

const ROWS = Number(process.argv[2] ?? 20_000);
const LATENCY_MS = Number(process.argv[3] ?? 50);
const CONCURRENCY = Number(process.argv[4] ?? 200);
const KEYS = Number(process.argv[5] ?? 1_000);
/** At one call at a time a row costs a whole round trip: fewer rows keep the baseline short. */
const BASELINE_ROWS = Math.max(20, Math.min(ROWS, Math.round(15_000 / LATENCY_MS)));

async function load(topic: string, n: number): Promise<void> {
  const admin = client.admin({ clientId: "bench-admin" });
  await admin.createTopics([{ topic, partitions: 4 }]);
  await admin.close();
  const producer = client.producer({ clientId: "bench-loader" });
  for (let i = 0; i < n; i += 5000) {
    const records: OutboundRecord[] = [];
    for (let j = i; j < Math.min(n, i + 5000); j++) records.push({ topic, key: `k${j % KEYS}`, value: JSON.stringify({ id: j, seq: Math.floor(j / KEYS), amount: j % 100 }) });
    await producer.send(records);
  }
  await producer.close();
}

/** The output: each row once, and each key's rows in input order. */
async function checkOutput(topic: string, n: number): Promise<string> {
  const consumer = client.consumer({ groupId: nextName("bench-check"), clientId: "bench-check", topics: [topic], offsetReset: "earliest" });
  await consumer.start();
  const seen = new Set<number>();
  const lastSeq = new Map<string, number>();
  let outOfOrder = 0;
  let total = 0;
  const until = Date.now() + 60_000;
  while (seen.size < n && Date.now() < until) {
    for (const r of await consumer.poll(5000, 500)) {
      total++;
      const row = JSON.parse(new TextDecoder().decode(r.value!)) as { id: number; seq: number; score: { score: number } };
      seen.add(row.id);
      const key = new TextDecoder().decode(r.key!);
      if (row.seq <= (lastSeq.get(key) ?? -1)) outOfOrder++;
      lastSeq.set(key, row.seq);
    }
  }
  await consumer.close();
  return `${seen.size} of ${n} rows, ${total - seen.size} duplicates, ${outOfOrder} out of key order`;
}

async function run(n: number, concurrency: number, url: string) {
  const name = nextName("bench-http");
  const input = `${name}-in`;
  await load(input, n);
  const result = await runEngine(name, input, n, [{ op: "http", url: `${url}/score/{id}`, column: "score", concurrency, timeoutMs: 10_000 }], { STREAM_CONSUMERS: "1" });
  return { ...result, check: await checkOutput(`${name}-out`, n) };
}

const service = await startScoreService({ latencyMs: LATENCY_MS });
console.log(`http step, ${runtimeName()}, broker ${BROKERS}: a ${LATENCY_MS} ms service, ${KEYS} keys, 1 consumer, 4 partitions`);
const wide = await run(ROWS, CONCURRENCY, service.url);
const wideInFlight = service.maxInFlight();
await service.close();
const single = await startScoreService({ latencyMs: LATENCY_MS });
const one = await run(BASELINE_ROWS, 1, single.url);
await single.close();
// From the start (the group join included): at one call at a time the first build record that
// counts rows comes only once the whole first batch is done, so there is no steady rate to take.
console.log(`| concurrency | rows | rows/s (from start) | rows/s (steady) | most calls in flight | output |`);
console.log(`| --: | --: | --: | --: | --: | --- |`);
console.log(`| ${CONCURRENCY} | ${ROWS} | ${fmt(wide.total)} | ${fmt(wide.steady)} | ${wideInFlight} | ${wide.check} |`);
console.log(`| 1 (one call at a time, Kafka Streams-like) | ${BASELINE_ROWS} | ${fmt(one.total)} | – | ${single.maxInFlight()} | ${one.check} |`);
console.log(`concurrency ${CONCURRENCY} ÷ 1: ${(wide.total / one.total).toFixed(0)}× (rates from start, same run)`);
process.exit(0);
