/**
 * Exactly-once, proven by killing it: kill -9 mid-stream, a paused zombie, a broker restart.
 * A read_committed reader must find every expected record exactly once. The at-least-once crash
 * test runs the same way and may report duplicates, but must lose nothing.
 */
import { describe, expect, test } from "bun:test";
import { cpSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { InboundRecord, OutboundRecord } from "../../src/kafka/port.ts";
import { type CliRun, ENGINE_KAFKA_CLIENT, lastRecord, logsOf, runCli, startCli, TEST_ENGINE, waitFor } from "../helpers/cli.ts";
import { client, collect, createTopic, json, ownBroker, partitionCount, produce, uniqueName } from "../helpers/kafka.ts";
import { MINUTE, transformFile, windowedCountPipeline } from "../helpers/pipelines.ts";
import { readUntil } from "../helpers/streams.ts";

const row = (id: number) => ({ id, price: id % 200, qty: 1 + (id % 5), note: "x".repeat(120) });
const records = (topic: string, from: number, to: number): OutboundRecord[] =>
  Array.from({ length: to - from }, (_, i) => ({ topic, key: `k${(from + i) % 97}`, value: JSON.stringify(row(from + i)) }));
const expectedIds = (n: number) => [...Array(n).keys()].filter((id) => id % 200 > 100);

function pipeline(name: string, input: string, output: string) {
  return transformFile(name, input, output, { op: "filter", expression: "price > 100" }, { op: "applyExpression", column: "notional", expression: "price * qty" });
}

const FAST_GROUP = { STREAM_SESSION_TIMEOUT_MS: "6000", STREAM_RECORD_INTERVAL_MS: "200", STREAM_CHECKPOINT_INTERVAL_MS: "300" };

/** Counts of each id in the output, and the ids missing or seen twice. */
function tally(out: InboundRecord[], expected: number[]) {
  const counts = new Map<number, number>();
  for (const r of out) counts.set(json(r).id, (counts.get(json(r).id) ?? 0) + 1);
  const missing = expected.filter((id) => !counts.has(id));
  const duplicates = [...counts.values()].reduce((sum, n) => sum + n - 1, 0);
  const unexpected = [...counts.keys()].filter((id) => id % 200 <= 100);
  return { missing, duplicates, unexpected };
}

/** Where the copies of duplicated ids are in the output: per output partition, offset ranges of the second copies, and a few examples. */
function duplicateReport(out: InboundRecord[]): string {
  const copies = new Map<number, InboundRecord[]>();
  for (const r of out) {
    const id = json(r).id as number;
    copies.set(id, [...(copies.get(id) ?? []), r]);
  }
  const dups = [...copies].filter(([, rs]) => rs.length > 1);
  const ranges = new Map<number, { first: bigint; last: bigint; n: number; firstCopyFrom: bigint; firstCopyTo: bigint }>();
  for (const [, rs] of dups) {
    const [first, second] = rs as [InboundRecord, InboundRecord];
    const r = ranges.get(second.partition) ?? { first: second.offset, last: second.offset, n: 0, firstCopyFrom: first.offset, firstCopyTo: first.offset };
    r.n++;
    if (second.offset < r.first) r.first = second.offset;
    if (second.offset > r.last) r.last = second.offset;
    if (first.offset < r.firstCopyFrom) r.firstCopyFrom = first.offset;
    if (first.offset > r.firstCopyTo) r.firstCopyTo = first.offset;
    ranges.set(second.partition, r);
  }
  const examples = dups.slice(0, 5).map(([id, rs]) => `${id}: ${rs.map((r) => `${r.partition}@${r.offset}`).join(", ")}`);
  return `${dups.length} ids duplicated; by output partition of the second copy: ${[...ranges].map(([p, r]) => `${p}: ${r.n} second copies at ${r.first}..${r.last}, first copies at ${r.firstCopyFrom}..${r.firstCopyTo}`).join("; ")}; e.g. ${examples.join(" | ")}`;
}

/** Two exactly-once instances of the stateless pipeline over 150,000 rows (`<prefix>-a`, `<prefix>-b`), started. */
async function twoInstances(prefix: string) {
  const name = uniqueName(prefix);
  const input = `${name}-in`;
  const total = 150_000;
  await createTopic(input, 4);
  await produce(records(input, 0, total));
  const file = pipeline(name, input, `${name}-out`);
  const env = { ...FAST_GROUP, STREAM_EXACTLY_ONCE: "true", STREAM_BATCH_SIZE: "200" };
  const a = startCli(["run", file], { env: { ...env, STREAM_INSTANCE_ID: `${prefix}-a` } });
  const b = startCli(["run", file], { env: { ...env, STREAM_INSTANCE_ID: `${prefix}-b` } });
  return { name, input, output: `${name}-out`, a, b, total, expected: expectedIds(total) };
}

/**
 * Appends rows to `topic` from id `from` on, 1,000 every 100 ms, until stopped; `stop` resolves
 * to the id after the last row sent. Keeps every member busy, so a member paused at any moment
 * has work in hand.
 */
function keepProducing(topic: string, from: number) {
  const producer = client.producer({ clientId: "fv-test-flow" });
  let next = from;
  let stopped = false;
  const done = (async () => {
    try {
      while (!stopped) {
        await producer.send(records(topic, next, next + 1000));
        next += 1000;
        await new Promise((r) => setTimeout(r, 100));
      }
    } finally {
      await producer.close();
    }
    return next;
  })();
  return { stop: async () => ((stopped = true), await done) };
}

/** Partitions a run's last build record says it owns. */
const owns = (run: CliRun) => lastRecord(run.records)?.metrics?.partitions.length ?? 0;

/** What a crash test runs and how it judges the output. */
interface Workload<R> {
  kind: string;
  /** Input records for `topic`. */
  input(topic: string): OutboundRecord[];
  pipeline(name: string, input: string, output: string): string;
  /** Judges the output so far; `done` once everything expected is there. */
  judge(out: InboundRecord[]): R & { done: boolean };
}

/** Stateless: filter plus a computed column; every id with price > 100 exactly once. */
const stateless = (total: number): Workload<ReturnType<typeof tally>> => ({
  kind: "stateless",
  input: (topic) => records(topic, 0, total),
  pipeline,
  judge: (out) => {
    const t = tally(out, expectedIds(total));
    return { ...t, done: t.missing.length === 0 };
  },
});

const T0 = Date.UTC(2026, 0, 1);
/**
 * Stateful: a count and sum per key per 1-minute window. With `hop`, the message keys are random
 * and the rows cross the repartition topic; without, they are keyed by the grouped column and
 * the step says `repartition = false`.
 */
const countPerKey = (keys: number, minutes: number, perMinute: number, hop: boolean) => {
  const rowAt = (m: number, i: number) => ({ key: `key-${(m * 13 + i) % keys}`, qty: 1 + (i % 4), ts: T0 + m * MINUTE + Math.floor((i * MINUTE) / perMinute) });
  const expected = new Map<string, { n: number; qty: number }>();
  // The last minute's windows stay open: only earlier ones are expected.
  for (let m = 0; m < minutes - 1; m++) {
    for (let i = 0; i < perMinute; i++) {
      const r = rowAt(m, i);
      const k = `${r.key}@${T0 + m * MINUTE}`;
      const e = expected.get(k) ?? { n: 0, qty: 0 };
      e.n++;
      e.qty += r.qty;
      expected.set(k, e);
    }
  }
  const workload: Workload<{ windows: number; duplicates: number; wrong: string[]; missing: number }> = {
    kind: hop ? "count per key through a repartition hop" : "count per key",
    input: (topic) => {
      const out: OutboundRecord[] = [];
      for (let m = 0; m < minutes; m++) for (let i = 0; i < perMinute; i++) {
        const r = rowAt(m, i);
        out.push({ topic, key: hop ? crypto.randomUUID() : r.key, value: JSON.stringify({ ...r, note: "y".repeat(100) }) });
      }
      return out;
    },
    pipeline: (name, input, output) => windowedCountPipeline(name, input, output, "key", { repartition: hop }),
    judge: (out) => {
      const seen = new Map<string, number>();
      const wrong: string[] = [];
      for (const r of out) {
        const w = json(r);
        const k = `${w.key}@${w.windowStart}`;
        seen.set(k, (seen.get(k) ?? 0) + 1);
        const e = expected.get(k);
        if (!e || e.n !== w.n || e.qty !== w.qty) wrong.push(`${k}: n=${w.n} qty=${w.qty}, expected ${JSON.stringify(e)}`);
      }
      const missing = [...expected.keys()].filter((k) => !seen.has(k)).length;
      const duplicates = [...seen.values()].reduce((sum, n) => sum + n - 1, 0);
      return { windows: seen.size, duplicates, wrong, missing, done: missing === 0 };
    },
  };
  return workload;
};

/** Runs, kills -9 at random points `kills` times (restarting each time), then runs to the end. */
async function crashRun<R>(exactlyOnce: boolean, kills: number, workload: Workload<R>, settings: Record<string, string> = {}) {
  const name = uniqueName(exactlyOnce ? "eos-crash" : "alos-crash");
  const input = `${name}-in`;
  const output = `${name}-out`;
  await createTopic(input, 4);
  // A fifth of the input first, the rest fed on while the kills go on: every kill hits a
  // pipeline under load, however fast it catches up.
  const all = workload.input(input);
  const head = Math.floor(all.length / 5);
  await produce(all.slice(0, head));
  let fed = false;
  const feeding = (async () => {
    for (let i = head; i < all.length; i += 1000) {
      await produce(all.slice(i, Math.min(all.length, i + 1000)));
      await new Promise((r) => setTimeout(r, 300));
    }
    fed = true;
  })();
  const file = workload.pipeline(name, input, output);
  const env = {
    ...FAST_GROUP,
    STREAM_CONSUMERS: "2",
    STREAM_BATCH_SIZE: "200",
    STREAM_EXACTLY_ONCE: String(exactlyOnce),
    STREAM_IDLE_PARTITION_MS: "3000",
    // A stable instance id: each restart fences the killed predecessor's open transaction at once.
    STREAM_INSTANCE_ID: "crash-test",
    ...(process.env.FV_DEBUG_LOOP ? { FV_DEBUG_LOOP: "1", STREAM_LOG_LEVEL: "debug" } : {}),
    ...settings,
  };
  let collector: ReturnType<typeof collect> | undefined;
  let killed = 0;
  const runs: CliRun[] = [];
  for (let i = 0; i < kills; i++) {
    const run = startCli(["run", file], { env });
    runs.push(run);
    const before = lastRecord(run.records)?.metrics?.consumed ?? 0;
    const startedAt = Date.now();
    const target = before + 500 + Math.random() * 3000;
    try {
      // Progress, or (once all the input is there and may all be processed) a few seconds up.
      await waitFor(() => (lastRecord(run.records)?.metrics?.consumed ?? 0) > target || (fed && Date.now() - startedAt > 8000) || run.child.exitCode !== null, 90_000, "progress before the kill");
    } catch (error) {
      console.log(`=== run ${i + 1} made no progress\n` + logsOf(run, 60) + "\n" + JSON.stringify(lastRecord(run.records)?.metrics ?? {}));
      run.child.kill("SIGKILL");
      await collector?.stop();
      throw error;
    }
    collector ??= (await partitionCount(output)) !== undefined ? collect(output) : undefined;
    run.child.kill("SIGKILL");
    await run.exited;
    killed++;
  }
  await feeding;
  const final = startCli(["run", file], { env });
  collector ??= (await waitFor(async () => (await partitionCount(output)) !== undefined, 60_000, "output topic"), collect(output));
  const dumpRuns = () => {
    for (const [i, run] of [...runs, final].entries()) console.log(`=== run ${i + 1}\n` + logsOf(run, 40) + "\n" + JSON.stringify(lastRecord(run.records)?.metrics ?? {}));
  };
  try {
    await waitFor(() => workload.judge(collector!.records).done, 180_000, `every expected ${workload.kind} output`);
  } catch (error) {
    dumpRuns();
    const { done: _, ...verdict } = workload.judge(collector!.records);
    console.log(`at the timeout: ${JSON.stringify(verdict, (_k, v) => (Array.isArray(v) && v.length > 10 ? `${v.length} of them, first ${v.slice(0, 10)}` : v))}`);
    final.child.kill("SIGKILL");
    await collector!.stop();
    throw error;
  }
  // Let any duplicate show up before judging.
  await new Promise((r) => setTimeout(r, 2000));
  final.child.kill("SIGTERM");
  expect(await final.exited).toBe(0);
  const out = await collector!.stop();
  const { done: _, ...verdict } = workload.judge(out);
  if (process.env.FV_DEBUG_DUPS || ("duplicates" in verdict && verdict.duplicates)) dumpRuns();
  const restored = [...runs, final].reduce((sum, run) => sum + (lastRecord(run.records)?.metrics?.restoredRecords ?? 0), 0);
  const fromStore = [...runs, final].reduce((sum, run) => sum + (lastRecord(run.records)?.metrics?.restoredFromStore ?? 0), 0);
  // Spilling operators: the cache hit rates every build record of every run showed.
  const hitRates = [...runs, final].flatMap((run) => run.records.flatMap((r) => (r.metrics?.partitions ?? []).map((p) => p.cacheHitRate))).filter((h): h is number => typeof h === "number");
  return { killed, ...verdict, restored, fromStore, hitRates, final: lastRecord(final.records)! };
}


describe("exactly-once", () => {
  test("kill -9 five times under load: a read_committed reader finds every record exactly once", async () => {
    const result = await crashRun(true, 5, stateless(150_000));
    console.log(`exactly-once crash test: ${result.killed} kills, ${result.missing.length} missing, ${result.duplicates} duplicates`);
    expect(result.killed).toBe(5);
    expect(result.missing).toEqual([]);
    expect(result.unexpected).toEqual([]);
    expect(result.duplicates).toBe(0);
    expect(result.final.metrics!.guarantee).toBe("exactly-once");
  });

  // Kafka Streams' exactly-once commit interval. Each commit runs while the loop processes the
  // next batches, whose records wait for the next transaction, so most kills land while a commit
  // overlaps later work. Run with FV_UNSAFE_COMMIT_AHEAD=1 (each commit takes the offsets of the
  // batches still waiting, as a broken overlap would) and it fails: those rows go missing.
  test("kill -9 five times while each commit overlaps the next batches (100 ms interval): every record exactly once", async () => {
    const result = await crashRun(true, 5, stateless(150_000), { STREAM_CHECKPOINT_INTERVAL_MS: "100" });
    console.log(`exactly-once overlap crash test: ${result.killed} kills, ${result.missing.length} missing, ${result.duplicates} duplicates`);
    expect(result.killed).toBe(5);
    expect(result.missing).toEqual([]);
    expect(result.unexpected).toEqual([]);
    expect(result.duplicates).toBe(0);
    expect(result.final.metrics!.transactionsCommitted).toBeGreaterThan(0);
  });

  test("an exactly-once stream that goes idle commits only what it processed and stops cleanly", async () => {
    const name = uniqueName("eos-idle");
    const input = `${name}-in`;
    const output = `${name}-out`;
    await createTopic(input, 4);
    await produce(records(input, 0, 2000));
    const file = pipeline(name, input, output);
    // Several empty checkpoint intervals pass before the idle timeout ends the run.
    const result = await runCli(["run", file], { env: { STREAM_EXACTLY_ONCE: "true", STREAM_CHECKPOINT_INTERVAL_MS: "100", STREAM_IDLE_TIMEOUT_MS: "3000" } });
    expect(result.code).toBe(0);
    const final = lastRecord(result.records)!;
    expect(final.status).toBe("STOPPED");
    expect(final.metrics!.consumed).toBe(2000);
    expect(final.metrics!.checkpointFailures).toBe(0);
    const out = await readUntil(output, (read) => read.length >= expectedIds(2000).length, "the output", { timeoutMs: 30_000, settleMs: 1000 });
    expect(tally(out, expectedIds(2000))).toEqual({ missing: [], duplicates: 0, unexpected: [] });
  });

  // The default spills past STREAM_STATE_CACHE_KEYS into a local store; with the store off, every
  // restore reads the whole changelog and its windows are decoded on first use (operators.md).
  // Those two variants test the state store under kill -9, which is the same TypeScript on every
  // engine: they run on Bun only (each takes about 36 s, and npm test runs this file once per
  // engine). What differs per engine is covered elsewhere on each: the Kafka client's restore
  // reads (readPartition, the same call with or without the store, reading more without it) by
  // the default variant here, and the local store's native binding by local-store.test.ts.
  const variants: Array<{ hop: boolean; cacheKeys?: number; storeOff?: boolean }> = [{ hop: false }, { hop: true }];
  if (TEST_ENGINE.name === "bun") variants.push({ hop: false, cacheKeys: 10 }, { hop: false, storeOff: true });
  for (const { hop, cacheKeys, storeOff } of variants) {
    const spilling = cacheKeys !== undefined ? `, state beyond memory (STREAM_STATE_CACHE_KEYS=${cacheKeys}: windows read back from the local store)`
      : storeOff ? ", the local store off (STREAM_STATE_DIR=off: each restore reads the whole changelog, windows decoded on first use)" : "";
    test(`a count per key${hop ? " through a repartition hop (random message keys)" : ""}${spilling}, kill -9 five times under load: every window exactly once with the exact count`, async () => {
      const result = await crashRun(true, 5, countPerKey(200, 30, 4000, hop), cacheKeys !== undefined ? { STREAM_STATE_CACHE_KEYS: String(cacheKeys) } : storeOff ? { STREAM_STATE_DIR: "off" } : {});
      if (cacheKeys !== undefined) {
        // The windows did not fit: the cache was missed and filled again from the store.
        console.log(`spilling: lowest cache hit rate seen ${Math.min(...result.hitRates)} (${result.hitRates.length} readings)`);
        expect(result.hitRates.some((h) => h < 1)).toBe(true);
      }
      console.log(`exactly-once stateful crash test${hop ? " with a hop" : ""}${cacheKeys === undefined ? "" : " spilling"}: ${result.killed} kills, ${result.windows} windows, ${result.missing} missing, ${result.duplicates} duplicates, ${result.wrong.length} wrong; restores read ${result.restored} changelog records and ${result.fromStore} stored entries`);
      expect(result.killed).toBe(5);
      expect(result.wrong.slice(0, 5)).toEqual([]);
      expect(result.missing).toBe(0);
      expect(result.duplicates).toBe(0);
      expect(result.windows).toBe(200 * 29);
      // Without a hop, the restarted runs restored the state the killed ones checkpointed (with
      // one, whether a killed run got as far as checkpointing downstream state depends on timing).
      // The local store is on (the default): the restarts read the changelog's tail after what it
      // covers (every live key here changes between two checkpoints, so the tail replaces it all).
      if (!hop) expect(result.restored).toBeGreaterThan(0);
      else expect(result.final.metrics!.guarantee).toBe("exactly-once");
    });
  }

  test("at-least-once under the same crashes loses nothing and reports its duplicates", async () => {
    const result = await crashRun(false, 5, stateless(150_000));
    console.log(`at-least-once crash test: ${result.killed} kills, ${result.missing.length} missing, ${result.duplicates} duplicates`);
    expect(result.missing).toEqual([]);
    expect(result.unexpected).toEqual([]);
  });

  test("a paused zombie is fenced when it wakes, gives up cleanly, and the output has no duplicates", async () => {
    const { input, output, a, b, total } = await twoInstances("zombie");
    let collector: ReturnType<typeof collect> | undefined;
    let flow: ReturnType<typeof keepProducing> | undefined;
    let expected = expectedIds(total);
    const consumedBy = (run: CliRun) => lastRecord(run.records)?.metrics?.consumed ?? 0;
    try {
      // The input keeps flowing from the start: A is paused with work in hand (a member paused
      // once its input ran dry has nothing left to be fenced on: that was a flaky run, not a zombie),
      // its partitions still get records while it sleeps, and a member that joins after the other
      // read the whole backlog (a fast broker) still gets rows to consume.
      flow = keepProducing(input, total);
      await waitFor(() => owns(a) > 0 && owns(b) > 0 && consumedBy(a) > 0, 90_000, "both instances consuming");
      const before = consumedBy(a);
      await waitFor(() => consumedBy(a) >= before + 2000, 60_000, "A to consume the flowing input");
      a.child.kill("SIGSTOP");
      // B takes every partition once A's session times out.
      await waitFor(() => owns(b) === 4, 60_000, "B to take A's partitions");
      a.child.kill("SIGCONT");
      await waitFor(() => (lastRecord(a.records)?.metrics?.restarts ?? 0) + (lastRecord(a.records)?.metrics?.transactionsAborted ?? 0) > 0 || a.lines.some((l) => /fenced|revoked/i.test(l)), 60_000, "A to be fenced");
      expected = expectedIds(await flow.stop());
      collector = collect(output);
      await waitFor(() => tally(collector!.records, expected).missing.length === 0, 120_000, "every expected record");
    } catch (error) {
      for (const [n, r] of [["A", a], ["B", b]] as const) console.log(`=== ${n}\n` + logsOf(r) + "\n" + JSON.stringify(lastRecord(r.records)?.metrics));
      a.child.kill("SIGCONT");
      a.child.kill("SIGKILL");
      b.child.kill("SIGKILL");
      await flow?.stop();
      await collector?.stop();
      throw error;
    }
    await new Promise((r) => setTimeout(r, 2000));
    a.child.kill("SIGTERM");
    b.child.kill("SIGTERM");
    const aCode = await a.exited;
    if (aCode !== 0) console.log(logsOf(a));
    expect(aCode).toBe(0);
    expect(await b.exited).toBe(0);
    const result = tally(await collector.stop(), expected);
    console.log(`zombie test: ${expected.length} expected, A restarts=${lastRecord(a.records)?.metrics?.restarts}, aborts=${lastRecord(a.records)?.metrics?.transactionsAborted}, duplicates=${result.duplicates}`);
    expect(result.missing).toEqual([]);
    expect(result.duplicates).toBe(0);
  });

  // Node + librdkafka soak, seed 101: a static member fenced by its own rejoin across a broker
  // restart ended FAILED ("fetching failed: Local: Fatal error (librdkafka -150)"). Here a second
  // process with the same STREAM_INSTANCE_ID takes the membership, and is killed once it has.
  // On Node + librdkafka it also held a partition for good in 2 of 25 runs (docs/ARCHITECTURE.md,
  // known issues: a commit queued just after the fencing and refused unseen, then "never
  // committed" not believed); such a partition now starts after 30 s where the client committed it.
  for (const exactlyOnce of [false, true]) test(`a static member fenced by another consumer with its STREAM_INSTANCE_ID takes the id back and goes on, ${exactlyOnce ? "exactly-once: every record once" : "at-least-once, losing nothing"}`, async () => {
    const name = uniqueName(exactlyOnce ? "instance-eos" : "instance");
    const input = `${name}-in`;
    const output = `${name}-out`;
    const total = 60_000;
    await createTopic(input, 4);
    await produce(records(input, 0, total));
    // Under exactly-once the second process has the first one's transactional id too: each fences the other's producer as well.
    const env = { ...FAST_GROUP, STREAM_BATCH_SIZE: "200", STREAM_INSTANCE_ID: `${name}-x`, ...(exactlyOnce ? { STREAM_EXACTLY_ONCE: "true" } : {}) };
    const file = pipeline(name, input, output);
    const a = startCli(["run", file], { env });
    let b: CliRun | undefined;
    let collector: ReturnType<typeof collect> | undefined;
    const flow = keepProducing(input, total);
    let expected = expectedIds(total);
    try {
      await waitFor(() => owns(a) === 4 && (lastRecord(a.records)?.metrics?.consumed ?? 0) > 0, 90_000, "A consuming");
      b = startCli(["run", file], { env });
      await waitFor(() => owns(b!) > 0, 90_000, "B to take the membership of A's group.instance.id");
      b.child.kill("SIGKILL");
      await b.exited;
      const consumed = lastRecord(a.records)?.metrics?.consumed ?? 0;
      await waitFor(() => owns(a) === 4 && (lastRecord(a.records)?.metrics?.consumed ?? 0) > consumed + 2000, 90_000, "A to own every partition again and consume on");
      expected = expectedIds(await flow.stop());
      collector = collect(output);
      await waitFor(() => tally(collector!.records, expected).missing.length === 0, 120_000, "every expected record");
    } catch (error) {
      console.log(`=== A\n${logsOf(a)}\n${JSON.stringify(lastRecord(a.records)?.metrics)}`);
      if (b) console.log(`=== B\n${logsOf(b)}`);
      a.child.kill("SIGKILL");
      b?.child.kill("SIGKILL");
      await flow.stop();
      await collector?.stop();
      throw error;
    }
    a.child.kill("SIGTERM");
    const aCode = await a.exited;
    if (aCode !== 0) console.log(logsOf(a));
    expect(aCode).toBe(0);
    const result = tally(await collector.stop(), expected);
    const fencedLines = a.lines.filter((l) => l.includes("was fenced by another consumer that joined with the same group.instance.id"));
    console.log(`static member test (${exactlyOnce ? "exactly-once" : "at-least-once"}): ${expected.length} expected, ${result.duplicates} duplicates, A restarts=${lastRecord(a.records)?.metrics?.restarts} (stall restarts ${lastRecord(a.records)?.metrics?.stallRestarts}), ${fencedLines.length} fenced-instance lines`);
    // At-least-once, librdkafka reports the fencing as a fatal error, which the loop takes as
    // fenced. The pure-JS library's offset commit (no group.instance.id in it) is refused with
    // UNKNOWN_MEMBER_ID, on which it rejoins by itself; only a refused heartbeat or sync says
    // FENCED_INSTANCE_ID (the test below). Exactly-once, the second process's producer fences the
    // first one's too, which starts a new session either way.
    if (ENGINE_KAFKA_CLIENT === "confluent" && !exactlyOnce && fencedLines.length === 0) console.log(`=== A, no fenced-instance line\n${logsOf(a)}`);
    if (ENGINE_KAFKA_CLIENT === "confluent" && !exactlyOnce) expect(fencedLines.length).toBeGreaterThan(0);
    if (exactlyOnce) expect(lastRecord(a.records)?.metrics?.restarts ?? 0).toBeGreaterThan(0);
    expect(result.missing).toEqual([]);
    if (exactlyOnce) expect(result.duplicates).toBe(0);
    expect(result.unexpected).toEqual([]);
  });

  // Two live processes with one STREAM_INSTANCE_ID take the static membership from each other
  // without end. librdkafka reports each fencing (a fatal consumer error); the pure-JS library took
  // the id back by itself, so the two went on fencing each other, unseen. Either way the fencings
  // are counted now, and a process fenced 3 times within a minute ends with the setting to fix.
  test("two live processes with one STREAM_INSTANCE_ID: one ends within two minutes with an error that names the setting", async () => {
    const name = uniqueName("instance-shared");
    const input = `${name}-in`;
    const output = `${name}-out`;
    await createTopic(input, 2);
    await produce(records(input, 0, 2_000));
    const env = { ...FAST_GROUP, STREAM_INSTANCE_ID: `${name}-x` };
    const file = pipeline(name, input, output);
    const a = startCli(["run", file], { env });
    let b: CliRun | undefined;
    try {
      await waitFor(() => owns(a) === 2, 90_000, "A to own both partitions");
      b = startCli(["run", file], { env });
      const ended = await Promise.race([
        a.exited.then((code) => ({ run: a, code })),
        b.exited.then((code) => ({ run: b!, code })),
        new Promise<undefined>((resolve) => setTimeout(resolve, 120_000)),
      ]);
      if (!ended) throw new Error("neither process ended within 120 s");
      expect(ended.code).not.toBe(0);
      expect(ended.run.lines.some((l) => l.includes(`another process runs with STREAM_INSTANCE_ID=${name}-x. Give each process its own STREAM_INSTANCE_ID`))).toBe(true);
      expect(ended.run.lines.some((l) => l.includes("was fenced by another consumer that joined with the same group.instance.id"))).toBe(true);
    } catch (error) {
      console.log(`=== A\n${logsOf(a)}`);
      if (b) console.log(`=== B\n${logsOf(b)}`);
      throw error;
    } finally {
      a.child.kill("SIGKILL");
      b?.child.kill("SIGKILL");
      await a.exited;
      await b?.exited;
    }
  });

  test("a member killed mid-stream: the one that takes its partitions fences its transactional id at once, and every record is there exactly once", async () => {
    const { name, input, output, a, b, total } = await twoInstances("departed");
    let collector: ReturnType<typeof collect> | undefined;
    // The input keeps flowing: a member that joins after the other has read the whole backlog
    // (a fast broker: B read 150,000 rows first) still gets rows to consume before it is killed.
    const flow = keepProducing(input, total);
    let expected = expectedIds(total);
    try {
      await waitFor(() => owns(a) > 0 && owns(b) > 0 && (lastRecord(a.records)?.metrics?.consumed ?? 0) > 0, 90_000, "both instances consuming");
      a.child.kill("SIGKILL");
      await waitFor(() => owns(b) === 4, 60_000, "B to take A's partitions");
      // B learnt from the group who owned them, and fences that member's transactional id.
      await waitFor(() => (lastRecord(b.records)?.metrics?.transactionsFenced ?? 0) >= 1, 30_000, "B to fence A's transactional id");
      expected = expectedIds(await flow.stop());
      collector = collect(output);
      await waitFor(() => tally(collector!.records, expected).missing.length === 0, 120_000, "every expected record");
    } catch (error) {
      console.log(`=== A\n${logsOf(a)}\n${JSON.stringify(lastRecord(a.records)?.metrics)}`);
      console.log(`=== B\n${logsOf(b)}\n${JSON.stringify(lastRecord(b.records)?.metrics)}`);
      a.child.kill("SIGKILL");
      b.child.kill("SIGKILL");
      await flow.stop();
      await collector?.stop();
      throw error;
    }
    await new Promise((r) => setTimeout(r, 2000));
    b.child.kill("SIGTERM");
    expect(await b.exited).toBe(0);
    const result = tally(await collector.stop(), expected);
    // Both of its producers' ids (two take turns, STREAM_TRANSACTION_PRODUCERS).
    expect(b.lines.filter((l) => l.includes("left the group: fencing its transactional id")).map((l) => l.match(/transactional ids? (.+?), so the broker/)?.[1])).toEqual([`fv-${name}-departed-a-0, fv-${name}-departed-a-0.2`]);
    expect(lastRecord(b.records)!.metrics!.transactionsFenced).toBe(1);
    expect(result.missing).toEqual([]);
    expect(result.duplicates).toBe(0);
    expect(result.unexpected).toEqual([]);
  });

  // On a broker of its own: the shared one on 9092 may be a user's or another checkout's.
  test("a broker down for 17 s mid-stream: the stream resumes with no loss and no duplicates", async () => {
    const broker = ownBroker(29092);
    broker.start();
    const name = uniqueName("broker-restart");
    const input = `${name}-in`;
    const output = `${name}-out`;
    const total = 120_000;
    let collector: ReturnType<typeof collect> | undefined;
    let run: CliRun | undefined;
    try {
      await createTopic(input, 4, broker.client);
      await produce(records(input, 0, total), 2000, broker.client);
      const file = pipeline(name, input, output);
      run = startCli(["run", file], { env: { ...FAST_GROUP, STREAM_BROKERS: broker.brokers, STREAM_EXACTLY_ONCE: "true", STREAM_BATCH_SIZE: "200", STREAM_INSTANCE_ID: "broker-restart" } });
      const started = run;
      await waitFor(() => (lastRecord(started.records)?.metrics?.consumed ?? 0) > 10_000, 90_000, "progress before the restart");
      expect(broker.down()).toContain("broker stopped");
      // Down for longer than a transactional record's delivery timeout (15 s): records in flight
      // time out, and the stream must take that as a reason to rejoin, not to fail.
      await new Promise((r) => setTimeout(r, 17_000));
      broker.up();
      collector = collect(output, { client: broker.client });
      const expected = expectedIds(total);
      const got = collector;
      try {
        await waitFor(() => tally(got.records, expected).missing.length === 0, 240_000, "every expected record after the restart");
      } catch (error) {
        const { exitCode, signalCode } = started.child;
        console.log(`=== the run (${tally(got.records, expected).missing.length} missing; process exit code ${exitCode}, signal ${signalCode})\n` + logsOf(started) + "\n" + JSON.stringify(lastRecord(started.records)?.metrics));
        throw error;
      }
      await new Promise((r) => setTimeout(r, 2000));
      started.child.kill("SIGTERM");
      expect(await started.exited).toBe(0);
      const out = await collector.stop();
      const result = tally(out, expected);
      console.log(`broker restart: restarts=${lastRecord(started.records)?.metrics?.restarts}, duplicates=${result.duplicates}`);
      if (result.duplicates > 0) {
        // The broker's files (its __transaction_state and partitions, for kafka-dump-log) outlive the test.
        let kept = join(tmpdir(), `fv-broker-restart-duplicates-${Date.now()}`);
        try {
          cpSync(broker.home, kept, { recursive: true });
        } catch (error) {
          kept = `not kept (${(error as Error).message})`;
        }
        console.log(`=== duplicates: ${duplicateReport(out)}\n=== the broker's files: ${kept}\n=== the run\n${logsOf(started)}\n${JSON.stringify(lastRecord(started.records)?.metrics)}`);
      }
      expect(result.missing).toEqual([]);
      expect(result.duplicates).toBe(0);
    } finally {
      run?.child.kill("SIGKILL");
      await collector?.stop();
      broker.remove();
    }
  });
});
