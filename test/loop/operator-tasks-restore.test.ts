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

function tasksOver(changelog: InboundRecord[]): OperatorTasks {
  const admin = { readPartition: async () => changelog } as unknown as Admin;
  const tasks = new OperatorTasks([stage], admin, options, emptyCounters());
  tasks.setStageTopics(stage, ["in"]);
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

  test("a last version that is not JSON is corrupted state, named by its offset", async () => {
    const writer = tasksOver([]);
    const task = await writer.task(stage, 0);
    const { record, row: r } = row("a", 0);
    writer.process(task, record, r, 0);
    const log = writer.drainChangelog();
    const entry = log.findIndex((x) => String(x.key).startsWith("0/") && !String(x.key).includes("\u0000"));
    log[entry] = { ...log[entry]!, value: "{not json" };
    const error = await tasksOver(asRead(log)).task(stage, 0).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(FvError);
    expect((error as FvError).code).toBe("STATE_CORRUPTED");
    expect((error as FvError).message).toContain(`fv-state-x[0]@${entry}`);
  });
});
