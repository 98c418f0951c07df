/**
 * Stateful stages through the real local broker, and what their state costs:
 *
 *   1. rows/second through a windowedAggregate stage (10k keys, 1-minute tumbling windows,
 *      count + sum) reading a pre-loaded 4-partition topic, with STREAM_CONSUMERS=1 and 2; beside
 *      it the same topic through a stage whose filter drops every row (what reading Kafka costs),
 *      and the operator in memory over the same JSON rows (parse, process, advance per 1000-row
 *      batch, one instance per partition as the engine has it; then also with the changelog
 *      drained and encoded every 20k rows);
 *   2. restore: the changelog the 1-consumer run left in fv-state-<name>, read back with
 *      admin.readPartition and fed to op.restore (decoded as OperatorTasks does), in changelog
 *      records/second; then a restart of that pipeline and its build record's restoredRecords /
 *      restoreMs;
 *   3. checkpoint cost as the state grows: drainChanges, encoding, and one producer.send of the
 *      changelog records (what an at-least-once checkpoint does for one task) with 1k / 10k /
 *      100k dirty keys, and with 1k dirty out of 100k. Before f0d25c3 the adapter sent all of it
 *      in one produce request and 100k dirty keys (9 MB) failed with MESSAGE_TOO_LARGE; the
 *      bench then reports it and times sends of 5000 records instead.
 *
 * Figures are printed, nothing is asserted. Run on a quiet machine: the broker shares the CPU.
 *
 *   node_modules/.bin/bun bench/stateful.ts [rows=500000]
 */
import * as v from "valibot";
import type { OutboundRecord } from "../src/kafka/port.ts";
import { type CompiledOperator, eventTimeOf, type Operator, operatorSteps, type StateEntry } from "../src/ops/index.ts";
import { BROKERS, client, type EngineRun, fmt, median, nextName, runEngine, runtimeName } from "./lib.ts";
import { mulberry32 as random } from "./random.ts";

const ROWS = Number(process.argv[2] ?? 500_000);
const KEYS = 10_000;
const PARTITIONS = 4;
const BATCH = 1000; // STREAM_BATCH_SIZE's default: the engine advances the watermark once per batch
const BASE = 1_717_000_000_000;
const OFFSETS_KEY = "\u0000offsets"; // OperatorTasks' covered-offsets entry

const windowedStep = {
  op: "windowedAggregate",
  timeColumn: "ts",
  windowMs: 60_000,
  groupBy: ["key"],
  aggs: [{ op: "count" }, { op: "sum", column: "price" }],
};

function compile(def: Record<string, unknown>): CompiledOperator {
  const kind = operatorSteps[def.op as string]!;
  return kind.compile(v.parse(kind.schema, def), { stage: 0, step: 0, inputs: 1 });
}
const windowed = compile(windowedStep);


/**
 * ~70-byte JSON rows over KEYS keys, 2 rows per ms of event time (a 1-minute window sees 120k
 * rows, ~12 per key), in event-time order. Keyed by `key`, so a key lives in one partition.
 */
function makeRows(n: number): Array<{ key: string; json: string }> {
  const next = random(11);
  const out: Array<{ key: string; json: string }> = [];
  for (let i = 0; i < n; i++) {
    const key = `k${Math.floor(next() * KEYS)}`;
    out.push({ key, json: JSON.stringify({ key, qty: 1 + Math.floor(next() * 50), price: Math.round(next() * 20_000) / 100, ts: BASE + Math.floor(i / 2) }) });
  }
  return out;
}

async function createTopic(topic: string, partitions: number, configs?: Record<string, string>): Promise<void> {
  const admin = client.admin({ clientId: "bench-admin" });
  try {
    await admin.createTopics([{ topic, partitions, configs }]);
  } finally {
    await admin.close();
  }
}

async function loadRows(topic: string, rows: Array<{ key: string; json: string }>): Promise<void> {
  await createTopic(topic, PARTITIONS);
  const producer = client.producer({ clientId: "bench-loader" });
  for (let i = 0; i < rows.length; i += 5000) {
    await producer.send(rows.slice(i, i + 5000).map((r) => ({ topic, key: r.key, value: r.json })));
  }
  await producer.close();
}

/**
 * The operator over the same rows in memory, as the loop drives it: one instance per partition
 * (keys spread over PARTITIONS as Kafka would), JSON parsed per row, event time read, the
 * watermark (min over partitions of max event time) advanced once per BATCH rows; with
 * `drainEvery`, the changelog drained and encoded as OperatorTasks.drainChangelog does.
 */
function inMemory(rows: Array<{ key: string; json: string }>, drainEvery: number, sizePerRow = false): { ms: number; fired: number; changelog: number } {
  // `changelog` counts the non-tombstone records encoded (and keeps the encoding from being skipped).
  const start = performance.now();
  const ops: Operator[] = Array.from({ length: PARTITIONS }, () => windowed.create());
  const maxTs = new Array<number>(PARTITIONS).fill(-Infinity);
  let fired = 0;
  let changelog = 0;
  for (let i = 0; i < rows.length; i++) {
    const { key, json } = rows[i]!;
    const p = Number(key.slice(1)) % PARTITIONS;
    const row = JSON.parse(json);
    const ts = eventTimeOf(row, "ts");
    ops[p]!.process(row, ts, 0);
    // OperatorTasks.process checks STREAM_STATE_MAX_KEYS with stateSize() after every row.
    if (sizePerRow && ops[p]!.stateSize().keys > 1_000_000) throw new Error("over the cap");
    if (ts > maxTs[p]!) maxTs[p] = ts;
    if ((i + 1) % BATCH === 0) {
      const watermark = Math.min(...maxTs);
      if (watermark > -Infinity) for (const op of ops) fired += op.advance(watermark).length;
    }
    if (drainEvery > 0 && (i + 1) % drainEvery === 0) {
      for (let q = 0; q < PARTITIONS; q++) {
        for (const entry of ops[q]!.drainChanges()) {
          const record: OutboundRecord = { topic: "state", partition: q, key: `0/${entry.key}`, value: entry.value === null ? null : JSON.stringify(entry.value) };
          changelog += record.value === null ? 0 : 1;
        }
      }
    }
  }
  return { ms: performance.now() - start, fired, changelog };
}

/** Changelog records of one partition decoded as OperatorTasks.task does, then fed to a fresh operator. */
function restoreFrom(records: Array<{ key: Uint8Array | null; value: Uint8Array | null }>): { op: Operator; entries: number } {
  const decoder = new TextDecoder();
  const entries: StateEntry[] = [];
  for (const record of records) {
    const key = record.key ? decoder.decode(record.key) : "";
    if (!key.startsWith("0/")) continue;
    const stateKey = key.slice(2);
    const value = record.value === null ? null : JSON.parse(decoder.decode(record.value));
    if (stateKey !== OFFSETS_KEY) entries.push({ key: stateKey, value });
  }
  const op = windowed.create();
  op.restore(entries);
  return { op, entries: entries.length };
}

/** The broker's reason inside a client error (e.g. MESSAGE_TOO_LARGE), else its message. */
function reasonOf(error: unknown): string {
  const seen = new Set<unknown>();
  const walk = (e: unknown): string | undefined => {
    if (!e || typeof e !== "object" || seen.has(e)) return undefined;
    seen.add(e);
    // deno-lint-ignore no-explicit-any
    const x = e as any;
    if (typeof x.apiId === "string" && x.apiId) return x.apiId;
    for (const inner of [...(x.errors ?? []), x.cause]) {
      const found = walk(inner);
      if (found) return found;
    }
    return undefined;
  };
  return walk(error) ?? (error as Error)?.message ?? String(error);
}

const ms = (x: number) => `${x.toFixed(1).padStart(8)} ms`;
const perSec = (n: number, milliseconds: number) => fmt(n / (milliseconds / 1000));

console.log(`stateful bench, ${runtimeName()}, broker ${BROKERS}, ${ROWS.toLocaleString("en")} rows over ${KEYS.toLocaleString("en")} keys`);

// ---------------------------------------------------------------------------------------------
// 1. Throughput through Kafka, and in memory.
const rows = makeRows(ROWS);
const input = nextName("bench-stateful-in");
const loadStart = performance.now();
await loadRows(input, rows);
console.log(`\n1. windowedAggregate (1-minute tumbling windows, count + sum, groupBy key) — ${ROWS.toLocaleString("en")} rows (~${Math.round(rows[0]!.json.length)} B JSON) loaded into ${input} (4 partitions) in ${((performance.now() - loadStart) / 1000).toFixed(1)} s`);
console.log("   records/s: total = from start (group join, restores) to the last record; steady = from the first record to the last");

const windowedRun = nextName("bench-windowed");
const cells: Array<[string, EngineRun]> = [];
cells.push(["filter dropping every row, 1 consumer", await runEngine(nextName("bench-drop"), input, ROWS, [{ op: "filter", expression: "qty < 0" }])]);
cells.push(["windowedAggregate, 1 consumer", await runEngine(windowedRun, input, ROWS, [windowedStep])]);
cells.push(["windowedAggregate, 2 consumers (workers)", await runEngine(nextName("bench-windowed2"), input, ROWS, [windowedStep], { STREAM_CONSUMERS: "2" })]);
for (const [label, run] of cells) {
  const m = run.final.metrics!;
  console.log(`   ${label.padEnd(48)} total ${fmt(run.total)}/s   steady ${Number.isNaN(run.steady) ? "      n/a" : fmt(run.steady)}/s   (emitted ${m.emitted.toLocaleString("en")}, commits ${m.commits}, state keys at the end ${m.stateKeys.toLocaleString("en")})`);
}

inMemory(rows.slice(0, 100_000), 0); // warm up
const memory: Record<string, Array<ReturnType<typeof inMemory>>> = { "in memory: operator": [], "in memory: operator + changelog every 20k rows": [] };
for (let r = 0; r < 3; r++) {
  memory["in memory: operator"]!.push(inMemory(rows, 0));
  memory["in memory: operator + changelog every 20k rows"]!.push(inMemory(rows, 20_000));
}
for (const [label, results] of Object.entries(memory)) {
  const t = median(results.map((x) => x.ms));
  console.log(`   ${label.padEnd(48)}       ${perSec(ROWS, t)}/s   (median of 3, ${t.toFixed(0)} ms, ${results[0]!.fired.toLocaleString("en")} window rows fired${results[0]!.changelog ? `, ${results[0]!.changelog.toLocaleString("en")} changelog values encoded` : ""})`);
}
{
  // What the engine paid until f0d25c3: OperatorTasks.process checked the key cap with
  // stateSize(), which walks the whole state, after every row (the regression test
  // "OperatorTasks.process costs about what the operator does" in stateful-operators.test.ts).
  const slice = rows.slice(0, Math.min(ROWS, 100_000));
  const plain = inMemory(slice, 0);
  const sized = inMemory(slice, 0, true);
  console.log(`   in memory, first ${slice.length.toLocaleString("en")} rows: operator ${perSec(slice.length, plain.ms)}/s; + stateSize() after every row (OperatorTasks.process before f0d25c3) ${perSec(slice.length, sized.ms)}/s`);
}

// ---------------------------------------------------------------------------------------------
// 2. Restore from the changelog the 1-consumer run wrote.
const stateTopic = `fv-state-${windowedRun}`;
console.log(`\n2. restore from ${stateTopic} (uncompacted: every checkpoint's dirty keys and tombstones)`);
{
  const admin = client.admin({ clientId: "bench-restore" });
  let records = 0;
  let bytes = 0;
  let readMs = 0;
  let restoreMs = 0;
  let keys = 0;
  let entries = 0;
  for (let p = 0; p < PARTITIONS; p++) {
    const t0 = performance.now();
    const read = await admin.readPartition(stateTopic, p);
    const t1 = performance.now();
    const restored = restoreFrom(read);
    const t2 = performance.now();
    readMs += t1 - t0;
    restoreMs += t2 - t1;
    records += read.length;
    entries += restored.entries;
    for (const r of read) bytes += (r.key?.length ?? 0) + (r.value?.length ?? 0);
    keys += restored.op.stateSize().keys;
  }
  await admin.close();
  console.log(`   ${records.toLocaleString("en")} changelog records (${(bytes / 1e6).toFixed(1)} MB, ${entries.toLocaleString("en")} state entries) → ${keys.toLocaleString("en")} live state keys`);
  console.log(`   admin.readPartition          ${ms(readMs)}  ${perSec(records, readMs)} records/s`);
  console.log(`   decode + op.restore          ${ms(restoreMs)}  ${perSec(records, restoreMs)} records/s`);
  console.log(`   together                     ${ms(readMs + restoreMs)}  ${perSec(records, readMs + restoreMs)} records/s`);
}
{
  // A restart: one new row per partition makes the loop restore each partition's task.
  const producer = client.producer({ clientId: "bench-restart" });
  await producer.send(Array.from({ length: PARTITIONS }, (_, p) => ({ topic: input, partition: p, key: `restart${p}`, value: JSON.stringify({ key: `restart${p}`, qty: 1, price: 1, ts: BASE + ROWS }) })));
  await producer.close();
  const restart = await runEngine(windowedRun, input, PARTITIONS, [windowedStep]);
  const m = restart.final.metrics!;
  console.log(`   restart of the pipeline: restoredRecords ${m.restoredRecords.toLocaleString("en")}, restoreMs ${m.restoreMs} → ${perSec(m.restoredRecords, m.restoreMs)} records/s (build record)`);
}

// ---------------------------------------------------------------------------------------------
// 3. Checkpoint cost by dirty keys, for one task (one partition of the state topic).
const ckptTopic = nextName("bench-ckpt");
await createTopic(ckptTopic, PARTITIONS, { "cleanup.policy": "compact" });
const producer = client.producer({ clientId: "bench-ckpt" });
console.log(`\n3. checkpoint of one task: drainChanges, encode, one producer.send of the changelog (acks=all) to ${ckptTopic}[0]; median of 3`);
console.log("   state keys | dirty | drainChanges |     encode |       send |      total |  changelog");
for (const [stateKeys, dirty] of [[1_000, 1_000], [10_000, 10_000], [100_000, 100_000], [100_000, 1_000]] as const) {
  const op = windowed.create();
  for (let k = 0; k < stateKeys; k++) op.process({ key: `k${k}`, ts: BASE, price: k % 100 }, BASE, 0);
  op.drainChanges();
  const times: Array<{ drain: number; encode: number; send: number; bytes: number; failed?: string; chunked?: number }> = [];
  for (let r = 0; r < 3; r++) {
    for (let k = 0; k < dirty; k++) op.process({ key: `k${k}`, ts: BASE, price: 1 }, BASE, 0);
    const t0 = performance.now();
    const changes = op.drainChanges();
    const t1 = performance.now();
    const records: OutboundRecord[] = changes.map((e) => ({ topic: ckptTopic, partition: 0, key: `0/${e.key}`, value: e.value === null ? null : JSON.stringify(e.value) }));
    records.push({ topic: ckptTopic, partition: 0, key: `0/${OFFSETS_KEY}`, value: JSON.stringify({ [input]: String(r) }) });
    const t2 = performance.now();
    let bytes = 0;
    for (const rec of records) bytes += (rec.key as string).length + ((rec.value as string | null)?.length ?? 0);
    let failed: string | undefined;
    let chunked: number | undefined;
    try {
      await producer.send(records);
    } catch (error) {
      failed = reasonOf(error);
      // What a fix would do: sends of at most 5000 records (~0.5 MB).
      const c0 = performance.now();
      for (let i = 0; i < records.length; i += 5000) await producer.send(records.slice(i, i + 5000));
      chunked = performance.now() - c0;
    }
    const t3 = performance.now();
    times.push({ drain: t1 - t0, encode: t2 - t1, send: t3 - t2, bytes, failed, chunked });
  }
  const drain = median(times.map((t) => t.drain));
  const encode = median(times.map((t) => t.encode));
  const send = median(times.map((t) => t.chunked ?? t.send));
  const note = times[0]!.failed ? `  ONE send FAILED (${times[0]!.failed}); send column: sends of 5000` : "";
  console.log(`   ${stateKeys.toLocaleString("en").padStart(10)} | ${dirty.toLocaleString("en").padStart(7)} | ${ms(drain)}  | ${ms(encode)} | ${ms(send)} | ${ms(drain + encode + send)} | ${(times[0]!.bytes / 1e6).toFixed(2).padStart(6)} MB${note}`);
}
await producer.close();
process.exit(0);
