/** OperatorTasks' watermarks: across a repartition hop, and event-time progress that survives a restore. */
import { describe, expect, test } from "bun:test";
import { compileTopology } from "../../src/topology/compile-topology.ts";
import type { Admin, InboundRecord } from "../../src/kafka/port.ts";
import { emptyCounters } from "../../src/loop/counters.ts";
import { OperatorTasks } from "../../src/loop/operator-tasks.ts";

const MINUTE = 60_000;
const stage = compileTopology({
  stages: [{ inputs: ["in"], output: "out", steps: [{ op: "windowedAggregate", timeColumn: "ts", windowMs: MINUTE, groupBy: ["g"], aggs: [{ op: "count", alias: "n" }] }] }],
}).stages[0]!;
const inbound = (topic: string, partition: number, offset: number, headers: Array<[string, Uint8Array]> = []): InboundRecord => ({
  topic, partition, offset: BigInt(offset), timestamp: 0n, key: null, value: null, headers,
});
const noState = { readPartition: async () => [] } as unknown as Admin;
const options = { stateTopic: "fv-state-x", idlePartitionMs: 10_000, maxStateKeys: 1_000_000 };
const HOP = "fv-repartition-x-1";

function hopTasks(admin: Admin = noState) {
  const tasks = new OperatorTasks([stage], admin, options, emptyCounters());
  tasks.setStageTopics(stage, [HOP]);
  tasks.setUpstream(stage, ["in:0", "in:1"]);
  return tasks;
}

describe("watermarks across a repartition hop", () => {
  test("the minimum over every upstream partition: nothing fires before both are heard, a fast one cannot close a slow one's window", async () => {
    const tasks = hopTasks();
    const task = await tasks.task(stage, 0);
    tasks.process(task, inbound(HOP, 0, 0), { g: "a", ts: 10 }, 0, { key: "in:0", offset: 0n });
    tasks.process(task, inbound(HOP, 0, 1), { g: "a", ts: 20 }, 0, { key: "in:1", offset: 0n });
    // Upstream 0 is far ahead; upstream 1 not heard yet: nothing fires.
    tasks.hearWatermark(stage, 0, "in:0", 5 * MINUTE, false);
    expect(tasks.advance([{ topic: HOP, partition: 0 }])).toEqual([]);
    // Upstream 1 is still in the first minute: the window stays open, and its late row still counts.
    tasks.hearWatermark(stage, 0, "in:1", 30, false);
    expect(tasks.advance([{ topic: HOP, partition: 0 }])).toEqual([]);
    expect(tasks.process(task, inbound(HOP, 0, 2), { g: "a", ts: 40 }, 0, { key: "in:1", offset: 1n }).late).toEqual([]);
    // Upstream 1 moves past the window: it fires with all three rows.
    tasks.hearWatermark(stage, 0, "in:1", MINUTE, false);
    expect(tasks.advance([{ topic: HOP, partition: 0 }]).flatMap((f) => f.rows)).toEqual([{ windowStart: 0, windowEnd: MINUTE, g: "a", n: 3 }]);
  });

  test("an idle upstream partition stops holding back; all idle: the least announced holds; a watermark never goes back", async () => {
    const tasks = hopTasks();
    const task = await tasks.task(stage, 0);
    tasks.process(task, inbound(HOP, 0, 0), { g: "a", ts: 10 }, 0, { key: "in:0", offset: 0n });
    tasks.hearWatermark(stage, 0, "in:0", 2 * MINUTE, false);
    tasks.hearWatermark(stage, 0, "in:1", null, true);
    expect(tasks.advance([{ topic: HOP, partition: 0 }]).flatMap((f) => f.rows)).toEqual([{ windowStart: 0, windowEnd: MINUTE, g: "a", n: 1 }]);
    tasks.process(task, inbound(HOP, 0, 1), { g: "b", ts: 2 * MINUTE + 5 }, 0, { key: "in:0", offset: 1n });
    // in:0 goes idle at 3 minutes after a restarted owner announced less: the higher value holds.
    tasks.hearWatermark(stage, 0, "in:0", 3 * MINUTE, true);
    tasks.hearWatermark(stage, 0, "in:0", MINUTE, true);
    expect(tasks.advance([{ topic: HOP, partition: 0 }]).flatMap((f) => f.rows)).toEqual([{ windowStart: 2 * MINUTE, windowEnd: 3 * MINUTE, g: "b", n: 1 }]);
  });

  test("a replayed upstream row (same source partition and offset) changes no state twice", async () => {
    const tasks = hopTasks();
    const task = await tasks.task(stage, 0);
    expect(tasks.process(task, inbound(HOP, 0, 0), { g: "a", ts: 10 }, 0, { key: "in:0", offset: 7n }).skipped).toBe(false);
    expect(tasks.process(task, inbound(HOP, 0, 5), { g: "a", ts: 10 }, 0, { key: "in:0", offset: 7n }).skipped).toBe(true);
    expect(tasks.process(task, inbound(HOP, 0, 6), { g: "a", ts: 11 }, 0, { key: "in:1", offset: 7n }).skipped).toBe(false);
  });
});

describe("event-time progress is checkpointed", () => {
  test("a restored task closes the windows that were due, without a new row", async () => {
    const first = new OperatorTasks([stage], noState, options, emptyCounters());
    first.setStageTopics(stage, ["in"]);
    const task = await first.task(stage, 0);
    first.process(task, inbound("in", 0, 0), { g: "a", ts: 10 }, 0);
    first.process(task, inbound("in", 0, 1), { g: "a", ts: MINUTE + 10 }, 0);
    const changelog = first.drainChangelog();
    // The process dies before its watermark fired the first window. A new one restores the task:
    const restored = changelog.map((r, i) => ({ ...inbound("fv-state-x", 0, i), key: new TextEncoder().encode(String(r.key)), value: r.value === null ? null : new TextEncoder().encode(String(r.value)) }));
    const admin = { readPartition: async () => restored } as unknown as Admin;
    const second = new OperatorTasks([stage], admin, options, emptyCounters());
    second.setStageTopics(stage, ["in"]);
    await second.task(stage, 0);
    expect(second.advance([{ topic: "in", partition: 0 }]).flatMap((f) => f.rows)).toEqual([{ windowStart: 0, windowEnd: MINUTE, g: "a", n: 1 }]);
  });
});

describe("idle partitions without a hop", () => {
  // A consumer owning a partition that gets no rows this session (empty, or read to its end by a
  // predecessor) must still close the windows of the partitions it does read once that one idles.
  test("a partition never seen holds the watermark until it is idle, then no longer: the windows fire", async () => {
    const tasks = new OperatorTasks([stage], noState, options, emptyCounters());
    tasks.setStageTopics(stage, ["in"]);
    const owned = [{ topic: "in", partition: 0 }, { topic: "in", partition: 1 }];
    const t0 = Date.now();
    expect(tasks.advance(owned, t0)).toEqual([]);
    const task = await tasks.task(stage, 0);
    tasks.process(task, inbound("in", 0, 0), { g: "a", ts: 10 }, 0);
    tasks.process(task, inbound("in", 0, 1), { g: "a", ts: 2 * MINUTE + 10 }, 0);
    // in:1 owned for less than idlePartitionMs with no row: it may still bring early rows.
    expect(tasks.advance(owned, t0 + 1000)).toEqual([]);
    // in:1 idle and nothing left to read there: in:0 alone moves the watermark.
    expect(tasks.advance(owned, t0 + options.idlePartitionMs + 1).flatMap((f) => f.rows)).toEqual([{ windowStart: 0, windowEnd: MINUTE, g: "a", n: 1 }]);
  });

  // Fault soak, Node, seed 23: an empty input partition moved with another one to a new owner; it
  // held that owner's watermark for the idle time, and the other partition's last windows had not
  // fired when the pipeline stopped 4.5 s later.
  test("an empty partition (end offset 0) never holds the watermark, even newly owned", async () => {
    const tasks = new OperatorTasks([stage], noState, options, emptyCounters());
    tasks.setStageTopics(stage, ["in"]);
    const owned = [{ topic: "in", partition: 0 }, { topic: "in", partition: 1 }];
    const t0 = Date.now();
    const task = await tasks.task(stage, 0);
    tasks.process(task, inbound("in", 0, 0), { g: "a", ts: 10 }, 0);
    tasks.process(task, inbound("in", 0, 1), { g: "a", ts: 2 * MINUTE + 10 }, 0);
    const empty = (tp: { partition: number }) => tp.partition === 1;
    expect(tasks.advance(owned, t0 + 1000, () => false, empty).flatMap((f) => f.rows)).toEqual([{ windowStart: 0, windowEnd: MINUTE, g: "a", n: 1 }]);
    // Not empty (it has records, none read yet): it holds until idle, as before.
    const other = new OperatorTasks([stage], noState, options, emptyCounters());
    other.setStageTopics(stage, ["in"]);
    const t = await other.task(stage, 0);
    other.process(t, inbound("in", 0, 0), { g: "a", ts: 10 }, 0);
    other.process(t, inbound("in", 0, 1), { g: "a", ts: 2 * MINUTE + 10 }, 0);
    expect(other.advance(owned, t0 + 1000, () => false, () => false)).toEqual([]);
  });

  test("every partition idle, one of them never seen: the least time of those seen holds", async () => {
    const tasks = new OperatorTasks([stage], noState, options, emptyCounters());
    tasks.setStageTopics(stage, ["in"]);
    const owned = [{ topic: "in", partition: 0 }, { topic: "in", partition: 1 }, { topic: "in", partition: 2 }];
    const t0 = Date.now();
    expect(tasks.advance(owned, t0)).toEqual([]);
    const a = await tasks.task(stage, 0);
    const b = await tasks.task(stage, 2);
    tasks.process(a, inbound("in", 0, 0), { g: "a", ts: 10 }, 0);
    tasks.process(a, inbound("in", 0, 1), { g: "a", ts: 3 * MINUTE + 10 }, 0);
    tasks.process(b, inbound("in", 2, 0), { g: "b", ts: 20 }, 0);
    tasks.process(b, inbound("in", 2, 1), { g: "b", ts: MINUTE + 20 }, 0);
    // A partition with records to read is never idle: nothing fires past the slowest.
    const backlog = (tp: { partition: number }) => tp.partition === 1;
    expect(tasks.advance(owned, Date.now() + options.idlePartitionMs + 1, backlog)).toEqual([]);
    // All idle: in:2 got least far (1 minute), so only the first minute's windows close.
    const fired = tasks.advance(owned, Date.now() + options.idlePartitionMs + 1).flatMap((f) => f.rows);
    expect(fired).toEqual([{ windowStart: 0, windowEnd: MINUTE, g: "a", n: 1 }, { windowStart: 0, windowEnd: MINUTE, g: "b", n: 1 }]);
  });
});

describe("a restore never starts behind what the group committed", () => {
  const enc = new TextEncoder();
  const stateRecord = (offset: number, key: string, value: unknown): InboundRecord => ({
    topic: "fv-state-x", partition: 0, offset: BigInt(offset), timestamp: 0n, key: enc.encode(`0/${key}`), value: enc.encode(JSON.stringify(value)), headers: [],
  });

  // The previous owner's last transaction wrote rows of input offsets 0..4 to the changelog and
  // committed offset 5 with them. Its commit marker reached the offsets before the changelog: the
  // first read of the changelog (read_committed) still ends before that transaction.
  test("a changelog read that is behind the committed offsets is read again until it covers them", async () => {
    const older = [stateRecord(0, "\u0000offsets", { in: "2" })];
    const newer = [...older, stateRecord(1, "\u0000offsets", { in: "5" })];
    const reads: number[] = [];
    const admin = {
      readPartition: async () => {
        reads.push(Date.now());
        return reads.length < 3 ? older : newer;
      },
    } as unknown as Admin;
    const committedAsked: Array<[string[], number]> = [];
    const tasks = new OperatorTasks([stage], admin, {
      ...options,
      committedOffsets: async (topics, partition) => {
        committedAsked.push([topics, partition]);
        return [{ topic: "in", offset: 5n }];
      },
    }, emptyCounters());
    tasks.setStageTopics(stage, ["in"]);
    const task = await tasks.task(stage, 0);
    expect(reads.length).toBe(3);
    expect(committedAsked[0]).toEqual([["in"], 0]);
    // Input offsets below 5 are covered by the state: a replay of them changes nothing.
    expect(tasks.process(task, inbound("in", 0, 4), { g: "a", ts: 10 }, 0).skipped).toBe(true);
    expect(tasks.process(task, inbound("in", 0, 5), { g: "a", ts: 10 }, 0).skipped).toBe(false);
  });

  test("each checkpoint records the next input offset of every committed partition, also when no row reached the operator", async () => {
    const tasks = new OperatorTasks([stage], noState, options, emptyCounters());
    tasks.setStageTopics(stage, ["in"]);
    const task = await tasks.task(stage, 0);
    tasks.process(task, inbound("in", 0, 3), { g: "a", ts: 10 }, 0);
    tasks.drainChangelog();
    // Offsets 4..9 were all filtered out before the operator; the group commits 10. Partition 1
    // had no row reach the operator this session: its task is restored so its offsets are recorded too.
    await tasks.noteConsumed([{ topic: "in", partition: 0, offset: 10n }, { topic: "in", partition: 1, offset: 7n }]);
    const offsets = tasks.drainChangelog().filter((r) => String(r.key).endsWith("\u0000offsets"));
    expect(offsets.map((r) => [r.partition, JSON.parse(String(r.value))])).toEqual([[0, { "@groups": 1, in: "10" }], [1, { "@groups": 1, in: "7" }]]);
  });

  // Fault soak: a restore begun before a revocation ended after the partition came back, with the
  // state as it was before another member moved it on; that member's rows were missing from it.
  test("a restore begun before the partition was revoked is not kept, even when the partition is back; the next use reads again", async () => {
    const enc = new TextEncoder();
    let reads = 0;
    let firstRead!: () => void;
    const admin = {
      readPartition: async () => {
        reads++;
        if (reads === 1) await new Promise<void>((resolve) => (firstRead = resolve));
        return reads === 1 ? [] : [{ topic: "fv-state-x", partition: 0, offset: 0n, timestamp: 0n, key: enc.encode("0/\u0000offsets"), value: enc.encode(JSON.stringify({ in: "9" })), headers: [] }];
      },
    } as unknown as Admin;
    const tasks = new OperatorTasks([stage], admin, options, emptyCounters());
    tasks.setStageTopics(stage, ["in"]);
    tasks.release([{ topic: "in", partition: 0 }]);
    const stale = tasks.task(stage, 0);
    while (reads === 0) await new Promise((r) => setTimeout(r, 1));
    // Revoked and assigned again while the first read is under way.
    tasks.release([{ topic: "in", partition: 0 }], [{ topic: "in", partition: 0 }]);
    const fresh = tasks.task(stage, 0);
    firstRead();
    const [old, current] = await Promise.all([stale, fresh]);
    expect(reads).toBe(2);
    expect(old).not.toBe(current);
    expect(tasks.process(current, inbound("in", 0, 8), { g: "a", ts: 10 }, 0).skipped).toBe(true);
    expect(await tasks.task(stage, 0)).toBe(current);
  });
});
