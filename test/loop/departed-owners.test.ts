import { describe, expect, test } from "bun:test";
import type { Admin, GroupMember, KafkaClient, TopicPartition } from "../../src/kafka/port.ts";
import { emptyCounters } from "../../src/loop/counters.ts";
import { DepartedOwners } from "../../src/loop/departed-owners.ts";
import { clientIdOf, groupIdOf, memberNameOf, transactionalIdOf } from "../../src/loop/plan.ts";
import { parseSettings } from "../../src/control/settings.ts";

const PIPELINE = "orders";
const GROUP = groupIdOf(PIPELINE);
const tps = (...partitions: number[]): TopicPartition[] => partitions.map((partition) => ({ topic: "in", partition }));
const member = (name: string, ...partitions: number[]): GroupMember => ({ memberId: `${name}-id`, name, partitions });

/** An admin whose group answers `views` in turn (undefined: not stable yet), and a client that records each fencing. */
function fakes(views: Array<GroupMember[] | undefined>) {
  const fenced: string[] = [];
  const closed: string[] = [];
  const admin = { groupMembers: async () => views.length > 1 ? views.shift() : views[0] } as unknown as Admin;
  const client = {
    transactionalProducer: ({ transactionalId }: { transactionalId: string }) => ({
      ready: async () => void fenced.push(transactionalId),
      close: async () => void closed.push(transactionalId),
    }),
  } as unknown as KafkaClient;
  return { admin, client, fenced, closed };
}

function owners(me = "b") {
  const counters = emptyCounters();
  const logs: string[] = [];
  // One id per member keeps these expectations short; the default (two) has its own test.
  const departed = new DepartedOwners({ pipeline: PIPELINE, groupId: GROUP, me, log: (_level, message) => logs.push(message), producers: 1 }, counters);
  return { departed, counters, logs };
}

describe("DepartedOwners", () => {
  test("a previous owner gone from the group is fenced by its transactional id, once; the survivor and the member itself are not", async () => {
    const { departed, counters, logs } = owners("b");
    departed.remember([member("a", 0, 1), member("b", 2), member("c", 3)]);
    // a was killed: b gets 0 and 1; c is still there.
    const { admin, client, fenced, closed } = fakes([[member("b", 0, 1, 2), member("c", 3)]]);
    await departed.assigned(tps(0, 1), admin, client, true, new AbortController().signal);
    expect(fenced).toEqual([transactionalIdOf(PIPELINE, "a")]);
    expect(closed).toEqual(fenced);
    expect(counters.transactionsFenced).toBe(1);
    expect(logs.some((l) => l.includes("previous owner a of partitions 0,1 left the group"))).toBe(true);
    // The new view is kept: the next failover knows b owns 0..2.
    expect([...departed.previousOwners([0, 1, 2, 3])]).toEqual([["c", [3]]]);
  });

  test("by default both transactional ids a departed owner may have had are fenced (two producers take turns), and it counts once", async () => {
    const counters = emptyCounters();
    const departed = new DepartedOwners({ pipeline: PIPELINE, groupId: GROUP, me: "b", log: () => {} }, counters);
    departed.remember([member("a", 0), member("b", 1)]);
    const { admin, client, fenced, closed } = fakes([[member("b", 0, 1)]]);
    await departed.assigned(tps(0), admin, client, true, new AbortController().signal);
    expect(fenced.sort()).toEqual([transactionalIdOf(PIPELINE, "a"), transactionalIdOf(PIPELINE, "a", 1)]);
    expect(transactionalIdOf(PIPELINE, "a", 1)).toBe(`${transactionalIdOf(PIPELINE, "a")}.2`);
    expect(closed.sort()).toEqual(fenced);
    expect(counters.transactionsFenced).toBe(1);
  });

  test("a previous owner still in the group (a clean rebalance) is not fenced", async () => {
    const { departed, counters } = owners("b");
    departed.remember([member("a", 0, 1), member("b", 2, 3)]);
    const { admin, client, fenced } = fakes([[member("a", 0), member("b", 1, 2, 3)]]);
    await departed.assigned(tps(1), admin, client, true, new AbortController().signal);
    expect(fenced).toEqual([]);
    expect(counters.transactionsFenced).toBeUndefined();
  });

  test("the group is read again until it is stable; under at-least-once nothing is fenced", async () => {
    const { departed } = owners("b");
    departed.remember([member("a", 0), member("b", 1)]);
    const { admin, client, fenced } = fakes([undefined, undefined, [member("b", 0, 1)]]);
    await departed.assigned(tps(0), admin, client, false, new AbortController().signal);
    expect(fenced).toEqual([]);
    expect([...departed.previousOwners([0, 1])]).toEqual([]);
    // Exactly-once from the same view: the departed a is fenced.
    const again = owners("b");
    again.departed.remember([member("a", 0), member("b", 1)]);
    const second = fakes([undefined, [member("b", 0, 1)]]);
    await again.departed.assigned(tps(0), second.admin, second.client, true, new AbortController().signal);
    expect(second.fenced).toEqual([transactionalIdOf(PIPELINE, "a")]);
  });

  test("a first assignment (no earlier view) fences nothing; a closed session stops at once", async () => {
    const { departed } = owners("b");
    const { admin, client, fenced } = fakes([[member("b", 0, 1)]]);
    await departed.assigned(tps(0, 1), admin, client, true, new AbortController().signal);
    expect(fenced).toEqual([]);
    const closing = new AbortController();
    closing.abort();
    departed.remember([member("a", 0), member("b", 1)]);
    await departed.assigned(tps(0), admin, client, true, closing.signal);
    expect(fenced).toEqual([]);
  });
});

describe("transactionalIdOf", () => {
  const plan = (instanceId: string | undefined, consumerIndex: number) => ({
    groupId: GROUP,
    instanceId: "r4nd0m",
    consumerIndex,
    settings: parseSettings(instanceId ? { STREAM_INSTANCE_ID: instanceId } : {}),
  });

  test("a member's transactional id follows from its name in the group, with or without STREAM_INSTANCE_ID", () => {
    // With a stable instance id the member is `<id>-<index>`; without, its client id.
    expect(memberNameOf(plan("pod-7", 1))).toBe("pod-7-1");
    expect(transactionalIdOf(PIPELINE, memberNameOf(plan("pod-7", 1)))).toBe("fv-orders-pod-7-1");
    expect(memberNameOf(plan(undefined, 0))).toBe(clientIdOf(plan(undefined, 0)));
    expect(memberNameOf(plan(undefined, 0))).toBe("fv-stream-orders-r4nd0m-0");
    expect(transactionalIdOf(PIPELINE, memberNameOf(plan(undefined, 0)))).toBe("fv-orders-r4nd0m-0");
  });
});
