/**
 * Stateful operators through the real broker: per-partition state checkpointed to the compacted
 * topic fv-state-<name> and restored on assignment, here or after a restart.
 */
import { describe, expect, test } from "bun:test";
import { lastRecord, startCli, waitFor } from "../helpers/cli.ts";
import { consumeAll, createTopic, json, partitionCount, produce, text, uniqueName } from "../helpers/kafka.ts";
import { MINUTE, transformFile, windowedCountPipeline } from "../helpers/pipelines.ts";
import { expectedWindows, finalWindows, sorted, T0, trades } from "../helpers/trades.ts";
import { runUntilOutput, startStream, stopStream } from "../helpers/streams.ts";

describe("stateful operators through the real broker", () => {
  test("a tumbling windowed count over 4 partitions with 2 consumers gives the exact windows", async () => {
    const name = uniqueName("windows");
    const input = `${name}-in`;
    const output = `${name}-out`;
    await createTopic(input, 4);
    await produce(trades(input, 200, 6));
    const stream = await startStream(windowedCountPipeline(name, input, output, "sym"), output, { env: { STREAM_CONSUMERS: "2", STREAM_IDLE_PARTITION_MS: "3000" } });
    const { run, out } = stream;
    const expected = expectedWindows(200, 6);
    await waitFor(() => finalWindows(out.records.map(json)).length >= expected.length, 90_000, "every window");
    // The last minute's windows are still open: their state is visible per partition.
    const stateKeys = () => (lastRecord(run.records)?.metrics?.partitions ?? []).reduce((sum, p) => sum + (p.stateKeys ?? 0), 0);
    await waitFor(() => stateKeys() > 0, 10_000, "live state in the build record");
    // Each consumer owns input partitions and the same partitions of the repartition topic (keyed by sym).
    const owned = lastRecord(run.records)!.metrics!.partitions;
    expect(owned.filter((p) => p.topic === input).length).toBe(4);
    expect(owned.filter((p) => p.topic === `fv-repartition-${name}-1`).length).toBe(4);
    expect(finalWindows((await stopStream(stream)).map(json))).toEqual(sorted(expected));
    expect(await partitionCount(`fv-state-${name}`)).toBe(4);
    expect(lastRecord(run.records)!.metrics!.late).toBe(0);
  });

  /**
   * The windowed count per sym over 6 minutes of trades, stopped in order after the first half
   * and restarted for the second, with the local store off (the state must come back from the
   * changelog topic: with a store that took the last checkpoint before the stop, the restore reads
   * no changelog; test/integration/local-store.test.ts covers the store). `between` runs while it
   * is stopped. The windows must be exact; returns the second run.
   */
  async function restartedMidStream(prefix: string, between: (name: string) => Promise<void> = async () => {}) {
    const name = uniqueName(prefix);
    const input = `${name}-in`;
    const output = `${name}-out`;
    await createTopic(input, 4);
    const all = trades(input, 400, 6);
    const half = Math.floor(all.length / 2);
    await produce(all.slice(0, half));
    const file = windowedCountPipeline(name, input, output, "sym");
    const env = { STREAM_CONSUMERS: "2", STREAM_STATE_DIR: "off" };
    const first = startCli(["run", file], { env });
    await waitFor(() => (lastRecord(first.records)?.metrics?.consumed ?? 0) >= half, 90_000, "the first half consumed");
    await new Promise((r) => setTimeout(r, 500));
    first.child.kill("SIGTERM");
    expect(await first.exited).toBe(0);

    await between(name);
    await produce(all.slice(half));
    const expected = expectedWindows(400, 6);
    const { run: second, records } = await runUntilOutput(file, output, (out) => finalWindows(out.map(json)).length >= expected.length, "every window", {
      env: { ...env, STREAM_IDLE_PARTITION_MS: "3000" },
      timeoutMs: 90_000,
    });
    expect(finalWindows(records.map(json))).toEqual(sorted(expected));
    return second;
  }

  test("stopped mid-stream and restarted, the state comes back from fv-state-<name> and the windows are exact", async () => {
    const second = await restartedMidStream("windows-restart");
    const m = lastRecord(second.records)!.metrics!;
    expect(m.restoredRecords).toBeGreaterThan(0);
    expect(m.restoreMs).toBeGreaterThan(0);
    expect(m.restoreRecordsPerSecond).toBe(Math.round((m.restoredRecords * 1000) / m.restoreMs));
    console.log(`restart: restored ${m.restoredRecords} changelog records in ${m.restoreMs} ms (${m.restoreRecordsPerSecond}/s)`);
  });
  // At-least-once writes a checkpoint's changelog without a transaction: librdkafka (no linger)
  // sends one task's group in several requests, and a kill between two left entries without
  // their offsets record (CI: a windowed count killed five times came out 45 for 30). Here the cut
  // group is written by hand after an orderly stop: every open window again, 1000 rows ahead.
  test("a checkpoint a kill cut short in fv-state-<name> (entries without their offsets record) is left out, and the windows are exact", async () => {
    let open: Array<{ partition: number; key: string; value: string | null }> = [];
    const second = await restartedMidStream("windows-cut", async (name) => {
      const stateTopic = `fv-state-${name}`;
      const latest = new Map<string, { partition: number; key: string; value: string | null }>();
      for (const r of await consumeAll(stateTopic, { quietMs: 10_000 })) latest.set(`${r.partition}|${text(r.key)}`, { partition: r.partition, key: text(r.key)!, value: text(r.value) });
      open = [...latest.values()].filter((e) => e.key.includes("/w:") && e.value !== null);
      expect(open.length).toBeGreaterThan(0);
      const inflated = open.map((e) => {
        const w = JSON.parse(e.value!) as { acc: number[] };
        return { topic: stateTopic, partition: e.partition, key: e.key, value: JSON.stringify({ ...w, acc: [w.acc[0]! + 1000, w.acc[1]! + 1000] }) };
      });
      await produce(inflated);
    });
    // Each partition given a cut group says so when it restores (again if it moved before its repair was written).
    const cut = second.lines.filter((line) => line.includes("cut short"));
    const named = new Set(cut.map((line) => Number(/partition (\d+): the changelog ends/.exec(line)?.[1])));
    expect([...named].sort()).toEqual([...new Set(open.map((e) => e.partition))].sort());
    console.log(`cut groups: ${open.length} window entries in ${cut.length} partition(s) left out; e.g. ${cut[0]}`);
  });

  test("ema and sma over event time across a restart: rows a little out of order, stopped mid-stream, exact indicators per window", async () => {
    const name = uniqueName("ema-restart");
    const input = `${name}-in`;
    const output = `${name}-out`;
    await createTopic(input, 4);
    // trades() in event time, then each sym's rows swapped in pairs: every sym sees its rows out
    // of order (by about a second, within the lateness), in its own partition.
    const rows = trades(input, 300, 5).map((r) => ({ ...r, row: JSON.parse(r.value as string) as { sym: string; qty: number; ts: number } }));
    const slots = new Map<string, number[]>();
    rows.forEach((r, i) => slots.set(r.row.sym, [...(slots.get(r.row.sym) ?? []), i]));
    for (const positions of slots.values()) {
      for (let k = 0; k + 1 < positions.length; k += 2) [rows[positions[k]!], rows[positions[k + 1]!]] = [rows[positions[k + 1]!]!, rows[positions[k]!]!];
    }
    const records = rows.map((r) => ({ topic: r.topic, key: r.key, value: JSON.stringify({ ...r.row, qty: r.row.qty * 10 + (r.row.ts % 7) }) }));
    // By hand, per (sym, minute) in event-time order: ema (alpha 0.3) and sma of the last 4 of qty.
    const expected = new Map<string, Record<string, unknown>>();
    const byWindow = new Map<string, Array<{ ts: number; qty: number; sym: string; start: number }>>();
    for (const r of records) {
      const row = JSON.parse(r.value) as { sym: string; qty: number; ts: number };
      const start = row.ts - ((row.ts - T0) % MINUTE);
      const key = `${row.sym}@${start}`;
      byWindow.set(key, [...(byWindow.get(key) ?? []), { ...row, start }]);
    }
    for (const [key, list] of byWindow) {
      const inOrder = [...list].sort((a, b) => a.ts - b.ts);
      if (inOrder[0]!.start >= T0 + 4 * MINUTE) continue; // the last minute stays open
      const ema = inOrder.reduce<number | null>((e, r) => (e === null ? r.qty : 0.3 * r.qty + 0.7 * e), null);
      const last4 = inOrder.slice(-4);
      expected.set(key, { windowStart: inOrder[0]!.start, windowEnd: inOrder[0]!.start + MINUTE, sym: inOrder[0]!.sym, n: inOrder.length, ema, sma: last4.reduce((s, r) => s + r.qty, 0) / last4.length });
    }
    const file = transformFile(name, input, output, {
      op: "windowedAggregate",
      timeColumn: "ts",
      windowMs: MINUTE,
      allowedLatenessMs: 5000,
      groupBy: ["sym"],
      aggs: [{ op: "count", alias: "n" }, { op: "ema", column: "qty", alpha: 0.3, alias: "ema" }, { op: "sma", column: "qty", n: 4, alias: "sma" }],
    });
    const half = Math.floor(records.length / 2);
    await produce(records.slice(0, half));
    const env = { STREAM_CONSUMERS: "2", STREAM_STATE_DIR: "off", STREAM_IDLE_PARTITION_MS: "3000" };
    const first = startCli(["run", file], { env });
    await waitFor(() => (lastRecord(first.records)?.metrics?.consumed ?? 0) >= half, 90_000, "the first half consumed");
    await new Promise((r) => setTimeout(r, 500));
    first.child.kill("SIGTERM");
    expect(await first.exited).toBe(0);
    await produce(records.slice(half));
    const { run: second, records: out } = await runUntilOutput(file, output, (got) => finalWindows(got.map(json)).length >= expected.size, "every closed window", { env, timeoutMs: 90_000 });
    expect(finalWindows(out.map(json))).toEqual(sorted([...expected.values()]));
    expect(lastRecord(second.records)!.metrics!.restoredRecords).toBeGreaterThan(0);
  });
});
