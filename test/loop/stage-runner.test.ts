/** StageRunner on plain arrays: records in, emissions out, no Kafka client anywhere. */
import { describe, expect, test } from "bun:test";
import type { ComputeStep } from "../../src/compute/index.ts";
import { compileTopology } from "../../src/topology/compile-topology.ts";
import type { TopicBinding, Topology } from "../../src/control/types.ts";
import type { Admin, InboundRecord } from "../../src/kafka/port.ts";
import { PartitionSet } from "../../src/kafka/topic-partition.ts";
import { emptyCounters } from "../../src/loop/counters.ts";
import { OperatorTasks } from "../../src/loop/operator-tasks.ts";
import type { HopPlan } from "../../src/loop/plan.ts";
import { UpstreamTracker } from "../../src/loop/repartition.ts";
import { countEmissions, routesOf, StageRunner } from "../../src/loop/stage-runner.ts";

const binding = (topic: string, deadLetter?: string): TopicBinding =>
  ({ apiName: topic, topic, brokers: "x:1", policy: deadLetter ? { deadLetter } : {}, source: "kafka", sink: "kafka" }) as unknown as TopicBinding;
const bindings = { in: binding("in", "in-dlq"), out: binding("out"), other: binding("other") };
const encoder = new TextEncoder();
const decoder = new TextDecoder();
const text = (v: unknown) => (v instanceof Uint8Array ? decoder.decode(v) : v);

const record = (offset: number, value: unknown, partition = 0, topic = "in"): InboundRecord => ({
  topic, partition, offset: BigInt(offset), timestamp: 0n, key: encoder.encode(`k${offset}`),
  value: typeof value === "string" ? encoder.encode(value) : encoder.encode(JSON.stringify(value)), headers: [["trace", encoder.encode("t")]],
});

const metrics = () => {
  const seen = { late: 0, latencies: 0 };
  return { seen, metrics: { lateRecordsDropped: (_s: number, n: number) => void (seen.late += n), stepLatency: () => void seen.latencies++ } };
};

function runner(topology: Topology, options: { hops?: Record<number, HopPlan>; lateRows?: "drop" | "deadLetter" } = {}) {
  const stages = compileTopology(topology).stages;
  const m = metrics();
  const run = new StageRunner(routesOf(stages, { bindings, hops: options.hops }), { lateRows: options.lateRows ?? "drop", metrics: m.metrics });
  return { run, stages, seen: m.seen };
}

const stateless: Topology = {
  stages: [{ inputs: ["in"], output: "out", steps: [{ op: "filter", expression: "id != 2" }, { op: "applyExpression", column: "half", expression: "10 / id" }] }],
};

describe("a stateless stage", () => {
  test("emits one output per row with the record's key and headers; a filtered row is dropped, a failing one dead-lettered", async () => {
    const { run } = runner(stateless);
    const e = await run.run([record(0, { id: 1 }), record(1, { id: 2 }), record(2, "not json"), record(3, [1])]);
    expect(e.out.map((r) => [r.topic, text(r.key), r.value])).toEqual([
      ["out", "k0", JSON.stringify({ id: 1, half: 10 })],
      ["in-dlq", "k2", record(2, "not json").value],
      ["in-dlq", "k3", record(3, [1]).value],
    ]);
    expect(e.out[0]!.headers).toEqual([["trace", encoder.encode("t")]]);
    expect({ consumed: e.consumed, emitted: e.emitted, dropped: e.dropped, deadLettered: e.deadLettered, poison: e.poison }).toEqual({
      consumed: 4, emitted: 1, dropped: 1, deadLettered: 2, poison: ["invalid_json", "not_object"],
    });
  });

  test("a dead letter carries the failure and where the record came from, after the record's own headers", async () => {
    const { run } = runner(stateless);
    const e = await run.run([record(7, "{", 3)]);
    const headers = Object.fromEntries(e.out[0]!.headers!.map(([k, v]) => [k, text(v)]));
    expect(e.out[0]!.headers![0]![0]).toBe("trace");
    expect(headers).toMatchObject({
      "fv.error.reason": "invalid_json", "fv.error.stage": "stage 1 (in → out)", "fv.source.topic": "in", "fv.source.partition": "3", "fv.source.offset": "7",
    });
  });

  test("records of partitions revoked during the batch are not processed", async () => {
    const { run } = runner(stateless);
    const e = await run.run([record(0, { id: 1 }, 0), record(1, { id: 1 }, 1)], { revoked: new PartitionSet([{ topic: "in", partition: 1 }]) });
    expect(e.consumed).toBe(1);
    expect(e.out).toHaveLength(1);
  });

  test("a record goes to every stage that reads its topic, each with its own parse", async () => {
    const { run } = runner({
      stages: [
        { inputs: ["in"], output: "out", steps: [{ op: "rename", mapping: { id: "a" } }] },
        { inputs: ["in"], output: "other", steps: [{ op: "select", columns: ["id"] }] },
      ],
    });
    const e = await run.run([record(0, { id: 1, x: 2 })]);
    expect(e.out.map((r) => [r.topic, r.value])).toEqual([["out", JSON.stringify({ a: 1, x: 2 })], ["other", JSON.stringify({ id: 1 })]]);
    expect(e.consumed).toBe(1);
  });

  test("a stage that only filters and sets new columns writes its source text with them appended; a row that had one is written whole", async () => {
    const { run, stages } = runner(stateless);
    expect(stages[0]!.appends).toEqual(["half"]);
    const e = await run.run([record(0, '{"id": 1, "n": 1.50}'), record(1, { id: 5, half: "old" }), record(2, { id: 4, z: [1] })]);
    expect(e.out.map((r) => r.value)).toEqual([
      '{"id": 1, "n": 1.50,"half":10}', // the source's fields as they were written
      JSON.stringify({ id: 5, half: 2 }), // the step replaced a field of the source: serialized whole
      '{"id":4,"z":[1],"half":2.5}',
    ]);
    expect(e.out.map((r) => JSON.parse(String(r.value)))).toEqual([{ id: 1, n: 1.5, half: 10 }, { id: 5, half: 2 }, { id: 4, z: [1], half: 2.5 }]);
  });

  test("a stage that only filters writes the source record's bytes; one that renames or selects serializes the row", async () => {
    const { run, stages } = runner({
      stages: [
        { inputs: ["in"], output: "out", steps: [{ op: "filter", expression: "id != 2" }] },
        { inputs: ["in"], output: "other", steps: [{ op: "applyExpression", column: "b", expression: "id" }, { op: "select", columns: ["b"] }] },
      ],
    });
    expect(stages.map((stage) => stage.appends)).toEqual([[], undefined]);
    // A column named __proto__ is no field of the row (an assignment sets the prototype): such a stage is serialized whole.
    expect(runner({ stages: [{ inputs: ["in"], output: "out", steps: [{ op: "applyExpression", column: "__proto__", expression: "1" }] }] }).stages[0]!.appends).toBeUndefined();
    const source = record(0, '{ "id" : 1 }');
    const e = await run.run([source, record(1, { id: 2 })]);
    expect(e.out.map((r) => [r.topic, text(r.value)])).toEqual([["out", '{ "id" : 1 }'], ["other", '{"b":1}'], ["other", '{"b":2}']]);
    expect(e.out[0]!.value).toBe(source.value);
  });

  test("the counts add up into counters, poison by reason", async () => {
    const { run } = runner(stateless);
    const counters = emptyCounters();
    countEmissions(counters, await run.run([record(0, "x"), record(1, "y"), record(2, { id: 1 })]));
    expect(counters).toMatchObject({ consumed: 3, emitted: 1, poison: 2, deadLettered: 2, poisonByReason: { invalid_json: 2 } });
  });
});

describe("a compute stage", () => {
  const topology: Topology = {
    stages: [{ inputs: ["in"], output: "out", steps: [{ op: "wasm", ref: "t" }, { op: "filter", expression: "keep" }] }],
  };
  const compute = (results: Array<{ rows: Array<Record<string, unknown>> } | { poison: { reason: string; message: string } }>) =>
    new Map([[0, { processBatch: async () => results } as unknown as ComputeStep]]);

  test("runs the batch's rows at once: poison results dead-lettered, no output dropped, the steps after it on every output", async () => {
    const { run, seen } = runner(topology);
    const e = await run.run([record(0, { id: 0 }), record(1, { id: 1 }), record(2, { id: 2 })], {
      compute: compute([{ rows: [{ keep: true, n: 1 }, { keep: false }] }, { poison: { reason: "plugin_error", message: "boom" } }, { rows: [] }]),
    });
    expect(e.out.map((r) => [r.topic, text(r.key), r.value])).toEqual([
      ["out", "k0", JSON.stringify({ keep: true, n: 1 })],
      ["in-dlq", "k1", record(1, { id: 1 }).value],
    ]);
    // One row filtered after the step, one input with no output at all.
    expect({ emitted: e.emitted, dropped: e.dropped, poison: e.poison, deadLettered: e.deadLettered }).toEqual({ emitted: 1, dropped: 2, poison: ["plugin_error"], deadLettered: 1 });
    expect(seen.latencies).toBe(1);
  });

  /** A step that answers each call when told to, and records the ids it was handed and when. */
  function heldStep(overlaps: boolean) {
    const calls: Array<{ ids: unknown[]; answer(): void }> = [];
    const step = {
      batchSize: 2,
      overlaps,
      processBatch: (rows: Array<Record<string, unknown>>) => new Promise((resolve) => {
        calls.push({ ids: rows.map((r) => r.id), answer: () => resolve(rows.map((r) => ({ rows: [{ keep: true, id: r.id }] }))) });
      }),
    } as unknown as ComputeStep;
    return { calls, compute: new Map([[0, step]]) };
  }
  const five = () => [0, 1, 2, 3, 4].map((i) => record(i, { id: i }));

  test("a step that takes batches while it works gets each full one as soon as it is read; its outputs keep the records' order, whatever order the answers come in", async () => {
    const { run, seen } = runner(topology);
    const { calls, compute } = heldStep(true);
    const running = run.run(five(), { compute });
    // Every part was handed over while the batch was read: two full ones, and the rest at its end.
    expect(calls.map((c) => c.ids)).toEqual([[0, 1], [2, 3], [4]]);
    calls[2]!.answer();
    calls[1]!.answer();
    calls[0]!.answer();
    const e = await running;
    expect(e.out.map((r) => [text(r.key), r.value])).toEqual([0, 1, 2, 3, 4].map((i) => [`k${i}`, JSON.stringify({ keep: true, id: i })]));
    expect({ emitted: e.emitted, dropped: e.dropped }).toEqual({ emitted: 5, dropped: 0 });
    expect(seen.latencies).toBe(1);
  });

  test("a batch that fails while parts are handed over fails with its own error; the parts' failures are not left unhandled", async () => {
    // Two stages read "in": a compute stage (each row handed over as it is read) and a windowed
    // count whose state cannot be read, which fails the batch at its first row.
    const stages = compileTopology({
      stages: [
        { inputs: ["in"], output: "out", steps: [{ op: "wasm", ref: "t" }] },
        { inputs: ["in"], output: "other", steps: [{ op: "windowedAggregate", timeColumn: "ts", windowMs: 60_000, groupBy: ["g"], aggs: [{ op: "count", alias: "n" }] }] },
      ],
    }).stages;
    const run = new StageRunner(routesOf(stages, { bindings }), { lateRows: "drop", metrics: metrics().metrics });
    const broken = { readPartition: async () => Promise.reject(new Error("the state topic cannot be read")) } as unknown as Admin;
    const tasks = new OperatorTasks(stages, broken, { stateTopic: "fv-state-x", idlePartitionMs: 10_000, maxStateKeys: 1000 }, emptyCounters());
    tasks.setStageTopics(stages[1]!, ["in"]);
    const handed: Array<(error: Error) => void> = [];
    const step = { batchSize: 1, overlaps: true, processBatch: () => new Promise((_, reject) => handed.push(reject)) } as unknown as ComputeStep;
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => void unhandled.push(reason);
    process.on("unhandledRejection", onUnhandled);
    try {
      const failed = run.run([record(0, { id: 0, g: "a", ts: 0 }), record(1, { id: 1, g: "a", ts: 1 })], { compute: new Map([[0, step]]), tasks });
      await expect(failed).rejects.toThrow("the state topic cannot be read");
      expect(handed.length).toBeGreaterThan(0);
      for (const reject of handed) reject(new Error("the plugin is closed"));
      await new Promise((resolve) => setTimeout(resolve, 20));
      expect(unhandled).toEqual([]);
    } finally {
      process.off("unhandledRejection", onUnhandled);
      await tasks.close();
    }
  });

  test("a step that does not take batches while it works gets the batch's rows in one call", async () => {
    const { run } = runner(topology);
    const { calls, compute } = heldStep(false);
    const running = run.run(five(), { compute });
    expect(calls.map((c) => c.ids)).toEqual([[0, 1, 2, 3, 4]]);
    calls[0]!.answer();
    expect((await running).out).toHaveLength(5);
  });
});

describe("a stateful stage", () => {
  const MINUTE = 60_000;
  const topology: Topology = {
    stages: [{
      inputs: ["in"], output: "out",
      steps: [{ op: "windowedAggregate", timeColumn: "ts", windowMs: MINUTE, groupBy: ["g"], aggs: [{ op: "count", alias: "n" }] }, { op: "applyExpression", column: "inv", expression: "1 / (n - 2)" }],
    }],
  };
  const noState = { readPartition: async () => [] } as unknown as Admin;
  const tasksFor = (stages: ReturnType<typeof compileTopology>["stages"]) => {
    const tasks = new OperatorTasks(stages, noState, { stateTopic: "fv-state-x", idlePartitionMs: 10_000, maxStateKeys: 1000 }, emptyCounters());
    tasks.setStageTopics(stages[0]!, ["in"]);
    return tasks;
  };

  test("rows go to the partition's operator; fired rows are keyed by the group key, carry no headers, and a failing one is dead-lettered as itself", async () => {
    const { run, stages } = runner(topology);
    const tasks = tasksFor(stages);
    const e = await run.run([record(0, { g: "a", ts: 10 }), record(1, { g: "b", ts: 20 }), record(2, { g: "b", ts: 30 }), record(3, { g: "a", ts: 2 * MINUTE })], { tasks });
    expect(e.out).toEqual([]);
    for (const fired of tasks.advance([{ topic: "in", partition: 0 }])) run.fire(e, fired.stage, fired.rows, fired.partition);
    const out = e.out.map((r) => ({ topic: r.topic, key: r.key, value: JSON.parse(r.value as string), headers: r.headers }));
    // n = 1 for a: 1 / (1 - 2); n = 2 for b: division by zero, poison.
    expect(out[0]).toMatchObject({ topic: "out", key: "a", value: { g: "a", n: 1, inv: -1 }, headers: undefined });
    expect(out[1]).toMatchObject({ topic: "in-dlq", key: null, value: { g: "b", n: 2 } });
    expect(Object.fromEntries(out[1]!.headers!.map(([k, v]) => [k, text(v)]))).toMatchObject({ "fv.error.stage": "stage 1 (in → out)" });
    expect(e.poison).toHaveLength(1);
    expect({ emitted: e.emitted, deadLettered: e.deadLettered }).toEqual({ emitted: 1, deadLettered: 1 });
  });

  // Two stateful stages read the same topic: while the first one's task waits for its restore,
  // the partition is revoked. The second stage's task was ready, so its route took the row without
  // an await, and without the revoked check that follows the await: the row went into state that
  // the partition's next owner also builds (its offset marked covered, so a re-read skipped it).
  test("a row whose partition is revoked while an earlier route of it waits for a restore goes into no stage, ready or not", async () => {
    const agg = (output: string) => ({ inputs: ["in"], output, steps: [{ op: "windowedAggregate", timeColumn: "ts", windowMs: MINUTE, groupBy: ["g"], aggs: [{ op: "count", alias: "n" }] }] });
    const { run, stages } = runner({ stages: [agg("out"), agg("other")] });
    const revoked = new PartitionSet();
    const admin = { readPartition: async () => (revoked.add({ topic: "in", partition: 0 }), []) } as unknown as Admin;
    const tasks = new OperatorTasks(stages, admin, { stateTopic: "fv-state-x", idlePartitionMs: 10_000, maxStateKeys: 1000 }, emptyCounters());
    for (const stage of stages) tasks.setStageTopics(stage, ["in"]);
    const second = await tasks.task(stages[1]!, 0);
    revoked.delete({ topic: "in", partition: 0 });
    const before = new Map(second.covered);
    await run.run([record(5, { g: "a", ts: 10 })], { tasks, revoked });
    expect(revoked.has({ topic: "in", partition: 0 })).toBe(true);
    expect(second.covered).toEqual(before);
  });

  test("a late row is counted, and dead-lettered when STREAM_LATE_ROWS says so", async () => {
    const { run, stages, seen } = runner(topology, { lateRows: "deadLetter" });
    const tasks = tasksFor(stages);
    await run.run([record(0, { g: "a", ts: 5 * MINUTE })], { tasks });
    tasks.advance([{ topic: "in", partition: 0 }]);
    const e = await run.run([record(1, { g: "a", ts: 10 })], { tasks });
    expect(seen.late).toBe(1);
    expect(e.out.map((r) => r.topic)).toEqual(["in-dlq"]);
    expect(Object.fromEntries(e.out[0]!.headers!.map(([k, v]) => [k, text(v)]))["fv.error.reason"]).toBe("late");
    expect({ deadLettered: e.deadLettered, poison: e.poison }).toEqual({ deadLettered: 1, poison: [] });
  });

  test("through a repartition hop: rows go re-keyed into the hop topic with their source, and the upstream partition's event time is noted", async () => {
    const hops = { 0: { topic: "fv-repartition-x-1", partitions: 2, keyColumns: [["g"]], upstream: ["in:0"] } };
    const { run } = runner(topology, { hops });
    const upstream = new UpstreamTracker([{ stageIndex: 0, topic: "fv-repartition-x-1", partitions: 2, inputs: new Set(["in"]) }], 10_000);
    const e = await run.run([record(4, { g: "a", ts: 1234 }), record(5, { g: "a" })], { upstream });
    expect(e.out.map((r) => [r.topic, r.key, r.headers])).toEqual([
      ["fv-repartition-x-1", "a", [["fv.source", "in:0"], ["fv.offset", "4"]]],
      ["in-dlq", encoder.encode("k5"), expect.anything()],
    ]);
    expect({ repartitioned: e.repartitioned, poison: e.poison.length }).toEqual({ repartitioned: 1, poison: 1 });
    const announced = upstream.announce(Date.now(), 0, [{ topic: "in", partition: 0 }], { knownBehind: () => false, caughtUp: () => false });
    expect(announced.map((r) => [r.topic, r.partition, JSON.parse(r.value as string)])).toEqual([
      ["fv-repartition-x-1", 0, { source: "in:0", watermark: 1234, idle: false }],
      ["fv-repartition-x-1", 1, { source: "in:0", watermark: 1234, idle: false }],
    ]);
  });
});
