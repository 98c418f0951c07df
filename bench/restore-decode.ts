/**
 * The restore's decode alone, in memory (no Kafka): a windowedAggregate's changelog of K keys,
 * made by the operator itself, read back by OperatorTasks (decode + op.restore), store off.
 * Prints records per second over a few rounds; nothing is asserted.
 *
 *   bun bench/restore-decode.ts [keys=300000] [rounds=5]
 */
import type { Admin, InboundRecord, ReadPartitionOptions } from "../src/kafka/port.ts";
import { emptyCounters } from "../src/loop/counters.ts";
import { OperatorTasks } from "../src/loop/operator-tasks.ts";
import { compileTopology } from "../src/topology/compile-topology.ts";

const KEYS = Number(process.argv[2] ?? 300_000);
const ROUNDS = Number(process.argv[3] ?? 5);
const T0 = 1_717_000_000_000;
const stage = compileTopology({
  stages: [{ inputs: ["in"], output: "out", steps: [{ op: "windowedAggregate", timeColumn: "ts", windowMs: 60_000, groupBy: ["cust"], aggs: [{ op: "count" }, { op: "sum", column: "qty" }] }] }],
}).stages[0]!;
const encoder = new TextEncoder();
const log: InboundRecord[] = [];
const admin = {
  readPartition: async (_topic: string, _partition: number, options: ReadPartitionOptions = {}) => {
    const end = BigInt(log.length);
    options.onProgress?.({ position: end, start: 0n, end, logEnd: end });
    return log;
  },
} as unknown as Admin;
const tasksOf = () => {
  const tasks = new OperatorTasks([stage], admin, { stateTopic: "fv-state-b", idlePartitionMs: 60_000, maxStateKeys: 100_000_000 }, emptyCounters());
  tasks.setStageTopics(stage, ["in"]);
  return tasks;
};

// The changelog, as the operator writes it: one row per key, checkpointed every 10k rows.
const writer = tasksOf();
const task = await writer.task(stage, 0);
for (let i = 0; i < KEYS; i++) {
  writer.process(task, { topic: "in", partition: 0, offset: BigInt(i), timestamp: 0n, key: null, value: null, headers: [] }, { cust: `customer-${i}`, qty: i % 50, ts: T0 + (i % 1000) }, 0);
  if ((i + 1) % 10_000 === 0 || i === KEYS - 1) {
    for (const r of writer.drainChangelog()) {
      log.push({ topic: r.topic, partition: 0, offset: BigInt(log.length), timestamp: 0n, headers: [], key: encoder.encode(String(r.key)), value: r.value === null ? null : encoder.encode(String(r.value)) });
    }
  }
}
await writer.close();
console.log(`restore decode: ${KEYS.toLocaleString("en")} keys, ${log.length.toLocaleString("en")} changelog records, ${process.versions.bun ? `bun ${process.versions.bun}` : `node ${process.versions.node}`}`);
for (let round = 1; round <= ROUNDS; round++) {
  const tasks = tasksOf();
  const started = performance.now();
  const restored = await tasks.task(stage, 0);
  const ms = performance.now() - started;
  console.log(`  round ${round}: ${ms.toFixed(0)} ms, ${Math.round(log.length / (ms / 1000)).toLocaleString("en")} records/s, ${restored.op.stateKeys().toLocaleString("en")} state keys`);
  await tasks.close();
}
