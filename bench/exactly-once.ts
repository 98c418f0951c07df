/**
 * Exactly-once against at-least-once throughput for the same pipeline, at three checkpoint
 * intervals, in one run on the real local broker.
 *
 *   bun bench/exactly-once.ts [records=200000]
 *
 * Each cell reads the same pre-loaded topic with a fresh group; records/s from start to the last
 * record processed (exactly-once counts a record when its transaction commits). Ratios compare
 * exactly-once with at-least-once at the same interval. Nothing is asserted.
 */
import { fmt, load, nextName, runtimeName, timeEngine } from "./lib.ts";

const N = Number(process.argv[2] ?? 200_000);
const input = nextName("bench-eos-in");
const steps = [{ op: "filter", expression: "price > 100" }, { op: "applyExpression", column: "notional", expression: "price * qty" }];

await load(input, N);
console.log(`exactly-once vs at-least-once: ${N} records (~200 B JSON), 4 partitions, 1 consumer, ${runtimeName()}`);
console.log("checkpoint interval | at-least-once | exactly-once | eos / alos");
for (const interval of ["100", "500", "2000"]) {
  const alos = await timeEngine(input, N, steps, { STREAM_CHECKPOINT_INTERVAL_MS: interval });
  const eos = await timeEngine(input, N, steps, { STREAM_CHECKPOINT_INTERVAL_MS: interval, STREAM_EXACTLY_ONCE: "true" });
  console.log(`${`${interval} ms`.padStart(19)} | ${fmt(alos)}/s    | ${fmt(eos)}/s   | ${(eos / alos).toFixed(2)}`);
}
process.exit(0);
