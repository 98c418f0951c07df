/** The core both Kafka adapters share (src/kafka/shared.ts). */
import { describe, expect, test } from "bun:test";
import { FvError } from "../../src/errors.ts";
import { byTopic, createMissingTopics, GroupMembers, OwnedPartitions, partitionsOf, TransactionState } from "../../src/kafka/shared.ts";
import type { TopicSpec } from "../../src/kafka/port.ts";

const tp = (topic: string, partition: number) => ({ topic, partition });

describe("owned partitions", () => {
  test("records of a partition kept across a rebalance that a rejoin rewinds over are skipped", () => {
    const owned = new OwnedPartitions();
    owned.reassign([tp("in", 0), tp("in", 1)]);
    expect([10n, 11n].map((o) => owned.accept("in", 0, o))).toEqual([true, true]);
    // The library starts the partition again from its committed offset 10.
    expect(owned.reassign([tp("in", 0)])).toEqual({ assigned: [], revoked: [tp("in", 1)], owned: [tp("in", 0)] });
    expect([10n, 11n, 12n].map((o) => owned.accept("in", 0, o))).toEqual([false, false, true]);
  });

  test("a record of a partition not owned is dropped, and a partition assigned again starts with no position", () => {
    const owned = new OwnedPartitions();
    owned.reassign([tp("in", 0)]);
    owned.accept("in", 0, 5n);
    expect(owned.accept("in", 1, 0n)).toBe(false);
    owned.reassign([tp("in", 1)]);
    expect(owned.reassign([tp("in", 0), tp("in", 1)]).assigned).toEqual([tp("in", 0)]);
    expect(owned.accept("in", 0, 3n)).toBe(true);
  });

  test("a partition revoked right after its records were accepted accepts nothing more (no lookup is kept across a reassignment)", () => {
    const owned = new OwnedPartitions();
    owned.reassign([tp("in", 0), tp("in", 1)]);
    expect([5n, 6n].map((o) => owned.accept("in", 0, o))).toEqual([true, true]);
    owned.reassign([tp("in", 1)]);
    expect(owned.accept("in", 0, 7n)).toBe(false);
    // Assigned again: a new entry, with no position, not the revoked one's.
    owned.reassign([tp("in", 0), tp("in", 1)]);
    expect([2n, 3n].map((o) => owned.accept("in", 0, o))).toEqual([true, true]);
    expect([1n, 7n].map((o) => owned.accept("in", 1, o))).toEqual([true, true]);
    expect(owned.accept("in", 0, 3n)).toBe(false);
  });

  test("a join that does not follow on from the last one revokes and assigns every partition anew, positions gone", () => {
    const owned = new OwnedPartitions();
    owned.reassign([tp("in", 0)]);
    owned.accept("in", 0, 5n);
    expect(owned.reassign([tp("in", 0)], false)).toEqual({ assigned: [tp("in", 0)], revoked: [tp("in", 0)], owned: [tp("in", 0)] });
    expect(owned.accept("in", 0, 0n)).toBe(true);
  });

  test("a stable committed offset skips below it; a lost assignment forgets every position", () => {
    const owned = new OwnedPartitions();
    owned.reassign([tp("in", 0)]);
    owned.skipBelow("in", 0, 7n);
    owned.skipBelow("in", 0, -1n);
    expect([6n, 7n].map((o) => owned.accept("in", 0, o))).toEqual([false, true]);
    owned.forgetPositions();
    expect(owned.accept("in", 0, 0n)).toBe(true);
  });
});

describe("group metadata stands for the consumer that handed it out", () => {
  test("a transaction finds the library consumer from the value itself, and refuses a copy", () => {
    const members = new GroupMembers<{ name: string }>("test");
    const library = { name: "library consumer" };
    const metadata = members.issue({ groupId: "g", generationId: 3, memberId: "m" }, library);
    expect(metadata).toEqual({ groupId: "g", generationId: 3, memberId: "m" });
    expect(Object.isFrozen(metadata)).toBe(true);
    expect(members.memberOf(metadata, "adding offsets")).toBe(library);
    expect(() => members.memberOf({ ...metadata }, "adding offsets")).toThrow(/adding offsets: the group metadata was not handed out by a consumer of this test client/);
    expect(() => new GroupMembers("other").memberOf(metadata, "x")).toThrow(FvError);
  });
});

describe("transaction state", () => {
  test("an empty transaction has nothing to end; one with a send has, until it ends", () => {
    const state = new TransactionState();
    state.began();
    expect(state.endable).toBe(false);
    state.wrote();
    expect(state.endable).toBe(true);
    expect(() => state.mustBeIdle("releasePendingOffsets")).toThrow("releasePendingOffsets with a transaction open");
    state.ended();
    expect({ open: state.open, dirty: state.dirty }).toEqual({ open: false, dirty: false });
  });
});

describe("topics and partitions", () => {
  test("only missing topics are created, and one another process created first is left alone", async () => {
    const created: string[] = [];
    const exists = new Error("exists");
    await createMissingTopics([{ topic: "a", partitions: 1 }, { topic: "b", partitions: 2 }, { topic: "c", partitions: 3 }], {
      partitionCounts: async (topics) => new Map(topics.map((t) => [t, t === "a" ? 1 : undefined])),
      create: async (spec: TopicSpec) => {
        if (spec.topic === "c") throw exists;
        created.push(spec.topic);
      },
      alreadyExists: (error) => error === exists,
      classify: (error, what) => new FvError("KAFKA_FATAL", what, { cause: error }),
    });
    expect(created).toEqual(["b"]);
  });

  test("a failed create is sorted by the adapter and names the topic", async () => {
    const failing = createMissingTopics([{ topic: "a", partitions: 1 }], {
      partitionCounts: async () => new Map([["a", undefined]]),
      create: async () => {
        throw new Error("denied");
      },
      alreadyExists: () => false,
      classify: (error, what) => new FvError("KAFKA_FATAL", `${what} failed: ${(error as Error).message}`),
    });
    await expect(failing).rejects.toMatchObject({ code: "KAFKA_FATAL", message: "creating topic a failed: denied" });
  });

  test("the partitions of topics come from their counts; a missing topic has none", () => {
    const counts = new Map<string, number | undefined>([["a", 2], ["missing", undefined], ["b", 3]]);
    expect(partitionsOf(counts)).toEqual([tp("a", 0), tp("a", 1), tp("b", 0), tp("b", 1), tp("b", 2)]);
    expect(partitionsOf(counts, [1, 2])).toEqual([tp("a", 1), tp("b", 1), tp("b", 2)]);
    expect([...byTopic(partitionsOf(counts, [1]))]).toEqual([["a", [1]], ["b", [1]]]);
  });
});
