import { describe, expect, test } from "bun:test";
import { PairMap, PartitionMap, PartitionSet } from "../../src/kafka/topic-partition.ts";

describe("PairMap", () => {
  test("gets, sets and deletes by pair, the pair asked for last included", () => {
    const map = new PairMap<string, number, string>();
    expect(map.get("in", 0)).toBeUndefined();
    map.set("in", 0, "a").set("in", 1, "b");
    expect([map.get("in", 0), map.get("in", 0), map.get("in", 1), map.get("out", 0)]).toEqual(["a", "a", "b", undefined]);
    map.set("in", 1, "b2");
    expect(map.get("in", 1)).toBe("b2");
    expect(map.size).toBe(2);
    expect(map.delete("in", 1)).toBe(true);
    expect([map.has("in", 1), map.get("in", 1)]).toEqual([false, undefined]);
    map.set("in", 1, "again");
    expect(map.entries()).toEqual([["in", 0, "a"], ["in", 1, "again"]]);
  });

  test("a pair found last is forgotten by deleteWhere and clear", () => {
    const map = new PairMap<number, number, number>();
    map.set(0, 1, 10).set(0, 2, 20);
    expect(map.get(0, 2)).toBe(20);
    map.deleteWhere((_, b) => b === 2);
    expect([map.has(0, 2), map.get(0, 1)]).toEqual([false, 10]);
    map.clear();
    expect([map.has(0, 1), map.size]).toEqual([false, 0]);
  });

  test("entries are a snapshot: a later set does not change them", () => {
    const map = new PairMap<string, number, number>();
    map.set("in", 0, 1);
    const before = map.entries();
    map.set("in", 0, 2);
    expect(before).toEqual([["in", 0, 1]]);
    expect(map.values()).toEqual([2]);
  });
});

describe("PartitionMap and PartitionSet", () => {
  test("keyed by topic and partition, in insertion order", () => {
    const positions = new PartitionMap<bigint>();
    positions.set({ topic: "in", partition: 0 }, 42n).set({ topic: "in", partition: 1 }, 7n);
    positions.set({ topic: "in", partition: 0 }, 43n);
    expect(positions.get({ topic: "in", partition: 0 })).toBe(43n);
    expect(positions.entries()).toEqual([[{ topic: "in", partition: 0 }, 43n], [{ topic: "in", partition: 1 }, 7n]]);
    const set = new PartitionSet([{ topic: "a", partition: 0 }]);
    expect([set.has({ topic: "a", partition: 0 }), set.has({ topic: "a", partition: 1 }), set.has({ topic: "b", partition: 0 })]).toEqual([true, false, false]);
    set.delete({ topic: "a", partition: 0 });
    expect(set.has({ topic: "a", partition: 0 })).toBe(false);
  });
});
