// temporary micro-benchmark (not committed): OperatorTasks restore decode rate on fake records
import type { Admin, InboundRecord } from "../src/kafka/port.ts";
import { emptyCounters } from "../src/loop/counters.ts";
import { OperatorTasks } from "../src/loop/operator-tasks.ts";
import { compileTopology } from "../src/topology/compile-topology.ts";
const N = Number(process.argv[2] ?? 300000);
const stage = compileTopology({ stages: [{ inputs: ["in"], output: "out", steps: [{ op: "windowedAggregate", timeColumn: "ts", windowMs: 3_600_000, groupBy: ["key"], aggs: [{ op: "count" }, { op: "sum", column: "qty" }] }] }] }).stages[0]!;
const enc = new TextEncoder();
const parts: Uint8Array[] = [];
const recs: Array<[number, number, number, number]> = [];
let pos = 0;
const push = (s: string) => { const b = enc.encode(s); parts.push(b); const at = pos; pos += b.length; return [at, b.length] as const; };
const T = 1_717_000_000_000 - (1_717_000_000_000 % 3_600_000);
for (let i = 0; i < N; i++) {
  const k = push(`0/w:${T}:"k${i}"`);
  const v = push(JSON.stringify({ start: T, group: [`k${i}`], seq: i, acc: [1, 1 + (i % 50)] }));
  recs.push([k[0], k[1], v[0], v[1]]);
}
const k = push(`0/\u0000offsets`); const v = push(`{"in":"${N}"}`); recs.push([k[0], k[1], v[0], v[1]]);
const buf = Buffer.concat(parts);
const records: InboundRecord[] = recs.map(([ka, kl, va, vl], i) => ({ topic: "s", partition: 0, offset: BigInt(i), timestamp: 0n, headers: [], key: buf.subarray(ka, ka + kl), value: buf.subarray(va, va + vl) }));
for (let round = 0; round < 5; round++) {
  const admin = { readPartition: async () => records } as unknown as Admin;
  const tasks = new OperatorTasks([stage], admin, { stateTopic: "s", idlePartitionMs: 10_000, maxStateKeys: 10_000_000 }, emptyCounters());
  tasks.setStageTopics(stage, ["in"]);
  Bun.gc(true);
  const t0 = performance.now();
  const task = await tasks.task(stage, 0);
  const ms = performance.now() - t0;
  console.log(`round ${round}: ${N} records in ${ms.toFixed(0)} ms = ${Math.round(N / ms * 1000)}/s keys=${task.op.stateSize().keys}`);
}
