/**
 * State beyond memory: one windowed count per key over many keys (every key its own group, all in
 * one day-long window), with the local store on. The input ends with one row per partition a day
 * later, which moves the watermark past the window: every window fires once its partition is
 * read. Per run: `ingest` (start to every row consumed) and `total` (start to the last output
 * row; rows/s = keys ÷ total). The output is read back afterwards (the engine stopped) and
 * checked exactly: one row per key, count 1.
 *
 *   bun bench/state-beyond-memory.ts [keys=20000000] [runs=spill] [runtime=bun]
 *     runs: comma-separated of spill (STREAM_STATE_CACHE_KEYS=100000, the default) and memory
 *     (STREAM_STATE_CACHE_KEYS=0: every key in the heap, as before state beyond memory)
 *   NODE_HEAP_MB=1024 bun bench/state-beyond-memory.ts 20000000 spill node   # Node with --max-old-space-size
 *
 * Printed per run: rows/s of the ingest and of the firing, the engine's peak RSS (VmHWM), the
 * store's keys and bytes on disk, the cache hit rate. Nothing is asserted but the exact output.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { BuildRecord } from "../src/control/types.ts";
import type { OutboundRecord } from "../src/kafka/port.ts";
import { type CliRun, lastRecord, logsOf, startCli, waitFor } from "../test/helpers/cli.ts";
import { transformFile } from "../test/helpers/pipelines.ts";
import { BROKERS, client, fmt, nextName, runtimeName } from "./lib.ts";

const KEYS = Number(process.argv[2] ?? 20_000_000);
const RUNS = (process.argv[3] ?? "spill").split(",") as Array<"spill" | "memory">;
const RUNTIME = (process.argv[4] ?? "bun") as "bun" | "node";
const PARTITIONS = 4;
const DAY = 86_400_000;
const BASE = 1_717_200_000_000 - (1_717_200_000_000 % DAY);
const metricsOf = (run: CliRun) => lastRecord(run.records)?.metrics as NonNullable<BuildRecord["metrics"]> | undefined;

async function loadInput(topic: string): Promise<void> {
  const admin = client.admin({ clientId: "bench-admin" });
  await admin.createTopics([{ topic, partitions: PARTITIONS }]);
  await admin.close();
  const producer = client.producer({ clientId: "bench-loader" });
  const started = Date.now();
  const inFlight: Promise<unknown>[] = [];
  for (let i = 0; i < KEYS; i += 10_000) {
    const batch: OutboundRecord[] = [];
    for (let j = i; j < Math.min(KEYS, i + 10_000); j++) batch.push({ topic, key: `k${j}`, value: `{"key":"k${j}","ts":${BASE + (j % 3_600_000)}}` });
    inFlight.push(producer.send(batch));
    if (inFlight.length >= 4) await inFlight.shift();
  }
  await Promise.all(inFlight);
  await producer.close();
  console.log(`loaded ${fmt(KEYS)} rows into ${topic} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
}

/** One row per partition a day later: every partition's event time passes the window's end. */
async function closeWindow(topic: string): Promise<void> {
  const producer = client.producer({ clientId: "bench-closer" });
  await producer.send(Array.from({ length: PARTITIONS }, (_, p) => ({ topic, partition: p, key: `close-${p}`, value: `{"key":"close-${p}","ts":${BASE + 2 * DAY}}` })));
  await producer.close();
}

/** Exited, or killed by a signal (an out-of-memory abort ends a run with a signal, not an exit code). */
const engineEnded = (run: CliRun) => run.child.exitCode !== null || run.child.signalCode !== null;

/** From /proc: peak RSS, and the resident memory now that is anonymous (heap, native buffers) and file-backed (LMDB's mapped store). */
function memoryMb(pid: number): { peak: number; anon: number; file: number } {
  const field = (text: string, name: string) => Math.round(Number(new RegExp(`${name}:\\s+(\\d+) kB`).exec(text)?.[1] ?? NaN) / 1024);
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    return { peak: field(status, "VmHWM"), anon: field(status, "RssAnon"), file: field(status, "RssFile") };
  } catch {
    return { peak: NaN, anon: NaN, file: NaN };
  }
}

/** Sum of the output topic's end offsets. */
async function outputCount(consumer: ReturnType<typeof client.consumer>): Promise<number> {
  return (await consumer.endOffsets()).reduce((sum, e) => sum + Number(e.offset), 0);
}

async function verify(output: string): Promise<string> {
  const seen = new Uint8Array(KEYS);
  const consumer = client.consumer({ groupId: nextName("bench-verify"), clientId: "bench-verify", topics: [output], offsetReset: "earliest" });
  await consumer.start();
  let rows = 0;
  let wrong = 0;
  let dup = 0;
  const decoder = new TextDecoder();
  while (rows < KEYS) {
    const batch = await consumer.poll(20_000, 1000);
    for (const r of batch) {
      rows++;
      const row = JSON.parse(decoder.decode(r.value!)) as { key: string; n: number; windowStart: number };
      const i = Number(row.key.slice(1));
      if (row.n !== 1 || row.windowStart !== BASE || !(i >= 0 && i < KEYS)) wrong++;
      else if (seen[i]! > 0) dup++;
      else seen[i] = 1;
    }
  }
  await consumer.close();
  let missing = 0;
  for (let i = 0; i < KEYS; i++) if (!seen[i]) missing++;
  return `${fmt(rows)} rows, ${missing} missing, ${dup} duplicates, ${wrong} wrong`;
}

async function run(input: string, kind: "spill" | "memory") {
  const name = nextName(`bench-spill-${kind}`);
  const output = `${name}-out`;
  const stateDir = mkdtempSync(join(tmpdir(), "fv-bench-state-"));
  const file = transformFile(name, input, output, { op: "windowedAggregate", timeColumn: "ts", windowMs: DAY, groupBy: ["key"], aggs: [{ op: "count", alias: "n" }], repartition: false });
  const env = {
    STREAM_BROKERS: BROKERS,
    STREAM_STATE_DIR: stateDir,
    STREAM_STATE_MAX_KEYS: String(KEYS + 10),
    STREAM_STATE_CACHE_KEYS: kind === "spill" ? "100000" : "0",
    STREAM_RECORD_INTERVAL_MS: "1000",
    STREAM_BATCH_SIZE: "5000",
    ...(RUNTIME === "node" && process.env.NODE_HEAP_MB ? { NODE_OPTIONS: `--max-old-space-size=${process.env.NODE_HEAP_MB}` } : {}),
  };
  const watch = client.consumer({ groupId: nextName("bench-watch"), clientId: "bench-watch", topics: [output], offsetReset: "latest" });
  const started = Date.now();
  const engine = startCli(["run", file], { env, runtime: RUNTIME });
  try {
    await waitFor(() => (metricsOf(engine)?.consumed ?? 0) >= KEYS || engineEnded(engine), 3_600_000, "every row consumed");
    if (engineEnded(engine)) throw new Error(`the engine ended (${engine.child.exitCode ?? engine.child.signalCode}): ${logsOf(engine, 8)}`);
    const ingested = Date.now();
    const m = metricsOf(engine)!;
    const parts = m.partitions ?? [];
    const sum = (f: (p: (typeof parts)[number]) => number | undefined) => parts.reduce((s, p) => s + (f(p) ?? 0), 0);
    const atIngest = { memory: memoryMb(engine.child.pid!), storeKeys: sum((p) => p.storeKeys), disk: sum((p) => p.storeBytesOnDisk), cacheKeys: sum((p) => p.cacheKeys), hit: parts.map((p) => p.cacheHitRate).filter((h) => typeof h === "number") };
    await watch.start().catch(() => {});
    await waitFor(async () => (await outputCount(watch)) >= KEYS || engineEnded(engine), 3_600_000, "every window fired");
    if (engineEnded(engine)) throw new Error(`the engine ended: ${logsOf(engine, 30)}`);
    const fired = Date.now();
    const memory = memoryMb(engine.child.pid!);
    engine.child.kill("SIGTERM");
    await engine.exited;
    await watch.close().catch(() => {});
    const exact = await verify(output);
    const ingestS = (ingested - started) / 1000;
    const totalS = (fired - started) / 1000;
    console.log(
      `${kind.padEnd(6)} ${RUNTIME}: ${fmt(KEYS / totalS)} rows/s (${totalS.toFixed(1)} s from start to the last window, group join included; every row read after ${ingestS.toFixed(1)} s); ` +
        `memory when every row was read: anonymous ${atIngest.memory.anon} MiB, file-backed ${atIngest.memory.file} MiB; at the end: anonymous ${memory.anon} MiB, peak RSS ${memory.peak} MiB; store ${fmt(atIngest.storeKeys)} keys, ${(atIngest.disk / 2 ** 20).toFixed(0)} MiB on disk; ` +
        `${fmt(atIngest.cacheKeys)} in memory, hit rates ${atIngest.hit.join(" ")}; output ${exact}`,
    );
  } finally {
    if (!engineEnded(engine)) engine.child.kill("SIGKILL");
    rmSync(stateDir, { recursive: true, force: true });
  }
}

const input = nextName("bench-spill-in");
console.log(`state beyond memory: ${fmt(KEYS)} keys, one day-long window, ${PARTITIONS} partitions; bench on ${runtimeName()}, engine on ${RUNTIME}`);
await loadInput(input);
await closeWindow(input);
for (const kind of RUNS) {
  try {
    await run(input, kind);
  } catch (error) {
    console.log(`${kind.padEnd(6)} ${RUNTIME}: did not complete: ${(error as Error).message.split("\n").slice(0, 6).join(" | ")}`);
  }
}
process.exit(0);
