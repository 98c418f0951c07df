import { describe, expect, test } from "bun:test";
import { type AssignedMember, assignPartitions, standbyPartitions } from "../../src/kafka/assignment.ts";
import { memberUserData, parseUserData } from "../../src/kafka/platformatic/assigner.ts";

const member = (name: string, owned: number[] = [], warm: Record<number, bigint> = {}, generation = 1): AssignedMember => ({
  memberId: `${name}-id`,
  name,
  owned,
  generation,
  warm: new Map(Object.entries(warm).map(([p, o]) => [Number(p), o])),
});
/** Partition numbers per member name. */
const byMember = (owners: string[]) => {
  const out: Record<string, number[]> = {};
  owners.forEach((id, p) => (out[id.replace(/-id$/, "")] ??= []).push(p));
  return out;
};

describe("assignPartitions", () => {
  test("a fresh group: partition p to member p modulo the count, by name", () => {
    expect(byMember(assignPartitions([member("b"), member("a"), member("c")], 8))).toEqual({ a: [0, 3, 6], b: [1, 4, 7], c: [2, 5] });
  });

  test("a member that joins takes only what balance requires; the others keep the rest", () => {
    const owners = assignPartitions([member("a", [0, 2, 4, 6]), member("b", [1, 3, 5, 7]), member("c")], 8);
    const got = byMember(owners);
    expect(got.a!.every((p) => [0, 2, 4, 6].includes(p))).toBe(true);
    expect(got.b!.every((p) => [1, 3, 5, 7].includes(p))).toBe(true);
    expect(got.c).toHaveLength(2);
    expect(got.a!.length + got.b!.length).toBe(6);
  });

  test("a member that leaves: its partitions go to the member whose state of them is furthest along (the standby)", () => {
    // c owned 2 and 5 and died; b keeps standby copies of them, a is warm on 5 only and behind.
    const owners = assignPartitions([member("a", [0, 3], { 5: 10n }), member("b", [1, 4], { 2: 100n, 5: 90n })], 6);
    expect(byMember(owners)).toEqual({ a: [0, 3, 5], b: [1, 2, 4] });
    const warmFirst = assignPartitions([member("a", [0, 3], { 2: 100n, 5: 100n }), member("b", [1, 4])], 6);
    expect(byMember(warmFirst)).toEqual({ a: [0, 2, 3], b: [1, 4, 5] });
  });

  test("a restarted member (owns nothing yet) gets its partitions back through its own store", () => {
    const owners = assignPartitions([member("a", [0, 2]), member("b", [], { 1: 50n, 3: 50n })], 4);
    expect(byMember(owners)).toEqual({ a: [0, 2], b: [1, 3] });
  });

  test("a zombie's stale claim (an older generation) never takes a partition from its current owner", () => {
    // a was paused, lost its membership at generation 3; b took everything in generation 4.
    const owners = assignPartitions([member("a", [0, 1], {}, 3), member("b", [0, 1, 2, 3], {}, 4)], 4);
    expect(byMember(owners)).toEqual({ a: [2, 3], b: [0, 1] });
    // Nobody at the latest generation claims 1: the stale owner may keep it.
    expect(byMember(assignPartitions([member("a", [0, 1], {}, 3), member("b", [0, 2, 3], {}, 4), member("c", [], {}, -1)], 4))).toEqual({ a: [1], b: [0, 2], c: [3] });
  });

  test("balanced whatever they claim: no member above its share", () => {
    const owners = assignPartitions([member("a", [0, 1, 2, 3, 4, 5]), member("b", [0, 1])], 6);
    expect(byMember(owners)).toEqual({ a: [0, 1, 2], b: [3, 4, 5] });
  });
});

describe("standbyPartitions", () => {
  const members = [
    { memberId: "1", name: "a", partitions: [0, 3] },
    { memberId: "2", name: "b", partitions: [1, 4] },
    { memberId: "3", name: "c", partitions: [2, 5] },
  ];
  test("replica r of a partition lives on the r-th member after its owner", () => {
    expect(standbyPartitions(members, "b", 1)).toEqual([0, 3]);
    expect(standbyPartitions(members, "a", 1)).toEqual([2, 5]);
    expect(standbyPartitions(members, "a", 2)).toEqual([1, 2, 4, 5]);
    expect(standbyPartitions(members, "a", 0)).toEqual([]);
  });
  test("never on the owner, whatever the replica count", () => {
    expect(standbyPartitions(members.slice(0, 2), "a", 5)).toEqual([1, 4]);
    expect(standbyPartitions([members[0]!], "a", 1)).toEqual([]);
  });
});

describe("the member user data", () => {
  test("carries the name, the owned partitions and the warm offsets; anything else is named by its member id", () => {
    const parsed = parseUserData("m1", memberUserData("pod-1", [0, 2], new Map([[1, 42n]]), 7));
    expect(parsed).toEqual({ memberId: "m1", name: "pod-1", owned: [0, 2], generation: 7, warm: new Map([[1, 42n]]) });
    expect(parseUserData("m2", Buffer.from("not json"))).toEqual({ memberId: "m2", name: "m2", owned: [], generation: -1, warm: new Map() });
  });
});
