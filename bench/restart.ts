/**
 * Restart cost of a stateful process holding many keys, with the local state store
 * (STREAM_STATE_DIR) on and off: a lastN per key (one state key per key, an output row per input
 * row) over a 4-partition input keyed by the grouped column. Per scenario, one process reads the
 * whole input, then is stopped while a trickle of new rows goes on:
 *
 *   - SIGTERM, at-least-once (a clean stop: its last checkpoint is in the store);
 *   - kill -9, exactly-once (its open transaction is aborted; the store holds only what committed).
 *
 * A new process is started at once (same STREAM_INSTANCE_ID, so it takes the partitions without
 * waiting for the group). Printed: the time from its start to its first output record, and its
 * restore figures (changelog records read, entries taken from the store, restore time).
 *
 * Then failover: two processes (own STREAM_STATE_DIR each, exactly-once), standby replicas 1 or
 * 0; the owner of half the partitions is killed -9 while rows trickle in; printed: the time from
 * the moment the survivor's build record shows it owns every partition to its first output on the
 * killed one's partitions, and what its restore read.
 *
 *   bun bench/restart.ts [keys=1000000] [restart,failover]
 *   FAILOVER_REPLICAS=0,0,0 bun bench/restart.ts 200000 failover   # the failover runs to make
 *
 * A failover run prints the output topic and the moment of the kill: `scripts/kafka.sh
 * transactions <topic>` then shows whether the killed member left a transaction open (see
 * docs/exactly-once.md, "What happens on each failure").
 *
 * Figures are printed, nothing is asserted; compare store on and off within this run.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { BuildRecord } from "../src/control/types.ts";
import { type CliRun, lastRecord, logsOf, startCli, waitFor } from "../test/helpers/cli.ts";
import { transformFile } from "../test/helpers/pipelines.ts";
import { BROKERS, client, nextName, runtimeName } from "./lib.ts";

const KEYS = Number(process.argv[2] ?? 1_000_000);
const PARTS = (process.argv[3] ?? "restart,failover").split(",");
const PARTITIONS = 4;
const BASE = 1_717_000_000_000;
const metricsOf = (run: CliRun) => lastRecord(run.records)?.metrics as NonNullable<BuildRecord["metrics"]> | undefined;

async function load(topic: string, from: number, to: number): Promise<void> {
  const producer = client.producer({ clientId: "bench-loader" });
  for (let i = from; i < to; i += 5000) {
    const batch = [];
    for (let j = i; j < Math.min(to, i + 5000); j++) batch.push({ topic, key: `k${j % KEYS}`, value: JSON.stringify({ key: `k${j % KEYS}`, v: j, ts: BASE + j }) });
    await producer.send(batch);
  }
  await producer.close();
}

/**
 * Watches the output: `from()` takes its end offsets now (call it once the stopped process has
 * exited); `first` resolves with the time of the first record past them (on `partitions`, when given).
 */
function firstOutput(topic: string, partitions?: number[]) {
  const consumer = client.consumer({ groupId: nextName("bench-restart-watch"), clientId: "bench-restart-watch", topics: [topic], offsetReset: "latest" });
  let running = true;
  let ends: Map<number, bigint> | undefined;
  const started = consumer.start();
  const first = (async () => {
    await started;
    while (running) {
      const batch = await consumer.poll(100, 20);
      if (ends && batch.some((r) => r.offset >= (ends!.get(r.partition) ?? 0n) && (!partitions || partitions.includes(r.partition)))) return Date.now();
    }
    return NaN;
  })().finally(() => void consumer.close().catch(() => {}));
  const from = async () => void (ends = new Map((await consumer.endOffsets()).map((e) => [e.partition, e.offset])));
  return { started, first, from, stop: () => void (running = false) };
}

async function scenario(input: string, store: boolean, stop: "SIGTERM" | "SIGKILL") {
  const name = nextName("bench-restart");
  const output = `${name}-out`;
  const stateDir = mkdtempSync(join(tmpdir(), "fv-bench-state-"));
  const file = transformFile(name, input, output, { op: "lastN", timeColumn: "ts", n: 1, column: "v", groupBy: ["key"], repartition: false, allowedLatenessMs: 10_000_000_000 });
  const env = {
    STREAM_BROKERS: BROKERS,
    STREAM_EXACTLY_ONCE: String(stop === "SIGKILL"),
    STREAM_INSTANCE_ID: name,
    STREAM_STATE_DIR: store ? stateDir : "off",
    STREAM_STATE_MAX_KEYS: String(KEYS * 2),
    STREAM_RECORD_INTERVAL_MS: "200",
  };
  const firstRun = startCli(["run", file], { env, runtime: "bun" });
  await waitFor(() => (metricsOf(firstRun)?.stateKeys ?? 0) >= KEYS || firstRun.child.exitCode !== null, 600_000, "the first run to hold every key");
  if (firstRun.child.exitCode !== null) throw new Error(`the first run ended: ${logsOf(firstRun, 30)}`);
  // A trickle of new rows (checkpoints go on every second): the stop lands mid-stream.
  let trickling = true;
  let next = KEYS;
  const trickle = (async () => {
    while (trickling) {
      await load(input, next, next + 200);
      next += 200;
      await new Promise((r) => setTimeout(r, 100));
    }
  })();
  await new Promise((r) => setTimeout(r, 2500));
  const watch = firstOutput(output);
  await watch.started;
  firstRun.child.kill(stop);
  await firstRun.exited;
  await watch.from();
  const startedAt = Date.now();
  const restart = startCli(["run", file], { env, runtime: "bun" });
  let firstAt: number;
  try {
    firstAt = await Promise.race([watch.first, new Promise<number>((_, reject) => setTimeout(() => reject(new Error("no output within 120 s")), 120_000))]);
  } catch (error) {
    console.log(logsOf(restart, 30));
    throw error;
  }
  await waitFor(() => (metricsOf(restart)?.restoreMs ?? 0) > 0 && !(metricsOf(restart)?.partitions ?? []).some((p) => p.restoring), 120_000, "the restore figures");
  const m = metricsOf(restart)!;
  trickling = false;
  await trickle;
  watch.stop();
  restart.child.kill("SIGTERM");
  await restart.exited;
  rmSync(stateDir, { recursive: true, force: true });
  return { firstOutputMs: firstAt - startedAt, restored: m.restoredRecords, fromStore: m.restoredFromStore, restoreMs: m.restoreMs };
}

async function failover(input: string, replicas: number) {
  const name = nextName("bench-failover");
  const output = `${name}-out`;
  const file = transformFile(name, input, output, { op: "lastN", timeColumn: "ts", n: 1, column: "v", groupBy: ["key"], repartition: false, allowedLatenessMs: 10_000_000_000 });
  const dirs: string[] = [];
  const env = (id: string) => {
    const dir = mkdtempSync(join(tmpdir(), "fv-bench-state-"));
    dirs.push(dir);
    return {
      STREAM_BROKERS: BROKERS, STREAM_EXACTLY_ONCE: "true", STREAM_INSTANCE_ID: `${name}-${id}`, STREAM_STATE_DIR: dir,
      STREAM_STANDBY_REPLICAS: String(replicas), STREAM_STATE_MAX_KEYS: String(KEYS * 2), STREAM_RECORD_INTERVAL_MS: "100", STREAM_SESSION_TIMEOUT_MS: "6000",
    };
  };
  const a = startCli(["run", file], { env: env("a"), runtime: "bun" });
  await waitFor(() => (metricsOf(a)?.partitions ?? []).length === PARTITIONS, 60_000, "a to own every partition");
  const b = startCli(["run", file], { env: env("b"), runtime: "bun" });
  const ownedBy = (run: CliRun) => (metricsOf(run)?.partitions ?? []).map((p) => p.partition).sort();
  await waitFor(() => (metricsOf(a)?.stateKeys ?? 0) + (metricsOf(b)?.stateKeys ?? 0) >= KEYS && ownedBy(b).length > 0 && ownedBy(a).length > 0, 600_000, "both to hold every key between them");
  const victim = ownedBy(a);
  if (replicas > 0) {
    await waitFor(() => victim.every((p) => (metricsOf(b)?.standbyPartitions ?? []).some((s) => s.partition === p && s.lag < 1000)), 300_000, "b's standby copies caught up");
  }
  let trickling = true;
  let next = KEYS;
  const trickle = (async () => {
    while (trickling) {
      await load(input, next, next + 200);
      next += 200;
      await new Promise((r) => setTimeout(r, 100));
    }
  })();
  await new Promise((r) => setTimeout(r, 1500));
  const watch = firstOutput(output, victim);
  await watch.started;
  const restoredBefore = metricsOf(b)!.restoredRecords;
  const fromStoreBefore = metricsOf(b)!.restoredFromStore;
  console.log(`  killing the owner of ${victim.join(",")} at ${new Date().toISOString()} (output ${output})`);
  a.child.kill("SIGKILL");
  await a.exited;
  await watch.from();
  await waitFor(() => ownedBy(b).length === PARTITIONS, 60_000, "b to own every partition");
  const movedAt = Date.now();
  const firstAt = await Promise.race([watch.first, new Promise<number>((_, reject) => setTimeout(() => reject(new Error("no output within 120 s")), 120_000))]);
  await waitFor(() => !(metricsOf(b)?.partitions ?? []).some((p) => p.restoring), 120_000, "b's restores");
  const m = metricsOf(b)!;
  trickling = false;
  await trickle;
  watch.stop();
  b.child.kill("SIGTERM");
  await b.exited;
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  return { firstOutputMs: Math.max(0, firstAt - movedAt), restored: m.restoredRecords - restoredBefore, fromStore: m.restoredFromStore - fromStoreBefore };
}

console.log(`restart of one process holding ${KEYS.toLocaleString("en")} keys (${runtimeName()}, lastN per key, ${PARTITIONS} partitions)\n`);
const input = nextName("bench-restart-in");
const admin = client.admin({ clientId: "bench-admin" });
await admin.createTopics([{ topic: input, partitions: PARTITIONS }]);
await admin.close();
await load(input, 0, KEYS);
const results: Record<string, Awaited<ReturnType<typeof scenario>>> = {};
for (const stop of PARTS.includes("restart") ? (["SIGTERM", "SIGKILL"] as const) : []) {
  for (const store of [true, false]) {
    const label = `${stop === "SIGTERM" ? "SIGTERM, at-least-once" : "kill -9, exactly-once"}, store ${store ? "on " : "off"}`;
    const r = (results[label] = await scenario(input, store, stop));
    console.log(`${label}: first output ${r.firstOutputMs} ms after the restart; restore read ${r.restored.toLocaleString("en")} changelog records and ${r.fromStore.toLocaleString("en")} stored entries in ${r.restoreMs} ms`);
  }
}
const ratio = (stop: string) => {
  const on = results[`${stop}, store on `]!.firstOutputMs;
  const off = results[`${stop}, store off`]!.firstOutputMs;
  return `${(off / on).toFixed(1)}× sooner with the store (${on} vs ${off} ms)`;
};
if (PARTS.includes("restart")) console.log(`\nSIGTERM: ${ratio("SIGTERM, at-least-once")}\nkill -9: ${ratio("kill -9, exactly-once")}`);
if (PARTS.includes("failover")) {
  console.log("");
  const runs: Record<number, Awaited<ReturnType<typeof failover>>> = {};
  for (const replicas of (process.env.FAILOVER_REPLICAS ?? "1,0").split(",").map(Number)) {
    const r = (runs[replicas] = await failover(input, replicas));
    console.log(`failover, exactly-once, STREAM_STANDBY_REPLICAS=${replicas}: first output on the killed owner's partitions ${r.firstOutputMs} ms after the survivor owns them; its restore read ${r.restored.toLocaleString("en")} changelog records and ${r.fromStore.toLocaleString("en")} stored entries`);
  }
  if (runs[0] && runs[1]) console.log(`failover: ${(runs[0]!.firstOutputMs / Math.max(1, runs[1]!.firstOutputMs)).toFixed(1)}× sooner with a standby (${runs[1]!.firstOutputMs} vs ${runs[0]!.firstOutputMs} ms)`);
}
process.exit(0);
