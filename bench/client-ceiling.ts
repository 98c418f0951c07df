/**
 * Where fv-streams' own Kafka client stands against Kafka's ceiling, one half at a time, in one
 * run: Kafka's ProducerPerformance and ConsumerPerformance (Java) against our client producing
 * only, consuming only, and passing through (consume → produce unchanged → commit every second,
 * the loop of bench/peers/passthrough.ts). Every figure is rows/s of ~200-byte rows over a
 * 4-partition topic; ratios are within this run. Nothing is asserted.
 *
 * Our consume and pass-through run twice: with our Fetch parser (the engine's) and with the library's.
 *
 *   bun bench/client-ceiling.ts [rows=500000] [rounds=3]
 *   CPU_PROFILE=consume bun --cpu-prof bench/client-ceiling.ts 500000 1    (one phase only)
 *
 * Needs the Java side built (bash bench/peers/build.sh: its classpath carries kafka-tools).
 */
import { spawnSync } from "node:child_process";
import { join, resolve } from "node:path";
import { fetchParsing } from "../src/kafka/platformatic/fetch-parser.ts";
import type { OutboundRecord } from "../src/kafka/port.ts";
import { BROKERS, client, fmt, load, median, nextName, row } from "./lib.ts";

const ROOT = resolve(import.meta.dirname, "..");
const N = Number(process.argv[2] ?? 500_000);
const ROUNDS = Number(process.argv[3] ?? 3);
const ONLY = process.env.CPU_PROFILE;
const KS_DIR = join(ROOT, "bench/peers/kafka-streams");
const CLASSPATH = `${KS_DIR}/target/fv-bench-peers-0.jar:${KS_DIR}/target/lib/*`;

function java(cls: string, args: string[]): string {
  const r = spawnSync("java", ["-Xmx512m", `-Dlog4j2.configurationFile=${KS_DIR}/log4j2.properties`, "-cp", CLASSPATH, cls, ...args], { encoding: "utf8", maxBuffer: 64 << 20 });
  if (r.status !== 0) throw new Error(`${cls} exited ${r.status}: ${r.stderr.slice(-800)}`);
  return r.stdout;
}

async function createTopic(topic: string): Promise<void> {
  const admin = client.admin({ clientId: "cc-admin" });
  await admin.createTopics([{ topic, partitions: 4 }]);
  await admin.close();
}

async function producerPerformance(): Promise<number> {
  const topic = nextName("cc-pp");
  await createTopic(topic);
  const out = java("org.apache.kafka.tools.ProducerPerformance", ["--topic", topic, "--num-records", String(N), "--record-size", "200", "--throughput", "-1", "--command-property", `bootstrap.servers=${BROKERS}`, "acks=all"]);
  const m = /records sent, ([\d.]+) records\/sec/.exec(out.trim().split("\n").at(-1) ?? "");
  if (!m) throw new Error(`ProducerPerformance: no result in ${out.slice(-500)}`);
  return Number(m[1]);
}

function consumerPerformance(topic: string): number {
  const out = java("org.apache.kafka.tools.ConsumerPerformance", ["--bootstrap-server", BROKERS, "--topic", topic, "--num-records", String(N)]);
  const lines = out.trim().split("\n");
  const header = lines.findIndex((l) => l.startsWith("start.time"));
  const cols = lines[header]!.split(",").map((s) => s.trim());
  const vals = lines[header + 1]!.split(",").map((s) => s.trim());
  return Number(vals[cols.indexOf("nMsg.sec")]);
}

/** Our producer: N rows in sends of 2,000, each awaited (as the loop sends a batch). */
async function produce(): Promise<number> {
  const topic = nextName("cc-prod");
  await createTopic(topic);
  const producer = client.producer({ clientId: "cc-producer" });
  const rows = Array.from({ length: 2000 }, (_, i) => row(i));
  await producer.send([{ topic, key: "warm", value: "{}" }]);
  const started = performance.now();
  for (let i = 0; i < N; i += 2000) {
    const records: OutboundRecord[] = [];
    for (let j = 0; j < Math.min(2000, N - i); j++) records.push({ topic, key: `k${i + j}`, value: rows[j]! });
    await producer.send(records);
  }
  const rate = N / ((performance.now() - started) / 1000);
  await producer.close();
  return rate;
}

/** Our consumer: a fresh group reads the N rows; timed from start (group join included), as ConsumerPerformance is. */
async function consume(topic: string): Promise<number> {
  const started = performance.now();
  const consumer = client.consumer({ groupId: nextName("cc-consume"), clientId: "cc-consumer", topics: [topic], offsetReset: "earliest", maxBuffered: 4000 });
  await consumer.start();
  let seen = 0;
  while (seen < N) seen += (await consumer.poll(1000, 200)).length;
  const rate = N / ((performance.now() - started) / 1000);
  await consumer.close();
  return rate;
}

/** Consume → produce unchanged → commit every second. */
async function passThrough(topic: string): Promise<number> {
  const output = nextName("cc-pass-out");
  await createTopic(output);
  const started = performance.now();
  const consumer = client.consumer({ groupId: output, clientId: "cc-pass", topics: [topic], offsetReset: "earliest", maxBuffered: 4000 });
  const producer = client.producer({ clientId: "cc-pass-p" });
  await consumer.start();
  let seen = 0;
  let lastCommit = performance.now();
  const next = new Map<number, { topic: string; partition: number; offset: bigint }>();
  while (seen < N) {
    const batch = await consumer.poll(1000, 200);
    if (batch.length === 0) continue;
    await producer.send(batch.map((r) => ({ topic: output, key: r.key, value: r.value, headers: r.headers })));
    seen += batch.length;
    for (const r of batch) next.set(r.partition, { topic: r.topic, partition: r.partition, offset: r.offset + 1n });
    if (performance.now() - lastCommit > 1000) {
      await consumer.commit([...next.values()]);
      lastCommit = performance.now();
    }
  }
  await consumer.commit([...next.values()]);
  const rate = N / ((performance.now() - started) / 1000);
  await consumer.close();
  await producer.close();
  return rate;
}

const input = nextName("cc-in");
await load(input, N);
const phases: Array<[string, () => number | Promise<number>]> = [
  ["ProducerPerformance (Java)", producerPerformance],
  ["ConsumerPerformance (Java)", () => consumerPerformance(input)],
  ["fv produce", produce],
  ["fv consume", () => consume(input)],
  ["fv pass-through", () => passThrough(input)],
  // The same two with the library's own Fetch parser (src/kafka/platformatic/fetch-parser.ts is ours).
  ["fv consume, library parser", () => withLibraryParser(() => consume(input))],
  ["fv pass-through, library parser", () => withLibraryParser(() => passThrough(input))],
];

async function withLibraryParser(run: () => Promise<number>): Promise<number> {
  fetchParsing.lean = false;
  try {
    return await run();
  } finally {
    fetchParsing.lean = true;
  }
}
const results = new Map<string, number[]>();
for (let round = 1; round <= ROUNDS; round++) {
  for (const [name, phase] of phases) {
    if (ONLY && !name.includes(ONLY)) continue;
    const rate = await phase();
    results.set(name, [...(results.get(name) ?? []), rate]);
    console.log(`round ${round}  ${name.padEnd(28)} ${fmt(rate)} rows/s`);
  }
}
const m = (name: string) => median(results.get(name) ?? [NaN]);
const ceiling = Math.min(m("ProducerPerformance (Java)"), m("ConsumerPerformance (Java)"));
console.log(`\n${N.toLocaleString("en")} rows, median of ${ROUNDS} (Bun ${process.versions.bun ?? "-"}, ${process.versions.node ? `node ${process.versions.node}` : ""})`);
console.log(`produce       fv ${fmt(m("fv produce"))}  ÷ ProducerPerformance ${fmt(m("ProducerPerformance (Java)"))} = ${(m("fv produce") / m("ProducerPerformance (Java)")).toFixed(2)}`);
console.log(`consume       fv ${fmt(m("fv consume"))}  ÷ ConsumerPerformance ${fmt(m("ConsumerPerformance (Java)"))} = ${(m("fv consume") / m("ConsumerPerformance (Java)")).toFixed(2)}`);
console.log(`pass-through  fv ${fmt(m("fv pass-through"))}  ÷ ceiling (slower of the two) ${fmt(ceiling)} = ${(m("fv pass-through") / ceiling).toFixed(2)}`);
console.log(`our Fetch parser ÷ the library's: consume ${(m("fv consume") / m("fv consume, library parser")).toFixed(2)}, pass-through ${(m("fv pass-through") / m("fv pass-through, library parser")).toFixed(2)} (library parser: consume ${fmt(m("fv consume, library parser"))}, pass-through ${fmt(m("fv pass-through, library parser"))})`);
process.exit(0);
