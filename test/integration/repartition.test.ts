/**
 * Repartition hops through the real broker: a windowed count grouped by a column that is not the
 * message key, and a join of two topics keyed differently, give exact global results; the same
 * count with the hop turned off gives partial counts per partition (so these tests can fail).
 *
 * The count's input is skewed on purpose: partitions 0 and 1 hold 10 times fewer rows per minute
 * of event time than partitions 2 and 3, so as a consumer reads them at similar record rates the
 * sparse partitions run far ahead in event time. A downstream watermark taken from the rows it
 * sees (max event time) would make the dense partitions' rows late and drop them; the watermark
 * that crosses the hop is the minimum over the upstream partitions, so nothing is late.
 */
import { describe, expect, test } from "bun:test";
import type { InboundRecord, OutboundRecord } from "../../src/kafka/port.ts";
import { lastRecord, runCli, startCli, waitFor } from "../helpers/cli.ts";
import { createTopic, json, partitionCount, produce, uniqueName } from "../helpers/kafka.ts";
import { MINUTE, transformFile, windowedCountPipeline } from "../helpers/pipelines.ts";
import { runUntilOutput, startStream } from "../helpers/streams.ts";

type Row = Record<string, unknown>;
const T0 = Date.UTC(2026, 0, 1);
const MINUTES = 6;
const GROUPS = 8;
const rateOf = (partition: number) => (partition < 2 ? 300 : 3000);
const randomKey = () => crypto.randomUUID();

/** Rows per partition in event-time order; random message keys; the group column `g` is not the key. */
function skewedInput(topic: string): { records: OutboundRecord[]; expected: Map<string, { n: number; qty: number }> } {
  const records: OutboundRecord[] = [];
  const expected = new Map<string, { n: number; qty: number }>();
  for (let p = 0; p < 4; p++) {
    const rate = rateOf(p);
    for (let m = 0; m < MINUTES; m++) {
      for (let i = 0; i < rate; i++) {
        const row = { g: `g${(i + p) % GROUPS}`, qty: 1 + (i % 3), ts: T0 + m * MINUTE + Math.floor((i * MINUTE) / rate) };
        records.push({ topic, partition: p, key: randomKey(), value: JSON.stringify(row) });
        // The last minute's windows stay open.
        if (m === MINUTES - 1) continue;
        const k = `${row.g}@${T0 + m * MINUTE}`;
        const e = expected.get(k) ?? { n: 0, qty: 0 };
        e.n++;
        e.qty += row.qty;
        expected.set(k, e);
      }
    }
  }
  return { records, expected };
}

/** Output rows as `g@windowStart → { n, qty }`, and how many rows each (group, window) got. */
function windows(rows: Row[]) {
  const latest = new Map<string, { n: number; qty: number }>();
  const copies = new Map<string, number>();
  for (const r of rows) {
    const k = `${r.g}@${r.windowStart}`;
    latest.set(k, { n: r.n as number, qty: r.qty as number });
    copies.set(k, (copies.get(k) ?? 0) + 1);
  }
  return { latest, copies };
}
const sortedEntries = <V>(m: Map<string, V>) => [...m.entries()].sort(([a], [b]) => a.localeCompare(b));

describe("repartition through fv-repartition-<name>-<stage>", () => {
  test("validate names the hop and why", async () => {
    const file = windowedCountPipeline("validate-hop", "trades", "counts", "g");
    const result = await runCli(["validate", file, "--offline"]); // the topics are not made: only the keying is read
    expect(result.code).toBe(0);
    expect(result.lines).toContain('  stage 1: repartition through fv-repartition-validate-hop-1 keyed by [g]: input "trades" is keyed by its message key, not by [g]');
    const off = await runCli(["validate", windowedCountPipeline("validate-nohop", "trades", "counts", "g", { repartition: false }), "--offline"]);
    expect(off.lines).toContain("  stage 1: no repartition: step 1 (windowedAggregate) sets repartition = false (the inputs must already be keyed by [g])");
  });

  test("a windowed count grouped by a non-key column: exact global counts, with a second consumer starting late", async () => {
    const name = uniqueName("hop-count");
    const input = `${name}-in`;
    const output = `${name}-out`;
    await createTopic(input, 4);
    const { records, expected } = skewedInput(input);
    await produce(records);
    const file = windowedCountPipeline(name, input, output, "g");
    const env = { STREAM_BATCH_SIZE: "200", STREAM_SESSION_TIMEOUT_MS: "6000" };
    const { run: a, out } = await startStream(file, output, { env });
    // The second consumer joins once the first is well into the input.
    await waitFor(() => (lastRecord(a.records)?.metrics?.consumed ?? 0) > 8000, 90_000, "the first consumer under way");
    const b = startCli(["run", file], { env });
    const ownsSome = (run: typeof b) => run.records.some((r) => (r.metrics?.partitions.length ?? 0) > 0);
    try {
      await waitFor(() => ownsSome(b), 60_000, "the second consumer to own partitions");
      await waitFor(() => windows(out.records.map(json)).latest.size >= expected.size, 120_000, "every (group, window)");
      await new Promise((r) => setTimeout(r, 1500));
    } finally {
      a.child.kill("SIGTERM");
      b.child.kill("SIGTERM");
    }
    expect(await a.exited).toBe(0);
    expect(await b.exited).toBe(0);
    const rows = (await out.stop()).map(json);
    expect(sortedEntries(windows(rows).latest)).toEqual(sortedEntries(expected));
    const ma = lastRecord(a.records)!;
    const mb = lastRecord(b.records)!;
    expect(ma.metrics!.late + mb.metrics!.late).toBe(0);
    expect(ma.metrics!.consumed + mb.metrics!.consumed).toBeGreaterThanOrEqual(records.length);
    expect(ma.metrics!.repartitioned + mb.metrics!.repartitioned).toBeGreaterThanOrEqual(records.length);
    // The status lists the internal topics.
    expect(ma.internalTopics).toEqual([
      { topic: `fv-state-${name}`, partitions: 4, purpose: "state" },
      { topic: `fv-repartition-${name}-1`, partitions: 4, purpose: "repartition", stage: 1, keyedBy: ["g"] },
    ]);
    expect(await partitionCount(`fv-repartition-${name}-1`)).toBe(4);
  });

  test("the same count with repartition = false gives partial counts per partition", async () => {
    const name = uniqueName("nohop-count");
    const input = `${name}-in`;
    const output = `${name}-out`;
    await createTopic(input, 4);
    const { records, expected } = skewedInput(input);
    await produce(records);
    // Lateness covers the skew here, so what differs is only the partitioning.
    const file = windowedCountPipeline(name, input, output, "g", { allowedLatenessMs: 10 * MINUTE, repartition: false });
    // A flush row per partition, far ahead, closes every window.
    await produce([0, 1, 2, 3].map((p) => ({ topic: input, partition: p, key: null, value: JSON.stringify({ g: "flush", qty: 0, ts: T0 + 30 * MINUTE }) })));
    const partial = (out: InboundRecord[]) => out.map(json).filter((r) => r.g !== "flush");
    const total = (out: InboundRecord[]) => partial(out).reduce((sum, r) => sum + (r.n as number), 0);
    // Every window closes (the flush rows are 24 minutes past the last one): every row is counted once, in parts.
    const result = await runUntilOutput(file, output, (out) => total(out) >= records.length, "every partial window", { env: { STREAM_CONSUMERS: "2" }, timeoutMs: 120_000 });
    const rows = partial(result.records);
    const { copies } = windows(rows);
    // Each (group, window) came out once per partition that held it, each with that partition's part.
    expect(Math.max(...copies.values())).toBeGreaterThan(1);
    expect(rows.length).toBeGreaterThan(expected.size);
    const firstWindow = `g0@${T0}`;
    const parts = rows.filter((r) => `${r.g}@${r.windowStart}` === firstWindow).map((r) => r.n as number);
    expect(parts.length).toBeGreaterThan(1);
    expect(Math.max(...parts)).toBeLessThan(expected.get(firstWindow)!.n);
    expect(parts.reduce((a, b) => a + b, 0)).toBe(expected.get(firstWindow)!.n);
  });

  test("a join of two topics keyed differently (and partitioned 4 and 2) gives the exact pairs", async () => {
    const name = uniqueName("hop-join");
    const orders = `${name}-orders`;
    const quotes = `${name}-quotes`;
    const output = `${name}-out`;
    await createTopic(orders, 4);
    await createTopic(quotes, 2);
    const SYMS = ["ACME", "GLOBEX", "INITECH", "UMBRELLA", "HOOLI", "STARK"];
    const orderRows: Row[] = [];
    const quoteRows: Row[] = [];
    for (let i = 0; i < 600; i++) orderRows.push({ orderId: `o${i}`, sym: SYMS[i % SYMS.length], qty: 1 + (i % 7), ts: T0 + i * 1000 });
    for (let i = 0; i < 300; i++) quoteRows.push({ ticker: SYMS[(i * 5) % SYMS.length], bid: 100 + i, ts: T0 + i * 2000 + 500 });
    // Orders keyed by order id, quotes by nothing in particular: neither by the join key.
    await produce(orderRows.map((r) => ({ topic: orders, key: r.orderId as string, value: JSON.stringify(r) })));
    await produce(quoteRows.map((r) => ({ topic: quotes, key: randomKey(), value: JSON.stringify(r) })));
    // Far-ahead rows on every partition of both: every buffered row is evicted, nothing more matches.
    await produce([
      ...[0, 1, 2, 3].map((p) => ({ topic: orders, partition: p, key: null, value: JSON.stringify({ orderId: "flush", sym: "FLUSH-O", qty: 0, ts: T0 + 3600_000 }) })),
      ...[0, 1].map((p) => ({ topic: quotes, partition: p, key: null, value: JSON.stringify({ ticker: "FLUSH-Q", bid: 0, ts: T0 + 3600_000 }) })),
    ]);
    const WITHIN = 1500;
    const file = transformFile(name, [orders, quotes], output, { op: "streamJoin", timeColumn: "ts", leftKey: "sym", rightKey: "ticker", withinMs: WITHIN, type: "inner", rightColumns: ["bid", "ts"] });
    const validate = await runCli(["validate", file]);
    expect(validate.lines.join("\n")).toContain(`stage 1: repartition through fv-repartition-${name}-1 keyed by [sym]`);
    expect(validate.lines.join("\n")).toContain("both join inputs go through it, so they are co-partitioned");
    const expected: string[] = [];
    for (const o of orderRows) for (const q of quoteRows) if (o.sym === q.ticker && Math.abs((o.ts as number) - (q.ts as number)) <= WITHIN) expected.push(`${o.orderId}|${q.bid}`);
    expect(expected.length).toBeGreaterThan(50);
    const pair = (r: InboundRecord) => `${json(r).orderId}|${json(r).right_bid}`;
    const { records: joined } = await runUntilOutput(file, output, (out) => new Set(out.map(pair)).size >= expected.length, "every pair", {
      env: { STREAM_CONSUMERS: "2", STREAM_IDLE_PARTITION_MS: "60000" },
      timeoutMs: 120_000,
      settleMs: 1500,
    });
    const pairs = [...new Set(joined.map(pair))].sort();
    expect(pairs).toEqual(expected.sort());
    expect(await partitionCount(`fv-repartition-${name}-1`)).toBe(4);
  });
});
