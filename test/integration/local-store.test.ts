/**
 * The local state store (STREAM_STATE_DIR) through the real broker: a restart reads only the
 * changelog's tail after what the store covers, and a corrupted store is rebuilt from the
 * changelog with a warning, the windows exact in both. (Kill -9 under exactly-once with the store
 * on is exactly-once.test.ts's stateful crash test: the store is on by default.)
 */
import { describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type CliRun, lastRecord, logsOf, startCli, waitFor } from "../helpers/cli.ts";
import type { OutboundRecord } from "../../src/kafka/port.ts";
import { client, createTopic, json, produce, uniqueName } from "../helpers/kafka.ts";
import { windowedCountPipeline } from "../helpers/pipelines.ts";
import { expectedWindows, finalWindows, sorted, trades } from "../helpers/trades.ts";
import { readUntil, runUntilOutput, startStream, stopWhen } from "../helpers/streams.ts";

const PARTITIONS = 4;

/**
 * Runs the first part of the input through a process, fed in four steps (so that several
 * checkpoints write the changelog), stopped with SIGTERM once all of it is in the state.
 */
async function firstRun(file: string, env: Record<string, string>, records: OutboundRecord[]): Promise<CliRun> {
  const run = startCli(["run", file], { env });
  const step = Math.ceil(records.length / 4);
  for (let i = 0; i < records.length; i += step) {
    await produce(records.slice(i, i + step));
    await waitFor(() => (lastRecord(run.records)?.metrics?.consumed ?? 0) >= Math.min(records.length, i + step) || run.child.exitCode !== null, 90_000, "a part consumed");
    await new Promise((r) => setTimeout(r, 700));
  }
  const consumed = records.length;
  await waitFor(() => (lastRecord(run.records)?.metrics?.consumed ?? 0) >= consumed || run.child.exitCode !== null, 90_000, "the first part consumed");
  // A checkpoint after the last row (every 300 ms here).
  await new Promise((r) => setTimeout(r, 1000));
  run.child.kill("SIGTERM");
  expect(await run.exited).toBe(0);
  return run;
}

/** The changelog offset each partition's store covers, from its .checkpoint file. */
const coveredOffsets = (stateDir: string) =>
  Array.from({ length: PARTITIONS }, (_, p) => {
    const checkpoint = JSON.parse(readFileSync(join(stateDir, "stage-1", `partition-${p}`, ".checkpoint"), "utf8"));
    return checkpoint.changelogOffset === null ? 0n : BigInt(checkpoint.changelogOffset);
  });

async function changelogRecords(name: string, from: bigint[]): Promise<number> {
  const admin = client.admin({ clientId: "fv-test-store" });
  try {
    let n = 0;
    for (let p = 0; p < PARTITIONS; p++) n += (await admin.readPartition(`fv-state-${name}`, p, { from: from[p]! })).length;
    return n;
  } finally {
    await admin.close();
  }
}

/** A windowed count over 6 minutes of trades on a new topic, with its own STREAM_STATE_DIR. */
async function windowedSetup(prefix: string) {
  const name = uniqueName(prefix);
  const input = `${name}-in`;
  const output = `${name}-out`;
  const stateDir = mkdtempSync(join(tmpdir(), "fv-state-"));
  await createTopic(input, PARTITIONS);
  const all = trades(input, 400, 6);
  const half = Math.floor(all.length / 2);
  const file = windowedCountPipeline(name, input, output, "sym", { repartition: false });
  const env = { STREAM_STATE_DIR: stateDir, STREAM_CHECKPOINT_INTERVAL_MS: "300", STREAM_IDLE_PARTITION_MS: "3000" };
  return { name, input, output, stateDir, all, half, file, env };
}

describe("the local state store through the real broker", () => {
  test("a restart restores only the changelog's tail after what the store covers (the exact count), and the windows are exact", async () => {
    const { name, input, output, stateDir, all, half, file, env } = await windowedSetup("store-tail");
    const first = await firstRun(file, env, all.slice(0, half));
    expect(lastRecord(first.records)!.metrics!.restoredFromStore).toBe(0);

    // What the restart must read: the committed changelog records from each store's covered offset on.
    const covered = coveredOffsets(stateDir);
    const tail = await changelogRecords(name, covered);
    const whole = await changelogRecords(name, covered.map(() => 0n));
    expect(tail).toBeLessThan(whole);

    await produce(all.slice(half));
    const expected = expectedWindows(400, 6);
    const stream = await startStream(file, output, { env });
    const second = stream.run;
    // While it runs, the build record shows each partition's store.
    const withStores = () => lastRecord(second.records)?.metrics?.partitions.filter((p) => p.topic === input && p.storeBytesOnDisk !== undefined) ?? [];
    const records = await stopWhen(stream, (out) => finalWindows(out.map(json)).length >= expected.length && withStores().length === PARTITIONS, "every window, and the stores in the build record", { timeoutMs: 90_000 });
    expect(finalWindows(records.map(json))).toEqual(sorted(expected));
    const m = lastRecord(second.records)!.metrics!;
    console.log(`store restart: ${m.restoredRecords} changelog records read (of ${whole}), ${m.restoredFromStore} entries from the store, in ${m.restoreMs} ms`);
    expect(m.restoredRecords).toBe(tail);
  });

  test("a corrupted local store is rebuilt from the changelog with a warning naming its path; nothing else stops and the windows are exact", async () => {
    const { name, input, output, stateDir, all, half, file, env } = await windowedSetup("store-corrupt");
    await firstRun(file, env, all.slice(0, half));

    // Partition 0's store is overwritten with garbage; the others stay.
    const covered = coveredOffsets(stateDir);
    const damaged = join(stateDir, "stage-1", "partition-0");
    writeFileSync(join(damaged, "state.mdb"), Buffer.alloc(64 * 1024, 0x5a));
    const expectedRead = (await changelogRecords(name, [0n, ...covered.slice(1)]));

    await produce(all.slice(half));
    const expected = expectedWindows(400, 6);
    const { run: second, records } = await runUntilOutput(file, output, (out) => finalWindows(out.map(json)).length >= expected.length, "every window", { env, timeoutMs: 90_000 });
    expect(finalWindows(records.map(json))).toEqual(sorted(expected));
    const warning = second.logs.find((l) => l.level === "warn" && l.msg.includes(damaged));
    expect(warning?.msg ?? logsOf(second, 30)).toContain("rebuilding it from the changelog");
    expect(lastRecord(second.records)!.metrics!.restoredRecords).toBe(expectedRead);
  });
});

describe("standby replicas through the real broker", () => {
  test("STREAM_STANDBY_REPLICAS=1: the owner is killed, the standby takes its partitions over reading only a tail, and every window is exact once", async () => {
    const name = uniqueName("standby");
    const input = `${name}-in`;
    const output = `${name}-out`;
    await createTopic(input, PARTITIONS);
    const all = trades(input, 400, 6);
    const half = Math.floor(all.length / 2);
    await produce(all.slice(0, half));
    const file = windowedCountPipeline(name, input, output, "sym", { repartition: false });
    const env = (id: string) => ({
      STREAM_INSTANCE_ID: id,
      STREAM_STATE_DIR: mkdtempSync(join(tmpdir(), `fv-state-${id}-`)),
      STREAM_STANDBY_REPLICAS: "1",
      STREAM_EXACTLY_ONCE: "true",
      STREAM_SESSION_TIMEOUT_MS: "6000",
      STREAM_CHECKPOINT_INTERVAL_MS: "300",
      STREAM_IDLE_PARTITION_MS: "3000",
    });
    const envB = env("b");
    const a = startCli(["run", file], { env: env("a") });
    const b = startCli(["run", file], { env: envB });
    const metrics = (run: CliRun) => lastRecord(run.records)?.metrics;
    const ownedBy = (run: CliRun) => (metrics(run)?.partitions ?? []).filter((p) => p.topic === input).map((p) => p.partition).sort();
    try {
      await waitFor(() => (metrics(a)?.consumed ?? 0) + (metrics(b)?.consumed ?? 0) >= half && ownedBy(a).length > 0 && ownedBy(b).length > 0, 90_000, "the first half consumed by two members");
      // B keeps a standby copy of each of A's partitions, caught up. A's partitions are read at
      // each look, from records that agree (each member's record is up to 500 ms old: right after
      // the rebalance, A's last one may still show every partition).
      let aOwns: number[] = [];
      await waitFor(() => {
        aOwns = ownedBy(a);
        const agreed = [...aOwns, ...ownedBy(b)].sort().join() === [...Array(PARTITIONS).keys()].join();
        const standbys = metrics(b)?.standbyPartitions ?? [];
        return agreed && aOwns.every((p) => standbys.some((s) => s.partition === p && s.lag === 0 && s.offset > 0));
      }, 30_000, "B's standby copies of A's partitions, caught up").catch((error: Error) => {
        const seen = JSON.stringify({ aOwns, bOwns: ownedBy(b), standbys: metrics(b)?.standbyPartitions });
        throw new Error(`${error.message}: ${seen}\nB:\n${logsOf(b, 30)}\nA:\n${logsOf(a, 15)}`);
      });
      expect((metrics(b)!.standbyPartitions).map((s) => s.partition).sort()).toEqual(aOwns);
      expect(metrics(b)!.standbyPartitions.every((s) => s.topic === `fv-state-${name}` && s.stage === 1)).toBe(true);
      const restoredBefore = metrics(b)!.restoredRecords;
      const whole = await changelogRecords(name, [0n, 0n, 0n, 0n]);

      a.child.kill("SIGKILL");
      await a.exited;
      await produce(all.slice(half));
      await waitFor(() => ownedBy(b).length === PARTITIONS, 60_000, "B to own every partition");
      const expected = expectedWindows(400, 6);
      const out = await readUntil(output, (read) => finalWindows(read.map(json)).length >= expected.length, "every window", { timeoutMs: 90_000, settleMs: 2000 });
      const windows = out.map(json);
      // Exactly once: every window one time, with its exact count.
      expect(windows).toHaveLength(expected.length);
      expect(sorted(windows.map(({ windowStart, windowEnd, sym, n, qty }) => ({ windowStart, windowEnd, sym, n, qty })))).toEqual(sorted(expected));
      const takeover = metrics(b)!.restoredRecords - restoredBefore;
      console.log(`standby takeover: B read ${takeover} changelog records for A's partitions (the changelog holds ${whole})`);
      if (process.env.FV_DEBUG_STANDBY) for (const [who, run] of [["A", a], ["B", b]] as const) console.log(who, logsOf(run, 80));
      expect(takeover).toBeLessThan(whole);
      expect(b.logs.some((l) => l.msg.includes("took over its standby copy"))).toBe(true);
    } finally {
      a.child.kill("SIGKILL");
      b.child.kill("SIGTERM");
      await b.exited;
    }
  });
});
