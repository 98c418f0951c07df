import { describe, expect, test } from "bun:test";
import { FvError } from "../../src/errors.ts";
import type { Admin, InboundRecord, OutboundRecord } from "../../src/kafka/port.ts";
import { emptyCounters } from "../../src/loop/counters.ts";
import { OperatorTasks } from "../../src/loop/operator-tasks.ts";
import { compileTopology } from "../../src/topology/compile-topology.ts";

const T0 = 1_717_000_000_000;
const MINUTE = 60_000;
const stage = compileTopology({
  stages: [{ inputs: ["in"], output: "out", steps: [{ op: "windowedAggregate", timeColumn: "ts", windowMs: MINUTE, groupBy: ["key"], aggs: [{ op: "count", alias: "n" }] }] }],
}).stages[0]!;
const encoder = new TextEncoder();
const options = { stateTopic: "fv-state-x", idlePartitionMs: 10_000, maxStateKeys: 1_000_000 };

/** Changelog records as the state topic hands them back, offsets in log order. */
const asRead = (records: OutboundRecord[]): InboundRecord[] =>
  records.map((r, i) => ({
    topic: "fv-state-x", partition: 0, offset: BigInt(i), timestamp: 0n, headers: [],
    key: typeof r.key === "string" ? encoder.encode(r.key) : r.key,
    value: typeof r.value === "string" ? encoder.encode(r.value) : r.value,
  }));

function tasksOver(changelog: InboundRecord[], of = stage): OperatorTasks {
  const admin = { readPartition: async () => changelog } as unknown as Admin;
  const tasks = new OperatorTasks([of], admin, options, emptyCounters());
  tasks.setStageTopics(of, ["in"]);
  return tasks;
}

const row = (key: string, offset: number) => ({
  record: { topic: "in", partition: 0, offset: BigInt(offset), timestamp: 0n, key: null, value: null, headers: [] } as InboundRecord,
  row: { key, ts: T0 + offset },
});

describe("a state restore from a changelog not yet compacted", () => {
  test("takes the last version of every key, whatever came before it (an earlier version that is not JSON included)", async () => {
    // Three checkpoints of one task: keys a and b change in each, c only in the first.
    const writer = tasksOver([]);
    const task = await writer.task(stage, 0);
    const log: OutboundRecord[] = [];
    let offset = 0;
    for (const keys of [["a", "b", "c"], ["a", "b"], ["a", "b"]]) {
      for (const key of keys) {
        const { record, row: r } = row(key, offset++);
        writer.process(task, record, r, 0);
      }
      log.push(...writer.drainChangelog());
    }
    const aVersions = log.filter((r) => String(r.key).startsWith("0/") && String(r.key).includes("a"));
    expect(aVersions.length).toBeGreaterThanOrEqual(3);
    // An early version of a key that is not JSON: superseded, so it is never read.
    const corrupted = log.indexOf(aVersions[0]!);
    log[corrupted] = { ...aVersions[0]!, value: "{not json" };

    const restored = await tasksOver(asRead(log)).task(stage, 0);
    expect(restored.op.snapshot()).toEqual(task.op.snapshot());
    expect(restored.op.stateSize().keys).toBe(3);
  });

  /** A changelog of one row per key into `of`'s operator, with the last version of `corrupt`'s entity replaced by text that is not JSON; and that record's offset. */
  async function corruptedLog(of: typeof stage, keys: string[], corrupt: string): Promise<{ log: InboundRecord[]; at: number }> {
    const writer = tasksOver([], of);
    const task = await writer.task(of, 0);
    keys.forEach((key, i) => {
      const { record, row: r } = row(key, i);
      writer.process(task, record, r, 0);
    });
    const log = writer.drainChangelog();
    const at = log.findIndex((x) => String(x.key).startsWith("0/") && String(x.key).includes(`"${corrupt}"`));
    expect(at).toBeGreaterThanOrEqual(0);
    log[at] = { ...log[at]!, value: "{not json" };
    return { log: asRead(log), at };
  }

  test("an operator that decodes during the restore: a last version that is not JSON is corrupted state, named by its offset", async () => {
    const lastN = compileTopology({ stages: [{ inputs: ["in"], output: "out", steps: [{ op: "lastN", timeColumn: "ts", n: 3, groupBy: ["key"] }] }] }).stages[0]!;
    const { log, at } = await corruptedLog(lastN, ["a", "b"], "a");
    const error = await tasksOver(log, lastN).task(lastN, 0).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(FvError);
    expect((error as FvError).code).toBe("STATE_CORRUPTED");
    expect((error as FvError).message).toBe(`state record fv-state-x[0]@${at} is not JSON`);
  });

  // A windowed aggregate's restored windows stay as the records' bytes until first needed (the
  // restore reads only their keys): a corrupt one is found then, before anything of it is used.
  test("a windowed aggregate: a last version that is not JSON is corrupted state, named by its offset, at the first row of its window", async () => {
    const { log, at } = await corruptedLog(stage, ["a", "b"], "a");
    const tasks = tasksOver(log);
    const task = await tasks.task(stage, 0);
    expect(task.op.stateKeys()).toBe(2);
    const b = row("b", 10);
    expect(tasks.process(task, b.record, b.row, 0).skipped).toBe(false);
    const a = row("a", 11);
    const error = (() => {
      try {
        tasks.process(task, a.record, a.row, 0);
      } catch (e) {
        return e;
      }
    })();
    expect(error).toBeInstanceOf(FvError);
    expect((error as FvError).code).toBe("STATE_CORRUPTED");
    expect((error as FvError).message).toBe(`state record fv-state-x[0]@${at} is not JSON`);
  });

  test("a windowed aggregate: a last version that is not JSON is corrupted state at its window's firing, and at a snapshot", async () => {
    const { log, at } = await corruptedLog(stage, ["a", "b"], "a");
    const task = await tasksOver(log).task(stage, 0);
    expect(() => task.op.advance(T0 + 2 * MINUTE)).toThrow(`state record fv-state-x[0]@${at} is not JSON`);
    const again = await tasksOver(log).task(stage, 0);
    expect(() => again.op.snapshot()).toThrow(`state record fv-state-x[0]@${at} is not JSON`);
  });
});

describe("a changelog whose last group a kill cut short (at-least-once: one checkpoint's records in several produce requests)", () => {
  const OFFSETS = "0/\u0000offsets";
  /** Rows of keys at offsets `from`.. into the writer's task, then its changelog group. */
  const checkpoint = (tasks: OperatorTasks, task: Awaited<ReturnType<OperatorTasks["task"]>>, keys: string[], from: number): OutboundRecord[] => {
    keys.forEach((key, i) => {
      const { record, row: r } = row(key, from + i);
      tasks.process(task, record, r, 0);
    });
    return tasks.drainChangelog();
  };
  const valueOf = (log: OutboundRecord[], key: string) => log.find((r) => r.key === key)?.value;

  test("every group ends with its offsets record", async () => {
    const writer = tasksOver([]);
    const task = await writer.task(stage, 0);
    const group = checkpoint(writer, task, ["a", "b"], 0);
    expect(group.at(-1)!.key).toBe(OFFSETS);
    expect(group.filter((r) => r.key === OFFSETS).length).toBe(1);
  });

  test("is not applied: the rows it held are counted once when read again, and its keys are written again first, as restored", async () => {
    const writer = tasksOver([]);
    const task = await writer.task(stage, 0);
    const g1 = checkpoint(writer, task, ["a", "b"], 0);
    const afterG1 = structuredClone(task.op.snapshot());
    const g2 = checkpoint(writer, task, ["a", "a", "c"], 2);
    const full = structuredClone(task.op.snapshot());
    // The kill lands after g2's first two records: a's new count is in the log, its offsets are not.
    const cut = g2.slice(0, 2);
    expect(cut.map((r) => r.key)).not.toContain(OFFSETS);
    const logs: string[] = [];
    const admin = { readPartition: async () => asRead([...g1, ...cut]) } as unknown as Admin;
    const reader = new OperatorTasks([stage], admin, { ...options, log: (_level: string, message: string) => void logs.push(message) }, emptyCounters());
    reader.setStageTopics(stage, ["in"]);
    const restored = await reader.task(stage, 0);
    expect(restored.op.snapshot()).toEqual(afterG1);
    expect(restored.covered).toEqual(new Map([["in", 2n]]));
    expect(logs.some((m) => m.includes("cut short") && m.includes(`from offset ${g1.length}`))).toBe(true);

    // The rows of g2 come again (the group's offsets were not committed): each counted once.
    const g3 = checkpoint(reader, restored, ["a", "a", "c"], 2);
    expect(restored.op.snapshot()).toEqual(full);
    // First the cut keys as restored (from g1), then the group's own changes, its offsets last.
    const repaired = g3.slice(0, cut.length);
    expect(repaired.map((r) => r.key)).toEqual(cut.map((r) => r.key));
    for (const r of repaired) expect(r.value).toEqual(valueOf(g1, String(r.key)) ?? null);
    expect(g3.at(-1)).toEqual({ ...g3.at(-1)!, key: OFFSETS, value: JSON.stringify({ "@groups": 1, in: "5" }) });

    // The whole log, cut group included, restores to the full state.
    const again = await tasksOver(asRead([...g1, ...cut, ...g3])).task(stage, 0);
    expect(again.op.snapshot()).toEqual(full);
  });

  test("a changelog written before the rule (offsets without the mark, a timer-only group with none) is applied whole, as it was then", async () => {
    const writer = tasksOver([]);
    const task = await writer.task(stage, 0);
    const g1 = checkpoint(writer, task, ["a"], 0);
    expect(task.op.advance(T0 + 5 * MINUTE).length).toBe(1); // the window fires: its key is deleted
    const g2 = writer.drainChangelog();
    // What the older version wrote: offsets without the mark, and none after a checkpoint that only fired timers.
    const old = [...g1.map((r) => (r.key === OFFSETS ? { ...r, value: JSON.stringify({ in: "1" }) } : r)), ...g2.filter((r) => r.key !== OFFSETS)];
    const restored = await tasksOver(asRead(old)).task(stage, 0);
    expect(restored.op.stateKeys()).toBe(0);
    expect(restored.op.advance(T0 + 6 * MINUTE)).toEqual([]);
    expect(restored.covered).toEqual(new Map([["in", 1n]]));
    expect(restored.repairs).toBeUndefined();
  });

  test("an offsets record whose mark an older version wrote back as text counts as unmarked: the timer-only group after it is applied", async () => {
    const writer = tasksOver([]);
    const task = await writer.task(stage, 0);
    const g1 = checkpoint(writer, task, ["a"], 0);
    expect(task.op.advance(T0 + 5 * MINUTE).length).toBe(1);
    const g2 = writer.drainChangelog();
    const old = [...g1.map((r) => (r.key === OFFSETS ? { ...r, value: JSON.stringify({ "@groups": "1", in: "1" }) } : r)), ...g2.filter((r) => r.key !== OFFSETS)];
    const restored = await tasksOver(asRead(old)).task(stage, 0);
    expect(restored.op.stateKeys()).toBe(0);
    expect(restored.covered).toEqual(new Map([["in", 1n]]));
  });

  test("under exactly-once (transactional) everything read is applied: read_committed never shows part of a group", async () => {
    const writer = tasksOver([]);
    const task = await writer.task(stage, 0);
    const g1 = checkpoint(writer, task, ["a"], 0);
    expect(task.op.advance(T0 + 5 * MINUTE).length).toBe(1);
    // A member of an older version (rolling upgrade) fired the window and wrote no offsets after it.
    const older = writer.drainChangelog().filter((r) => r.key !== OFFSETS);
    const admin = { readPartition: async () => asRead([...g1, ...older]) } as unknown as Admin;
    const reader = new OperatorTasks([stage], admin, { ...options, transactional: true }, emptyCounters());
    reader.setStageTopics(stage, ["in"]);
    const restored = await reader.task(stage, 0);
    expect(restored.op.stateKeys()).toBe(0);
    expect(restored.repairs).toBeUndefined();
    // The same log at-least-once: that group is taken for cut and the window comes back.
    expect((await tasksOver(asRead([...g1, ...older])).task(stage, 0)).op.stateKeys()).toBe(1);
  });

  test("a restore that writes nothing but the repairs still ends them with the offsets; a second cut before them leaves the first one cut too", async () => {
    const writer = tasksOver([]);
    const task = await writer.task(stage, 0);
    const g1 = checkpoint(writer, task, ["a"], 0);
    const afterG1 = structuredClone(task.op.snapshot());
    const cut = checkpoint(writer, task, ["b", "a"], 1).slice(0, 2);
    const reader = tasksOver(asRead([...g1, ...cut]));
    const restored = await reader.task(stage, 0);
    expect(restored.op.snapshot()).toEqual(afterG1);
    const group = reader.drainChangelog();
    expect(group.map((x) => x.key)).toEqual([...cut.map((x) => x.key), OFFSETS]);
    // That group cut too, after its first record: both cut groups stay unapplied.
    const twice = await tasksOver(asRead([...g1, ...cut, group[0]!])).task(stage, 0);
    expect(twice.op.snapshot()).toEqual(afterG1);
  });
});
