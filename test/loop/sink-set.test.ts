/**
 * The loop's SinkSet with sinks that record what they are given: which rows and offsets a
 * checkpoint writes (only of partitions still owned), rows of revoked partitions dropped, the
 * skip below a sink's own offsets, waiting out an unreachable sink, giving up on a stop.
 */
import { describe, expect, test } from "bun:test";
import type { TopicBinding } from "../../src/control/types.ts";
import { FvError } from "../../src/errors.ts";
import type { CommitOffset, InboundRecord, OutboundRecord, TopicPartition } from "../../src/kafka/port.ts";
import { PartitionSet } from "../../src/kafka/topic-partition.ts";
import { emptyCounters } from "../../src/loop/counters.ts";
import { SinkSet } from "../../src/loop/sink-set.ts";
import type { Sink, SinkRow, SinkWritten } from "../../src/sinks/sink.ts";
import { compileTopology } from "../../src/topology/compile-topology.ts";

const binding = (topic: string, extra: Partial<TopicBinding> = {}): TopicBinding => ({ apiName: topic, topic, brokers: "b:9092", policy: {}, source: "kafka", sink: "kafka", ...extra });
const bindings: Record<string, TopicBinding> = {
  orders: binding("orders"),
  totals: binding("totals", { sink: "postgres", sinkConfig: { kind: "postgres", url: "postgres://x/y", table: "t", key: ["id"] } }),
};
const stages = compileTopology({ stages: [{ inputs: ["orders"], output: "totals", steps: [{ op: "select", columns: ["id"] }] }] }).stages;

/** A sink that records each write; `fail` makes the next writes throw SINK_UNAVAILABLE. */
function recordingSink(positions = new Map<string, bigint>()) {
  const writes: Array<{ rows: number[]; offsets: string[] }> = [];
  /** Each write's `inputs` (the partitions it stands for). */
  const inputsOf: string[][] = [];
  let failures = 0;
  const sink: Sink & { writes: typeof writes; inputs: typeof inputsOf; fail(n: number): void } = {
    kind: "postgres",
    dataset: "totals",
    writes,
    inputs: inputsOf,
    fail: (n) => void (failures = n),
    positions: async () => positions,
    write: async (rows: readonly SinkRow[], offsets: readonly CommitOffset[], _deadLetter: (records: OutboundRecord[]) => Promise<void>, inputs?: readonly TopicPartition[]): Promise<SinkWritten> => {
      if (failures > 0) {
        failures--;
        throw new FvError("SINK_UNAVAILABLE", "postgres sink \"totals\" is unreachable: connect ECONNREFUSED");
      }
      writes.push({ rows: rows.map((r) => r.row.id as number), offsets: offsets.map((o) => `${o.topic}:${o.partition}@${o.offset}`) });
      inputsOf.push((inputs ?? []).map((tp) => `${tp.topic}:${tp.partition}`).sort());
      return { written: rows.length, duplicates: 0, refused: [] };
    },
    close: async () => {},
  };
  return sink;
}

function setUp(options: { exactlyOnce?: boolean; positions?: Map<string, bigint> } = {}) {
  const sink = recordingSink(options.positions);
  const counters = emptyCounters();
  const logs: string[] = [];
  const sinks = new SinkSet(stages, {
    pipeline: "p", bindings, stateDir: "/nowhere", env: {}, exactlyOnce: options.exactlyOnce ?? false,
    log: (level, message) => void logs.push(`${level} ${message}`), createSink: () => sink, retry: { firstMs: 5, maxMs: 20 },
  }, counters);
  return { sink, sinks, counters, logs };
}

const record = (partition: number, offset: number): InboundRecord => ({ topic: "orders", partition, offset: BigInt(offset), timestamp: 0n, key: null, value: null, headers: [] });
const rowOf = (partition: number, offset: number): SinkRow => ({ row: { id: offset }, key: null, partition, source: record(partition, offset), stageLabel: "stage 1" });
const owning = (...tps: TopicPartition[]) => () => new PartitionSet(tps);
const none = { size: 0, has: () => false };

describe("SinkSet", () => {
  test("a checkpoint writes the rows taken with their offsets; a partition revoked meanwhile is left out of both", async () => {
    const { sink, sinks, counters } = setUp();
    sinks.add(new Map([["totals", [rowOf(0, 10), rowOf(1, 20), rowOf(0, 11)]]]), none);
    const taken = sinks.take();
    const offsets = [{ topic: "orders", partition: 0, offset: 12n }, { topic: "orders", partition: 1, offset: 21n }];
    const leftOut = await sinks.write(taken, offsets, async () => {}, () => false, owning({ topic: "orders", partition: 0 }));
    expect(sink.writes).toEqual([{ rows: [10, 11], offsets: ["orders:0@12"] }]);
    // What was left out is answered: at-least-once does not commit its Kafka offset either.
    expect([leftOut.has({ topic: "orders", partition: 1 }), leftOut.has({ topic: "orders", partition: 0 }), leftOut.size]).toEqual([true, false, 1]);
    expect(counters.sinkWritten).toBe(2);
    // The buffer was taken: the next checkpoint has nothing of these.
    expect(sinks.take().size).toBe(0);
  });

  test("a write stands for the input partitions of its offsets and rows, a timer's rows (no source) included: those a fencing sink checks", async () => {
    const { sink, sinks } = setUp();
    const timer: SinkRow = { row: { id: 99 }, key: null, partition: 2, stageLabel: "stage 1" };
    const notMine: SinkRow = { row: { id: 98 }, key: null, partition: 3, stageLabel: "stage 1" };
    sinks.add(new Map([["totals", [rowOf(0, 10), timer, notMine]]]), none);
    await sinks.write(sinks.take(), [{ topic: "orders", partition: 1, offset: 5n }], async () => {}, () => false, owning({ topic: "orders", partition: 0 }, { topic: "orders", partition: 1 }, { topic: "orders", partition: 2 }));
    expect(sink.writes).toEqual([{ rows: [10, 99], offsets: ["orders:1@5"] }]);
    expect(sink.inputs).toEqual([["orders:0", "orders:1", "orders:2"]]);
  });

  test("rows of partitions revoked during a batch or by a rebalance are not kept", () => {
    const { sinks } = setUp();
    sinks.add(new Map([["totals", [rowOf(0, 1), rowOf(1, 2)]]]), new PartitionSet([{ topic: "orders", partition: 1 }]));
    sinks.add(new Map([["totals", [rowOf(2, 3), rowOf(0, 4)]]]), none);
    sinks.assigned([], [{ topic: "orders", partition: 2 }]);
    expect(sinks.take().get("totals")!.map((r) => r.row.id)).toEqual([1, 4]);
  });

  test("a stateless stage skips records below the sink's own offsets; not under exactly-once; read again after a rebalance", async () => {
    const positions = new Map([["orders:0", 100n]]);
    const { sinks } = setUp({ positions });
    await sinks.prepare([record(0, 5)], () => false);
    expect([sinks.written("totals", record(0, 99)), sinks.written("totals", record(0, 100)), sinks.written("totals", record(1, 0))]).toEqual([true, false, false]);
    positions.set("orders:0", 200n);
    sinks.assigned([{ topic: "orders", partition: 0 }], []);
    expect(sinks.written("totals", record(0, 150))).toBe(false); // not read yet: nothing is skipped
    await sinks.prepare([record(0, 150)], () => false);
    expect(sinks.written("totals", record(0, 150))).toBe(true);
    const eos = setUp({ exactlyOnce: true, positions });
    await eos.sinks.prepare([record(0, 5)], () => false);
    expect(eos.sinks.written("totals", record(0, 5))).toBe(false);
  });

  test("ownership is the one when the write goes through: a partition lost while the sink was down is left out and answered", async () => {
    const { sink, sinks } = setUp();
    sink.fail(2);
    sinks.add(new Map([["totals", [rowOf(0, 1), rowOf(1, 2)]]]), none);
    let calls = 0;
    // Both owned at the first attempts; partition 1 gone by the one that goes through.
    const owned = () => new PartitionSet(++calls < 3 ? [{ topic: "orders", partition: 0 }, { topic: "orders", partition: 1 }] : [{ topic: "orders", partition: 0 }]);
    const leftOut = await sinks.write(sinks.take(), [{ topic: "orders", partition: 0, offset: 2n }, { topic: "orders", partition: 1, offset: 3n }], async () => {}, () => false, owned);
    expect(sink.writes).toEqual([{ rows: [1], offsets: ["orders:0@2"] }]);
    expect([...leftOut].map((tp) => `${tp.topic}:${tp.partition}`)).toEqual(["orders:1"]);
  });

  test("behind a repartition hop, the sink follows the hop topic: a window fired on hop partition 5 is written while that partition is owned", async () => {
    const windowed = compileTopology({ stages: [{ inputs: ["orders"], output: "totals", steps: [{ op: "windowedAggregate", timeColumn: "ts", windowMs: 60_000, groupBy: ["id"], aggs: [{ op: "count" }] }] }] }).stages;
    const sink = recordingSink();
    const sinks = new SinkSet(windowed, {
      pipeline: "p", bindings, stateDir: "/nowhere", env: {}, exactlyOnce: false, log: () => {}, createSink: () => sink, hops: { 0: { topic: "fv-repartition-p-1" } },
    }, emptyCounters());
    // Fired by a timer: no source record, the hop partition's number.
    const fired: SinkRow = { row: { id: 7 }, key: null, partition: 5, stageLabel: "stage 1" };
    sinks.add(new Map([["totals", [fired]]]), none);
    const hop5 = { topic: "fv-repartition-p-1", partition: 5 };
    const leftOut = await sinks.write(sinks.take(), [{ ...hop5, offset: 9n }, { topic: "orders", partition: 1, offset: 4n }], async () => {}, () => false, owning(hop5, { topic: "orders", partition: 1 }));
    expect(sink.writes).toEqual([{ rows: [7], offsets: ["fv-repartition-p-1:5@9"] }]);
    expect(leftOut.size).toBe(0);
    // A rebalance that moves hop partition 5 drops its buffered rows.
    sinks.add(new Map([["totals", [fired]]]), none);
    sinks.assigned([], [hop5]);
    expect(sinks.take().get("totals")).toEqual([]);
  });

  test("an unreachable sink is waited out (sinksWaiting says why, then clears); a stop gives up", async () => {
    const { sink, sinks, counters, logs } = setUp();
    sink.fail(3);
    sinks.add(new Map([["totals", [rowOf(0, 1)]]]), none);
    const seen: Array<Record<string, string>> = [];
    const watching = setInterval(() => seen.push({ ...counters.sinksWaiting }), 1);
    await sinks.write(sinks.take(), [], async () => {}, () => false, owning({ topic: "orders", partition: 0 }));
    clearInterval(watching);
    expect(sink.writes).toEqual([{ rows: [1], offsets: [] }]);
    expect(seen.some((w) => w.totals?.includes("unreachable"))).toBe(true);
    expect(counters.sinksWaiting).toEqual({});
    expect(logs.filter((l) => l.startsWith("warn")).length).toBe(1);
    expect(logs.at(-1)).toBe('info sink "totals" answers again: the stream goes on');
    sink.fail(100);
    sinks.add(new Map([["totals", [rowOf(0, 2)]]]), none);
    const failure = await sinks.write(sinks.take(), [], async () => {}, () => true, owning({ topic: "orders", partition: 0 })).catch((e: FvError) => e);
    expect((failure as FvError).code).toBe("SINK_UNAVAILABLE");
    expect((failure as FvError).message).toContain("stopping while");
  });
});
