/**
 * Exactly-once against at-least-once throughput for the same pipeline, at three checkpoint
 * intervals, in one run on the real local broker.
 *
 *   bun bench/exactly-once.ts [records=400000] [rounds=5]   (BENCH_INTERVALS, BENCH_WARMUP: below)
 *
 * Each cell reads the same pre-loaded topic with a fresh group. Throughput is steady processing
 * throughput: records per second from the first build record that shows a record processed to the
 * one that shows them all, both read from the input partitions' positions (the next offset to
 * process, under either guarantee), so the group join is left out, and so is the wait for the
 * last commit: that is latency (at most one interval plus the commit), not throughput, and
 * counting it would charge a 2000 ms interval up to 2 s per run. `committed` is the same run
 * timed from the same first record to the consumed counter showing them all, which
 * exactly-once moves at each commit (the conservative figure; at 2000 ms, on a run of 2-3 s, it
 * is mostly the last interval). BENCH_INTERVALS=100,500 picks the intervals. The two guarantees take turns, round after round, so machine noise hits
 * both; a cell is the median of its rounds, and `slowest / fastest` is how steady each guarantee
 * is over its rounds (at-least-once's shows the machine's own noise). Before the first
 * interval, BENCH_WARMUP rounds (default 1) of both guarantees run uncounted: the first runs of
 * the process are on code the JIT has not compiled yet (measured: the first exactly-once round
 * at 100 ms ran at 244k rows/s, the other four at 317–369k). BENCH_ONE_PRODUCER=1 adds a cell
 * per round: exactly-once with one transactional producer. Nothing is asserted.
 */
import { fmt, load, median, nextName, runtimeName, timeEngine } from "./lib.ts";

const N = Number(process.argv[2] ?? 400_000);
const ROUNDS = Number(process.argv[3] ?? 5);
const input = nextName("bench-eos-in");
const steps = [{ op: "filter", expression: "price > 100" }, { op: "applyExpression", column: "notional", expression: "price * qty" }];

await load(input, N);
console.log(`exactly-once vs at-least-once: ${N} records (~200 B JSON), 4 partitions, 1 consumer, ${ROUNDS} rounds, ${runtimeName()}`);
console.log("checkpoint interval | at-least-once | exactly-once | eos / alos | eos rounds               | eos slowest / fastest | alos slowest / fastest | eos / alos, committed");
// Records processed: the sum of the input partitions' positions (a fresh group starts at 0).
const processed = (m: { partitions: Array<{ topic: string; offset?: number }> }) => m.partitions.reduce((sum, p) => sum + (p.topic === input ? (p.offset ?? 0) : 0), 0);

/**
 * One run, timed both ways from the first record processed: to the last one processed
 * (processing), and to the last one committed (committed: the consumed counter, which
 * exactly-once moves at each commit, so the last interval and its commit are charged too).
 */
async function cell(env: Record<string, string>): Promise<{ processing: number; committed: number }> {
  let first = 0, firstCount = 0, processedAt = 0, committedAt = 0;
  await timeEngine(input, N, steps, env, (m) => {
    const now = performance.now();
    const p = processed(m);
    if (!first && p > 0) [first, firstCount] = [now, p];
    if (!processedAt && p >= N) processedAt = now;
    if (!committedAt && m.consumed >= N) committedAt = now;
    return m.consumed >= N;
  });
  const rate = (at: number) => (N - firstCount) / ((at - first) / 1000);
  return { processing: rate(processedAt), committed: rate(committedAt) };
}

const spread = (xs: number[]) => Math.min(...xs) / Math.max(...xs);

const intervals = (process.env.BENCH_INTERVALS ?? "100,500,2000").split(",");
/** BENCH_ONE_PRODUCER=1: each round also runs exactly-once with one transactional producer (STREAM_TRANSACTION_PRODUCERS=1), the design before 2026-12-07. */
const BOTH = process.env.BENCH_ONE_PRODUCER === "1";
for (let round = 0; round < Number(process.env.BENCH_WARMUP ?? 1); round++) {
  await cell({ STREAM_CHECKPOINT_INTERVAL_MS: intervals[0]! });
  await cell({ STREAM_CHECKPOINT_INTERVAL_MS: intervals[0]!, STREAM_EXACTLY_ONCE: "true" });
}
for (const interval of intervals) {
  const alos: Array<{ processing: number; committed: number }> = [];
  const eos: Array<{ processing: number; committed: number }> = [];
  const single: Array<{ processing: number; committed: number }> = [];
  for (let round = 0; round < ROUNDS; round++) {
    alos.push(await cell({ STREAM_CHECKPOINT_INTERVAL_MS: interval }));
    eos.push(await cell({ STREAM_CHECKPOINT_INTERVAL_MS: interval, STREAM_EXACTLY_ONCE: "true" }));
    if (BOTH) single.push(await cell({ STREAM_CHECKPOINT_INTERVAL_MS: interval, STREAM_EXACTLY_ONCE: "true", STREAM_TRANSACTION_PRODUCERS: "1" }));
  }
  const m = (xs: Array<{ processing: number; committed: number }>, k: "processing" | "committed") => median(xs.map((x) => x[k]));
  const rounds = eos.map((x) => x.processing);
  console.log(
    `${`${interval} ms`.padStart(19)} | ${fmt(m(alos, "processing"))}/s    | ${fmt(m(eos, "processing"))}/s   | ${(m(eos, "processing") / m(alos, "processing")).toFixed(2).padStart(10)} | ` +
      `${rounds.map((x) => Math.round(x / 1000) + "k").join(" ").padEnd(24)} | ${spread(rounds).toFixed(2).padStart(21)} | ${spread(alos.map((x) => x.processing)).toFixed(2).padStart(22)} | ` +
      `${(m(eos, "committed") / m(alos, "committed")).toFixed(2).padStart(21)}` +
      (BOTH ? ` | one producer: ${fmt(m(single, "processing"))}/s, ${(m(single, "processing") / m(alos, "processing")).toFixed(2)} of at-least-once, rounds ${single.map((x) => Math.round(x.processing / 1000) + "k").join(" ")}` : ""),
  );
}
process.exit(0);
