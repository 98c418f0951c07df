/**
 * End-to-end throughput of a filter pipeline against the raw pass-through ceiling of the same
 * client, in one run, on the real local broker.
 *
 *   bun bench/pipeline.ts [records=200000] [consumers=1]
 *
 * Both read the same pre-loaded 4-partition topic of ~200-byte JSON rows with a fresh group and
 * are timed from start (group join included) until every input record is processed and its
 * outputs are acknowledged. Prints records/s and the pipeline/raw ratio. Nothing is asserted.
 */
import { BuildSignal, type BuildRecord, type ControlPlane, parseSettings, runStream } from "../src/index.ts";
import { platformaticClient } from "../src/kafka/platformatic.ts";
import type { OutboundRecord } from "../src/kafka/port.ts";

const N = Number(process.argv[2] ?? 200_000);
const CONSUMERS = Number(process.argv[3] ?? 1);
const BROKERS = process.env.STREAM_BROKERS ?? "127.0.0.1:9092";
const client = platformaticClient(BROKERS.split(","));
const tag = Date.now().toString(36);
const input = `bench-in-${tag}`;

function row(i: number) {
  return JSON.stringify({ id: i, sym: ["ACME", "GLOBEX", "INITECH", "UMBRELLA"][i % 4], price: i % 200, qty: 1 + (i % 9), side: i % 2 ? "buy" : "sell", venue: "XNAS", ts: 1_700_000_000_000 + i, note: "n".repeat(60) });
}

async function load(): Promise<void> {
  const admin = client.admin({ clientId: "bench-admin" });
  await admin.createTopics([{ topic: input, partitions: 4 }]);
  await admin.close();
  const producer = client.producer({ clientId: "bench-loader" });
  const chunk = 5000;
  for (let i = 0; i < N; i += chunk) {
    const records: OutboundRecord[] = [];
    for (let j = i; j < Math.min(N, i + chunk); j++) records.push({ topic: input, key: `k${j}`, value: row(j) });
    await producer.send(records);
  }
  await producer.close();
}

let round = 0;

/** Consume → produce unchanged → commit, nothing else: the client's ceiling. */
async function raw(): Promise<number> {
  const output = `bench-raw-${tag}-${++round}`;
  const admin = client.admin({ clientId: "bench-admin" });
  await admin.createTopics([{ topic: output, partitions: 4 }]);
  await admin.close();
  const started = performance.now();
  const loops = Array.from({ length: CONSUMERS }, async (_, i) => {
    const consumer = client.consumer({ groupId: `bench-raw-${tag}-${round}`, clientId: `bench-raw-${i}`, topics: [input], offsetReset: "earliest", maxBuffered: 4000 });
    const producer = client.producer({ clientId: `bench-raw-p${i}` });
    await consumer.start();
    return { consumer, producer };
  });
  const members = await Promise.all(loops);
  let done = 0;
  await Promise.all(members.map(async ({ consumer, producer }) => {
    let lastCommit = performance.now();
    while (done < N) {
      const batch = await consumer.poll(1000, 200);
      if (batch.length === 0) continue;
      await producer.send(batch.map((r) => ({ topic: output, key: r.key, value: r.value, headers: r.headers })));
      done += batch.length;
      if (performance.now() - lastCommit > 1000) {
        const next = new Map<string, { topic: string; partition: number; offset: bigint }>();
        for (const r of batch) next.set(`${r.partition}`, { topic: r.topic, partition: r.partition, offset: r.offset + 1n });
        await consumer.commit([...next.values()]);
        lastCommit = performance.now();
      }
    }
  }));
  const seconds = (performance.now() - started) / 1000;
  await Promise.all(members.map(async ({ consumer, producer }) => { await consumer.close(); await producer.close(); }));
  return N / seconds;
}

/** The engine on the same input with its own group: `filter` then one computed column. */
async function pipeline(filter: string): Promise<number> {
  const name = `bench-${tag}-${++round}`;
  let doneAt = 0;
  const started = performance.now();
  const host: ControlPlane = {
    topology: async () => ({
      stages: [{ inputs: ["in"], output: "out", steps: [{ op: "filter", expression: filter }, { op: "applyExpression", column: "notional", expression: "price * qty" }] }],
    }),
    resolveTopic: async (dataset) => ({ apiName: dataset, topic: dataset === "in" ? input : `${name}-out`, brokers: BROKERS, policy: {}, source: "kafka", sink: "kafka" }),
    heartbeat: async () => (doneAt ? BuildSignal.Stop : BuildSignal.Continue),
    putRecord: async (_id: string, record: BuildRecord) => {
      if (!doneAt && (record.metrics?.consumed ?? 0) >= N) doneAt = performance.now();
    },
  };
  const settings = parseSettings({ STREAM_BROKERS: BROKERS, STREAM_CONSUMERS: String(CONSUMERS), STREAM_RECORD_INTERVAL_MS: "100", STREAM_HEARTBEAT_INTERVAL_MS: "100" });
  await runStream(host, name, name, { id: name, pipeline: name, kind: "stream", status: "STARTING" }, { settings });
  return N / ((doneAt - started) / 1000);
}

const ROUNDS = 3;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const fmt = (n: number) => Math.round(n).toLocaleString("en").padStart(9);

await load();
console.log(`fv-streams pipeline benchmark: ${N} records (~200 B JSON), 4 partitions, ${CONSUMERS} consumer(s), ${typeof Bun !== "undefined" ? `bun ${Bun.version}` : "deno"}, median of ${ROUNDS} interleaved rounds`);
const results = { raw: [] as number[], all: [] as number[], half: [] as number[] };
for (let r = 0; r < ROUNDS; r++) {
  results.raw.push(await raw());
  results.all.push(await pipeline("price >= 0"));
  results.half.push(await pipeline("price > 100"));
}
const rawRate = median(results.raw);
console.log(`raw pass-through (consume → produce, no transform) ${fmt(rawRate)} records/s   1.00`);
console.log(`fv-streams, filter keeps all + computed column      ${fmt(median(results.all))} records/s   ${(median(results.all) / rawRate).toFixed(2)}`);
console.log(`fv-streams, filter keeps ~50% + computed column     ${fmt(median(results.half))} records/s   ${(median(results.half) / rawRate).toFixed(2)}`);
process.exit(0);
