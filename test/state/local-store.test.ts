import { afterEach, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Admin, InboundRecord, OutboundRecord, ReadPartitionOptions } from "../../src/kafka/port.ts";
import { emptyCounters } from "../../src/loop/counters.ts";
import { OperatorTasks } from "../../src/loop/operator-tasks.ts";
import { LocalStateStores, type StoreIdentity } from "../../src/state/local-store.ts";
import { compileTopology } from "../../src/topology/compile-topology.ts";

const dirs: string[] = [];
const tempDir = () => {
  const dir = mkdtempSync(join(tmpdir(), "fv-store-"));
  dirs.push(dir);
  return dir;
};
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

const identity: StoreIdentity = { pipeline: "p", stateTopic: "fv-state-p", stage: 0, operator: "windowedAggregate", fingerprint: "abc", partition: 3 };

function storesIn(dir: string) {
  const warnings: string[] = [];
  const stores = new LocalStateStores(dir, (level, message) => void (level === "warn" && warnings.push(message)));
  return { stores, warnings };
}

const contents = (store: { entries(): Iterable<{ key: string; value: unknown }> }) => Object.fromEntries([...store.entries()].map((e) => [e.key, e.value]));

describe("the local state store", () => {
  test("keeps committed changes and the changelog offset it covers across a reopen, with a .checkpoint file beside it", async () => {
    const dir = tempDir();
    const { stores } = storesIn(dir);
    const store = (await stores.open(identity))!;
    expect(store.covered).toBeUndefined();
    expect(await store.write([{ key: "a", value: "1" }, { key: "b", value: "2" }], 10n, "topic-1")).toBe(true);
    expect(await store.write([{ key: "a", value: "3" }, { key: "b", value: null }], 14n)).toBe(true);
    await store.close();

    const again = (await stores.open(identity))!;
    expect(again.covered).toBe(14n);
    expect(again.topicId).toBe("topic-1");
    expect(contents(again)).toEqual({ a: 3 });
    expect(again.keys).toBe(1);
    expect(again.bytesOnDisk).toBeGreaterThan(0);
    await again.close();
    const checkpoint = JSON.parse(readFileSync(join(dir, "stage-1", "partition-3", ".checkpoint"), "utf8"));
    expect(checkpoint).toMatchObject({ version: 2, pipeline: "p", stateTopic: "fv-state-p", stage: 0, partition: 3, changelogOffset: "14", topicId: "topic-1" });
  });

  test("a process that took the store over refuses the late writes of the previous owner", async () => {
    const dir = tempDir();
    const { stores } = storesIn(dir);
    const before = (await stores.open(identity))!;
    await before.write([{ key: "a", value: "1" }], 5n);
    const after = (await stores.open(identity))!;
    expect(await before.write([{ key: "a", value: '"old"' }], 2n)).toBe(false);
    expect(contents(after)).toEqual({ a: 1 });
    expect(after.covered).toBe(5n);
    await before.close();
    await after.close();
  });

  test("a second open of the same store in this thread (its task moved to another consumer here) closes the first before taking over", async () => {
    const dir = tempDir();
    const { stores } = storesIn(dir);
    const first = (await stores.open(identity))!;
    expect(await first.write([{ key: "a", value: "1" }], 5n)).toBe(true);
    const second = (await stores.open(identity))!;
    expect(first.isOpen).toBe(false);
    expect(second.isOpen).toBe(true);
    // The first let go: its writes are refused, and the second sees what it committed.
    expect(await first.write([{ key: "a", value: "2" }], 6n)).toBe(false);
    expect(contents(second)).toEqual({ a: 1 });
    expect(second.covered).toBe(5n);
    expect(await second.write([{ key: "b", value: "3" }], 7n)).toBe(true);
    await first.close();
    expect(contents(second)).toEqual({ a: 1, b: 3 });
    await second.close();
  });

  test("a store that never got its covered offset (its first fill was cut short) starts empty", async () => {
    const dir = tempDir();
    const { stores } = storesIn(dir);
    const store = (await stores.open(identity))!;
    await store.write([{ key: "a", value: "1" }]);
    await store.close();
    const again = (await stores.open(identity))!;
    expect(contents(again)).toEqual({});
    // Emptied key by key: values written since (MessagePack with shared structures) still read back.
    expect(await again.write([{ key: "w", value: '{"group":["x"],"seq":1,"items":[2]}' }], 3n)).toBe(true);
    await again.close();
    const third = (await stores.open(identity))!;
    expect(contents(third)).toEqual({ w: { group: ["x"], seq: 1, items: [2] } });
    expect(third.keys).toBe(1);
    await third.close();
  });

  test("another pipeline's or topology's store is rebuilt, with a warning naming its path", async () => {
    const dir = tempDir();
    const { stores, warnings } = storesIn(dir);
    const store = (await stores.open(identity))!;
    await store.write([{ key: "a", value: "1" }], 5n);
    await store.close();
    const other = (await stores.open({ ...identity, fingerprint: "changed" }))!;
    expect(contents(other)).toEqual({});
    expect(other.covered).toBeUndefined();
    await other.close();
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain(join(dir, "stage-1", "partition-3"));
    expect(warnings[0]).toContain('fingerprint "abc"');
  });

  test("a corrupted data file or a torn .checkpoint is detected at open and rebuilt; nothing throws", async () => {
    for (const damage of ["data", "checkpoint", "truncated"] as const) {
      const dir = tempDir();
      const { stores, warnings } = storesIn(dir);
      const store = (await stores.open(identity))!;
      await store.write([{ key: "a", value: "1" }], 5n);
      await store.close();
      const path = join(dir, "stage-1", "partition-3");
      if (damage === "data") writeFileSync(join(path, "state.mdb"), Buffer.alloc(64 * 1024, 0x5a));
      if (damage === "truncated") writeFileSync(join(path, "state.mdb"), Buffer.alloc(100));
      if (damage === "checkpoint") writeFileSync(join(path, ".checkpoint"), '{"version": 1, "pipel');
      const again = (await stores.open(identity))!;
      expect(contents(again)).toEqual({});
      expect(again.covered).toBeUndefined();
      expect(await again.write([{ key: "b", value: "2" }], 7n)).toBe(true);
      await again.close();
      expect(warnings).toHaveLength(1);
      expect(warnings[0]).toContain(path);
    }
  });
});

describe.each([
  { name: "state in memory", cacheKeys: undefined },
  { name: "state spilling (2 windows in memory)", cacheKeys: 2 },
])("a restore with the local store, $name", ({ cacheKeys }) => {
  const T0 = 1_717_000_000_000;
  const stage = compileTopology({
    stages: [{ inputs: ["in"], output: "out", steps: [{ op: "windowedAggregate", timeColumn: "ts", windowMs: 60_000, groupBy: ["key"], aggs: [{ op: "count", alias: "n" }] }] }],
  }).stages[0]!;
  const encoder = new TextEncoder();

  /** A changelog partition in memory that records the offset each read started from. */
  function changelog() {
    const log: InboundRecord[] = [];
    const reads: Array<bigint | undefined> = [];
    const append = (records: OutboundRecord[]) => {
      const first = BigInt(log.length);
      for (const r of records) {
        log.push({
          topic: "fv-state-p", partition: 0, offset: BigInt(log.length), timestamp: 0n, headers: [],
          key: encoder.encode(String(r.key)), value: r.value === null ? null : encoder.encode(String(r.value)),
        });
      }
      return [{ topic: "fv-state-p", partition: 0, offset: first }];
    };
    // `hold.stableEnd`: a transaction left open there holds read_committed readers back.
    const hold: { stableEnd?: number } = {};
    const admin = {
      readPartition: async (_topic: string, _partition: number, options: ReadPartitionOptions = {}) => {
        reads.push(options.from);
        const start = options.from ?? 0n;
        const end = BigInt(hold.stableEnd ?? log.length);
        options.onProgress?.({ position: start > end ? start : end, start, end, logEnd: start > end ? BigInt(log.length) : end, topicId: "t1" });
        return log.filter((r) => r.offset >= start && r.offset < end);
      },
    } as unknown as Admin;
    return { log, reads, append, admin, hold };
  }

  function tasksOn(admin: Admin, dir: string) {
    const counters = emptyCounters();
    const tasks = new OperatorTasks([stage], admin, { stateTopic: "fv-state-p", idlePartitionMs: 10_000, maxStateKeys: 1_000_000, pipeline: "p", stores: new LocalStateStores(dir, () => {}), ...(cacheKeys ? { cacheKeys } : {}) }, counters);
    tasks.setStageTopics(stage, ["in"]);
    return { tasks, counters };
  }

  /** An operator's state, entries in key order (a spilling operator lists those in memory first). */
  const stateOf = (op: { snapshot(): { entries: Array<{ key: string }> } }) => {
    const snapshot = op.snapshot();
    return { ...snapshot, entries: [...snapshot.entries].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0)) };
  };

  const feed = (tasks: OperatorTasks, task: Awaited<ReturnType<OperatorTasks["task"]>>, keys: string[], from: number) =>
    keys.forEach((key, i) => tasks.process(task, { topic: "in", partition: 0, offset: BigInt(from + i), timestamp: 0n, key: null, value: null, headers: [] }, { key, ts: T0 + from + i }, 0));

  test("reads only the changelog's tail after what the store covers, and ends with the same state", async () => {
    const dir = tempDir();
    const { log, reads, append, admin } = changelog();
    // A first process: restores from an empty changelog, processes, checkpoints twice.
    const first = tasksOn(admin, dir);
    const task = await first.tasks.task(stage, 0);
    feed(first.tasks, task, ["a", "b", "c"], 0);
    let drained = first.tasks.drainChangelog();
    first.tasks.persist(drained, append(drained));
    feed(first.tasks, task, ["a", "d"], 3);
    drained = first.tasks.drainChangelog();
    first.tasks.persist(drained, append(drained));
    const stored = drained.length;
    // Records the store never saw (the process died before its write): they are the tail.
    feed(first.tasks, task, ["e", "a"], 5);
    const unseen = first.tasks.drainChangelog();
    append(unseen);
    const expected = stateOf(task.op);
    await first.tasks.close();

    const second = tasksOn(admin, dir);
    const restored = await second.tasks.task(stage, 0);
    // The second checkpoint's first offset is where the tail starts (its records are read again, harmlessly).
    expect(reads).toEqual([undefined, BigInt(log.length - unseen.length - stored)]);
    expect(second.counters.restoredRecords).toBe(stored + unseen.length);
    expect(second.counters.restoredFromStore).toBeGreaterThan(0);
    expect(stateOf(restored.op)).toEqual(expected);
    expect(restored.op.stateSize().keys).toBe(5);
    await second.tasks.close();

    // A third restore: the second one wrote the tail into the store, so nothing is left to read.
    const third = tasksOn(admin, dir);
    const again = await third.tasks.task(stage, 0);
    expect(reads.at(-1)).toBe(BigInt(log.length));
    expect(third.counters.restoredRecords).toBe(0);
    expect(stateOf(again.op)).toEqual(expected);
    await third.tasks.close();
  });

  test("a group a kill cut short in the tail is not applied, and the store never covers it: every restore sees it cut until the repairs are written", async () => {
    const dir = tempDir();
    const { log, reads, append, admin } = changelog();
    const first = tasksOn(admin, dir);
    const task = await first.tasks.task(stage, 0);
    feed(first.tasks, task, ["a", "b"], 0);
    const g1 = first.tasks.drainChangelog();
    first.tasks.persist(g1, append(g1));
    const afterG1 = stateOf(task.op);
    feed(first.tasks, task, ["a", "c"], 2);
    const full = stateOf(task.op);
    const cutAt = BigInt(log.length);
    append(first.tasks.drainChangelog().slice(0, 2)); // killed: its offsets record never written
    await first.tasks.close();

    // Restored twice (the first of them killed before it wrote anything): the cut group stays out.
    for (let run = 0; run < 2; run++) {
      const next = tasksOn(admin, dir);
      const restored = await next.tasks.task(stage, 0);
      expect(stateOf(restored.op)).toEqual(afterG1);
      expect(reads.at(-1)! <= cutAt).toBe(true);
      if (run === 0) {
        await next.tasks.close();
        continue;
      }
      // The rows come again and are counted once; the group written starts with the cut keys as restored.
      feed(next.tasks, restored, ["a", "c"], 2);
      expect(stateOf(restored.op)).toEqual(full);
      const g3 = next.tasks.drainChangelog();
      expect(g3.slice(0, 2).map((r) => r.key)).toEqual(log.slice(Number(cutAt)).map((r) => new TextDecoder().decode(r.key!)));
      next.tasks.persist(g3, append(g3));
      await next.tasks.close();
    }
    const last = tasksOn(admin, dir);
    expect(stateOf((await last.tasks.task(stage, 0)).op)).toEqual(full);
    await last.tasks.close();
  });

  test("a cut key whose last complete version is in the store (not in the tail read) is repaired with the store's value", async () => {
    const dir = tempDir();
    const { log, append, admin } = changelog();
    const first = tasksOn(admin, dir);
    const task = await first.tasks.task(stage, 0);
    feed(first.tasks, task, ["a", "a"], 0);
    let drained = first.tasks.drainChangelog();
    first.tasks.persist(drained, append(drained));
    feed(first.tasks, task, ["b"], 2); // a second checkpoint without a: the store covers from its first offset
    drained = first.tasks.drainChangelog();
    first.tasks.persist(drained, append(drained));
    await Bun.sleep(0);
    const afterG2 = stateOf(task.op);
    const aKey = log.map((r) => new TextDecoder().decode(r.key!)).find((k) => k.includes('"a"'))!;
    const aCommitted = log.find((r) => new TextDecoder().decode(r.key!) === aKey)!.value;
    feed(first.tasks, task, ["a"], 3);
    const g3 = first.tasks.drainChangelog();
    append(g3.filter((r) => r.key === aKey)); // only a's new count: cut
    await first.tasks.close();

    const next = tasksOn(admin, dir);
    const restored = await next.tasks.task(stage, 0);
    expect(stateOf(restored.op)).toEqual(afterG2);
    const repair = next.tasks.drainChangelog();
    expect(repair.map((r) => r.key)).toEqual([aKey, "0/\u0000offsets"]);
    expect(repair[0]!.value).toEqual(new TextDecoder().decode(aCommitted!));
    await next.tasks.close();
  });

  test("a store that covers the changelog past its stable end (a transaction left open before its own holds it back) is kept, not rebuilt; one past the log's end is rebuilt", async () => {
    const dir = tempDir();
    const { log, reads, append, admin, hold } = changelog();
    const first = tasksOn(admin, dir);
    const task = await first.tasks.task(stage, 0);
    feed(first.tasks, task, ["a", "b"], 0);
    let drained = first.tasks.drainChangelog();
    first.tasks.persist(drained, append(drained));
    const held = log.length;
    // Another producer's transaction, left open (its marker skipped), then this member's own commits after it.
    log.push({ topic: "fv-state-p", partition: 0, offset: BigInt(log.length), timestamp: 0n, headers: [], key: encoder.encode("zombie"), value: encoder.encode("x") });
    hold.stableEnd = held;
    feed(first.tasks, task, ["c", "a"], 2);
    drained = first.tasks.drainChangelog();
    first.tasks.persist(drained, append(drained));
    const expected = stateOf(task.op);
    await first.tasks.close();

    const logs: string[] = [];
    const again = () => {
      const counters = emptyCounters();
      const tasks = new OperatorTasks([stage], admin, { stateTopic: "fv-state-p", idlePartitionMs: 10_000, maxStateKeys: 1_000_000, pipeline: "p", stores: new LocalStateStores(dir, (_level, message) => logs.push(message)), ...(cacheKeys ? { cacheKeys } : {}) }, counters);
      tasks.setStageTopics(stage, ["in"]);
      return { tasks, counters };
    };
    const second = again();
    const restored = await second.tasks.task(stage, 0);
    // Read from where the store's last group starts, past the stable end: nothing; the state is exactly the store's.
    expect(reads.at(-1)).toBe(BigInt(held + 1));
    expect(second.counters.restoredRecords).toBe(0);
    expect(logs.filter((l) => l.includes("rebuilding"))).toEqual([]);
    expect(stateOf(restored.op)).toEqual(expected);
    await second.tasks.close();

    // The log cut back before what the store covers: that store belongs to a log that is gone.
    log.length = held;
    hold.stableEnd = undefined;
    const third = again();
    await third.tasks.task(stage, 0);
    expect(logs.filter((l) => l.includes("rebuilding")).map((l) => l.replace(/ up to offset \d+/, ""))).toEqual([
      expect.stringContaining(`it covers fv-state-p[0], past the topic's end ${held}`),
    ]);
    expect(reads.at(-1)).toBeUndefined();
    await third.tasks.close();
  });

  test("a changelog that was never committed (an aborted transaction's) never reaches the store", async () => {
    const dir = tempDir();
    const { append, admin } = changelog();
    const first = tasksOn(admin, dir);
    const task = await first.tasks.task(stage, 0);
    feed(first.tasks, task, ["a"], 0);
    const committed = first.tasks.drainChangelog();
    first.tasks.persist(committed, append(committed));
    const snapshot = stateOf(task.op);
    feed(first.tasks, task, ["b", "c"], 1);
    first.tasks.drainChangelog(); // its transaction aborted: never persisted, never in the log
    await first.tasks.close();

    const second = tasksOn(admin, dir);
    const restored = await second.tasks.task(stage, 0);
    expect(stateOf(restored.op)).toEqual(snapshot);
    expect(restored.op.stateSize().keys).toBe(1);
    await second.tasks.close();
  });

  test.if(cacheKeys !== undefined)("a store written behind its restore whose write fails takes no checkpoint after it: it never covers state it does not hold", async () => {
    const { log, reads, append, admin } = changelog();
    // Another machine wrote the changelog.
    const first = tasksOn(admin, tempDir());
    const t1 = await first.tasks.task(stage, 0);
    feed(first.tasks, t1, ["a"], 0);
    let drained = first.tasks.drainChangelog();
    first.tasks.persist(drained, append(drained));
    await first.tasks.close();
    // Its window of "a" no longer decodes: the write behind the restore fails (STATE_CORRUPTED).
    const at = log.findIndex((r) => new TextDecoder().decode(r.key!).includes("w:"));
    log[at] = { ...log[at]!, value: encoder.encode("not json") };
    // A new machine: an empty store, written behind the restore.
    const dir = tempDir();
    const second = tasksOn(admin, dir);
    const errors: string[] = [];
    second.tasks.onStoreError = (error) => void errors.push(error.code);
    const t2 = await second.tasks.task(stage, 0);
    feed(second.tasks, t2, ["b"], 1);
    drained = second.tasks.drainChangelog();
    second.tasks.persist(drained, append(drained));
    await second.tasks.close();
    expect(errors).toEqual(["STATE_CORRUPTED"]);
    // The checkpoint queued behind it was not written: the next restore reads the whole changelog.
    const third = tasksOn(admin, dir);
    await third.tasks.task(stage, 0);
    expect(reads.at(-1)).toBeUndefined();
    await third.tasks.close();
  });

  test.if(cacheKeys !== undefined)("a new machine's restore of windows is written behind it up to ten caches of them (then the windows no row used leave memory undecoded), and into the store before the task starts when larger", async () => {
    for (const [windows, behind] of [[10 * cacheKeys!, true], [10 * cacheKeys! + 1, false]] as const) {
      const { append, admin } = changelog();
      // Another machine wrote the changelog.
      const first = tasksOn(admin, tempDir());
      const t1 = await first.tasks.task(stage, 0);
      const keys = Array.from({ length: windows }, (_, i) => `k${i}`);
      feed(first.tasks, t1, keys, 0);
      const drained = first.tasks.drainChangelog();
      first.tasks.persist(drained, append(drained));
      await first.tasks.close();
      // A new machine: an empty store.
      const second = tasksOn(admin, tempDir());
      const t2 = await second.tasks.task(stage, 0);
      // The windows, the operator's meta, the offsets and event times: in the store before the
      // task starts, or not yet (written behind it).
      expect(second.tasks.sizeOf("in", 0)!.store!.keys).toBe(behind ? 0 : windows + 3);
      expect(t2.op.stateSize().keys).toBe(windows);
      for (let i = 0; i < 200 && second.tasks.sizeOf("in", 0)!.store!.keys < windows + 3; i++) await Bun.sleep(10);
      expect(second.tasks.sizeOf("in", 0)!.store!.keys).toBe(windows + 3);
      // Written behind: once the write lands, the windows no row used since leave memory, undecoded.
      for (let i = 0; i < 200 && (second.tasks.sizeOf("in", 0)!.cache?.resident ?? Infinity) > 0; i++) await Bun.sleep(10);
      expect(second.tasks.sizeOf("in", 0)!.cache?.resident).toBe(0);
      // Every window is still there, read back from the store: one more row each fires count 2.
      feed(second.tasks, t2, keys, windows);
      const fired = t2.op.advance(T0 + 600_000).map((r) => r.n);
      expect(fired).toEqual(keys.map(() => 2));
      await second.tasks.close();
    }
  });

  test.if(cacheKeys !== undefined)("windows leave memory once their checkpoint is in the store, come back when a row needs them, and every window fires once with its exact count", async () => {
    const dir = tempDir();
    const { append, admin } = changelog();
    const { tasks } = tasksOn(admin, dir);
    const task = await tasks.task(stage, 0);
    const keys = Array.from({ length: 300 }, (_, i) => `k${i}`);
    // Three checkpoints, every key twice: the second pass reads most windows back from the store.
    feed(tasks, task, keys, 0);
    let drained = tasks.drainChangelog();
    tasks.persist(drained, append(drained));
    // Once the store's writes land (the restore's, written behind it into the empty store, then
    // this checkpoint's), the operator spills and lets go of its windows.
    for (let i = 0; i < 200 && (tasks.sizeOf("in", 0)?.cache?.resident ?? Infinity) > 2; i++) await Bun.sleep(10);
    expect(tasks.sizeOf("in", 0)?.cache?.resident).toBeLessThanOrEqual(2);
    await tasks.close();
    // close() closed the store: a fresh set of tasks over the same store goes on from here.
    const next = tasksOn(admin, dir);
    const again = await next.tasks.task(stage, 0);
    feed(next.tasks, again, keys, 300);
    drained = next.tasks.drainChangelog();
    next.tasks.persist(drained, append(drained));
    feed(next.tasks, again, keys.slice(0, 10), 600);
    const size = next.tasks.sizeOf("in", 0)!;
    expect(size.keys).toBe(300);
    expect(size.cache!.misses).toBeGreaterThanOrEqual(290);
    expect(size.store!.keys).toBe(303); // 300 windows, the operator's meta, the offsets and event times
    // The watermark passes the window's end: every window fires once, read back from the store or from memory.
    const fired = again.op.advance(T0 + 600_000);
    expect(fired.length).toBe(300);
    expect(Object.fromEntries(fired.map((r) => [r.key, r.n]))).toEqual(Object.fromEntries(keys.map((k, i) => [k, i < 10 ? 3 : 2])));
    drained = next.tasks.drainChangelog();
    next.tasks.persist(drained, append(drained));
    await next.tasks.close();
    expect(drained.filter((r) => r.value === null).length).toBe(300);
  });
});
