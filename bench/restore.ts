/**
 * State restore rate as the key count grows: for each key count K, a windowedAggregate pipeline
 * (one row per key, one window, so K live state keys, behind a repartition hop as the rows are
 * grouped by a column) runs once over a fresh 4-partition input and checkpoints its changelog;
 * then, in one run:
 *
 *   - the engine restarted three ways (one new row per partition makes every partition's task
 *     restore), each with its build record's restoredRecords ÷ restoreMs, the figure users see:
 *     here, with its local store (STREAM_STATE_DIR kept: only the changelog's tail is read); on a
 *     new machine (an empty STREAM_STATE_DIR: the whole changelog is read into the store); and
 *     with the store off (STREAM_STATE_DIR=off: the whole changelog is decoded into memory);
 *     and, for each, the wall time from the start until the state is restored and (with a
 *     store) the store holds all of it, as a new machine's store is written behind the restore;
 *   - the parts of it, per partition: admin.readPartition (read_committed, up to the end; with our
 *     Fetch parser, the engine's, and again with the library's) and
 *     decode + op.restore;
 *   - Kafka's ConsumerPerformance reading the same changelog topic (the read ceiling), when the
 *     Java side is built (bash bench/peers/build.sh).
 *
 *   bun bench/restore.ts [keys=300000,3000000]
 *
 * Figures are printed, nothing is asserted; ratios are within this run.
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fetchParsing } from "../src/kafka/platformatic/fetch-parser.ts";
import { BROKERS, client, fmt, nextName, runEngine, runtimeName } from "./lib.ts";

const KEY_COUNTS = (process.argv[2] ?? "300000,3000000").split(",").map(Number);
const PARTITIONS = 4;
const BASE = 1_717_000_000_000;
const ROOT = resolve(import.meta.dirname, "..");
const KS_DIR = join(ROOT, "bench/peers/kafka-streams");
const step = { op: "windowedAggregate", timeColumn: "ts", windowMs: 3_600_000, groupBy: ["key"], aggs: [{ op: "count" }, { op: "sum", column: "qty" }] };

async function load(topic: string, keys: number): Promise<void> {
  const admin = client.admin({ clientId: "bench-admin" });
  await admin.createTopics([{ topic, partitions: PARTITIONS }]);
  await admin.close();
  const producer = client.producer({ clientId: "bench-loader" });
  for (let i = 0; i < keys; i += 5000) {
    const batch = [];
    for (let j = i; j < Math.min(keys, i + 5000); j++) batch.push({ topic, key: `k${j}`, value: JSON.stringify({ key: `k${j}`, qty: 1 + (j % 50), ts: BASE + (j % 1000) }) });
    await producer.send(batch);
  }
  await producer.close();
}

function consumerPerformance(topic: string, n: number): number | undefined {
  if (!existsSync(join(KS_DIR, "target/lib"))) return undefined;
  const r = spawnSync("java", ["-Xmx1g", `-Dlog4j2.configurationFile=${KS_DIR}/log4j2.properties`, "-cp", `${KS_DIR}/target/lib/*`, "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", BROKERS, "--topic", topic, "--num-records", String(n)], { encoding: "utf8", maxBuffer: 64 << 20 });
  const lines = r.stdout.trim().split("\n");
  const header = lines.findIndex((l) => l.startsWith("start.time"));
  if (header < 0) return undefined;
  const cols = lines[header]!.split(",").map((s) => s.trim());
  const vals = lines[header + 1]!.split(",").map((s) => s.trim());
  return Number(vals[cols.indexOf("nMsg.sec")]);
}

console.log(`restore rate by key count (${runtimeName()}, windowedAggregate, ${PARTITIONS} partitions)\n`);
for (const keys of KEY_COUNTS) {
  const name = nextName("bench-restore");
  const input = `${name}-in`;
  await load(input, keys);
  // Done once every key is in the state: the rows cross a repartition hop (grouped by a column) first.
  const here = mkdtempSync(join(tmpdir(), "fv-bench-restore-"));
  const first = await runEngine(name, input, keys, [step], { STREAM_STATE_DIR: here }, (m) => m.stateKeys >= keys);
  const stateTopic = `fv-state-${name}`;
  const restarts: Array<[string, string, NonNullable<Awaited<ReturnType<typeof runEngine>>["final"]["metrics"]>, number]> = [];
  const fresh = mkdtempSync(join(tmpdir(), "fv-bench-restore-"));
  for (const [label, dir] of [["here (store kept)", here], ["new machine (empty store)", fresh], ["store off", "off"]] as const) {
    // The restart: one new row per partition.
    const round = restarts.length + 1;
    const producer = client.producer({ clientId: "bench-restart" });
    await producer.send(Array.from({ length: PARTITIONS }, (_, p) => ({ topic: input, partition: p, key: `restart${round}-${p}`, value: JSON.stringify({ key: `restart${round}-${p}`, qty: 1, ts: BASE }) })));
    await producer.close();
    // Each restart stands for a fresh process: the last run's state is collected first, not while this one restores.
    (globalThis as { Bun?: { gc(force: boolean): void } }).Bun?.gc(true);
    // Done once the state is restored and, with a store, the store holds all of it (a new
    // machine's store is written behind the restore): the wall time a user waits for both.
    const stored = (m: NonNullable<Awaited<ReturnType<typeof runEngine>>["final"]["metrics"]>) =>
      dir === "off" || m.partitions.reduce((sum, p) => sum + (p.storeKeys ?? 0), 0) >= keys + PARTITIONS * round;
    const restart = await runEngine(name, input, PARTITIONS, [step], { STREAM_STATE_DIR: dir }, (m) => m.stateKeys >= keys + PARTITIONS * round && stored(m));
    restarts.push([label, dir, restart.final.metrics!, PARTITIONS / restart.total]);
  }
  rmSync(here, { recursive: true, force: true });
  rmSync(fresh, { recursive: true, force: true });
  // The parts, per partition, in this process.
  const admin = client.admin({ clientId: "bench-restore" });
  const readAll = async () => {
    let ms = 0;
    let n = 0;
    for (let p = 0; p < PARTITIONS; p++) {
      const t0 = performance.now();
      n += (await admin.readPartition(stateTopic, p)).length;
      ms += performance.now() - t0;
    }
    return { ms, n };
  };
  const { ms: readMs, n: records } = await readAll();
  fetchParsing.lean = false;
  const library = await readAll().finally(() => (fetchParsing.lean = true));
  await admin.close();
  const readRate = records / (readMs / 1000);
  const ceiling = consumerPerformance(stateTopic, records);
  console.log(`${keys.toLocaleString("en")} keys: first run ${fmt(first.total)} rows/s; changelog ${records.toLocaleString("en")} records`);
  for (const [label, dir, m, seconds] of restarts) {
    console.log(`  restart, ${label.padEnd(26)} restoredRecords ${m.restoredRecords.toLocaleString("en")} (from the store ${m.restoredFromStore.toLocaleString("en")}) in restoreMs ${m.restoreMs} → ${fmt(m.restoredRecords / (m.restoreMs / 1000))} records/s (restoreRecordsPerSecond ${m.restoreRecordsPerSecond}), state keys ${m.stateKeys.toLocaleString("en")}; start to ${dir === "off" ? "state restored" : "state restored and all in the store"} ${seconds.toFixed(1)} s`);
  }
  console.log(`  admin.readPartition ×${PARTITIONS}    ${Math.round(readMs)} ms → ${fmt(readRate)} records/s; with the library's Fetch parser ${Math.round(library.ms)} ms → ${fmt(library.n / (library.ms / 1000))} records/s (ours ÷ it ${(readRate / (library.n / (library.ms / 1000))).toFixed(2)})`);
  if (ceiling) {
    const ratios = restarts.map(([label, , m]) => `${label} ${(m.restoredRecords / (m.restoreMs / 1000) / ceiling).toFixed(2)}`).join(", ");
    console.log(`  ConsumerPerformance       ${fmt(ceiling)} records/s   restore ÷ it: ${ratios}; read ÷ it ${(readRate / ceiling).toFixed(2)}`);
  }
}
process.exit(0);
