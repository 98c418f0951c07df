/**
 * StandbyTasks on fakes: which copies a member keeps, how far they read, and a store that cannot
 * be written reported to the session (not an unhandled rejection from the timer's tick).
 */
import { describe, expect, test } from "bun:test";
import { FvError } from "../../src/errors.ts";
import type { Admin, InboundRecord, ReadPartitionOptions } from "../../src/kafka/port.ts";
import { StandbyTasks } from "../../src/loop/standby-tasks.ts";
import type { LocalStateStore, LocalStateStores, StoreChange } from "../../src/state/local-store.ts";
import type { CompiledStage } from "../../src/topology/compile-topology.ts";

const encoder = new TextEncoder();
const OFFSETS = "\u0000offsets";
/** An offsets value as this version writes it: it ends every group (changelog-groups.ts). */
const ENDS = (offsets: Record<string, string> = {}) => JSON.stringify({ "@groups": 1, ...offsets });
const stage = { index: 0, operator: { compiled: { create: () => ({}) } } } as unknown as CompiledStage;

/** A changelog partition's records: `0/<key>` → value, at offsets 0.. */
function changelog(partition: number, entries: Array<[string, string | null]>): InboundRecord[] {
  return entries.map(([key, value], offset) => ({ topic: "fv-state-p", partition, offset: BigInt(offset), timestamp: 0n, key: encoder.encode(`0/${key}`), value: value === null ? null : encoder.encode(value), headers: [] }));
}

class FakeStore {
  covered: bigint | undefined;
  topicId: string | undefined;
  isOpen = true;
  written: StoreChange[][] = [];
  constructor(readonly partition: number, readonly failWith?: Error) {}
  /** The last value written of each key (parsed, as LocalStateStore.get gives it). */
  readonly values = new Map<string, unknown>();
  get(key: string): unknown {
    return this.values.get(key);
  }
  async write(changes: readonly StoreChange[], covered?: bigint, topicId?: string): Promise<boolean> {
    if (this.failWith) throw this.failWith;
    this.written.push([...changes]);
    for (const { key, value } of changes) value === null ? this.values.delete(key) : this.values.set(key, JSON.parse(value));
    this.covered = covered;
    this.topicId = topicId;
    return true;
  }
  async close(): Promise<void> {
    this.isOpen = false;
  }
}

function setup(options: { failWith?: Error; transactional?: boolean } = {}) {
  const logs: string[] = [];
  const failures: FvError[] = [];
  const opened: FakeStore[] = [];
  const records = new Map([[1, changelog(1, [["a", "1"], ["b", "2"], ["a", "3"], [OFFSETS, ENDS()]])]]);
  const admin = {
    groupMembers: async () => [
      { memberId: "m-me", name: "me", partitions: [0] },
      { memberId: "m-other", name: "other", partitions: [1] },
    ],
    readPartition: async (_topic: string, partition: number, read: ReadPartitionOptions = {}) => {
      const all = records.get(partition) ?? [];
      read.onProgress?.({ position: read.from ?? 0n, start: read.from ?? 0n, end: BigInt(all.length), logEnd: BigInt(all.length), topicId: "t1" });
      return all.filter((r) => r.offset >= (read.from ?? 0n));
    },
  } as unknown as Admin;
  const stores = {
    open: async (identity: { partition: number }) => {
      const store = new FakeStore(identity.partition, options.failWith);
      opened.push(store);
      return store as unknown as LocalStateStore;
    },
  } as unknown as LocalStateStores;
  const standbys = new StandbyTasks([stage], admin, stores, {
    groupId: "g",
    name: "me",
    replicas: 1,
    stateTopic: "fv-state-p",
    identityOf: (_stage, partition) => ({ stage: 0, partition, stateTopic: "fv-state-p", pipeline: "p" }) as never,
    intervalMs: 10_000,
    ...(options.transactional ? { transactional: true } : {}),
    log: (_level, msg) => void logs.push(msg),
    onFailure: (error) => void failures.push(error),
  });
  return { standbys, logs, failures, opened, records };
}

describe("StandbyTasks", () => {
  test("keeps a copy of the other member's partition, reads it to the changelog's end, the last version of each key", async () => {
    const { standbys, opened } = setup();
    await standbys.tick();
    expect(opened.map((s) => s.partition)).toEqual([1]);
    expect(opened[0]!.written).toEqual([[{ key: "b", value: "2" }, { key: "a", value: "3" }, { key: OFFSETS, value: ENDS() }]]);
    expect(standbys.list()).toEqual([{ topic: "fv-state-p", partition: 1, stage: 1, offset: 4, lag: 0 }]);
    await standbys.close();
  });

  test("a group not yet ended by its offsets record (being written, or cut short by a kill) is not applied: the copy covers up to it and reads it again", async () => {
    const { standbys, opened, records } = setup();
    records.set(1, changelog(1, [["a", "1"], [OFFSETS, ENDS()], ["b", "2"], ["a", "3"]]));
    await standbys.tick();
    expect(opened[0]!.written).toEqual([[{ key: "a", value: "1" }, { key: OFFSETS, value: ENDS() }]]);
    expect(standbys.list()).toEqual([{ topic: "fv-state-p", partition: 1, stage: 1, offset: 2, lag: 2 }]);
    // The next read starts at the pending group, with no offsets record before it: the copy's own says the rule holds.
    await standbys.tick();
    expect(opened[0]!.written[1]).toEqual([]);
    expect(standbys.list()).toEqual([{ topic: "fv-state-p", partition: 1, stage: 1, offset: 2, lag: 2 }]);
    // Its offsets record arrives: the whole group is applied.
    records.set(1, changelog(1, [["a", "1"], [OFFSETS, ENDS()], ["b", "2"], ["a", "3"], [OFFSETS, ENDS({ in: "9" })]]));
    await standbys.tick();
    expect(opened[0]!.written[2]).toEqual([{ key: "b", value: "2" }, { key: "a", value: "3" }, { key: OFFSETS, value: ENDS({ in: "9" }) }]);
    expect(standbys.list()).toEqual([{ topic: "fv-state-p", partition: 1, stage: 1, offset: 5, lag: 0 }]);
    await standbys.close();
  });

  test("under exactly-once (transactional) a copy applies everything read: no group is ever cut", async () => {
    const { standbys, opened, records } = setup({ transactional: true });
    records.set(1, changelog(1, [["a", "1"], [OFFSETS, ENDS()], ["a", null]]));
    await standbys.tick();
    expect(opened[0]!.written).toEqual([[{ key: OFFSETS, value: ENDS() }, { key: "a", value: null }]]);
    expect(standbys.list()).toEqual([{ topic: "fv-state-p", partition: 1, stage: 1, offset: 3, lag: 0 }]);
    await standbys.close();
  });

  test("a changelog written before groups ended with their offsets (no mark) is applied whole, as it was then", async () => {
    const { standbys, opened, records } = setup();
    records.set(1, changelog(1, [["a", "1"], [OFFSETS, "{}"], ["a", null]]));
    await standbys.tick();
    expect(opened[0]!.written).toEqual([[{ key: OFFSETS, value: "{}" }, { key: "a", value: null }]]);
    expect(standbys.list()).toEqual([{ topic: "fv-state-p", partition: 1, stage: 1, offset: 3, lag: 0 }]);
    await standbys.close();
  });

  test("a store that cannot be written is reported to the session once per tick, and the tick still settles", async () => {
    const failure = new FvError("STATE_STORE_FAILED", "local state store /x: disk full");
    const { standbys, failures, logs } = setup({ failWith: failure });
    await standbys.tick();
    expect(failures).toEqual([failure]);
    expect(logs).toEqual([]);
    await standbys.close();
  });

  test("any other failure is a warning, given once until a tick succeeds", async () => {
    const { standbys, failures, logs } = setup({ failWith: new Error("broker gone") });
    await standbys.tick();
    await standbys.tick();
    expect(failures).toEqual([]);
    expect(logs).toEqual(["standby replicas: broker gone (trying again)"]);
    await standbys.close();
  });
});
