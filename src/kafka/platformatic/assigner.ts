/**
 * The pure-JS adapter's partition assignor: partition p of every subscribed topic on one member
 * (co-partitioned), balanced, sticky, and preferring the member whose local state of a partition
 * is furthest along (its standby, or a restarted member's own store) when a partition moves.
 */
import { Buffer } from "node:buffer";
import type { GroupPartitionsAssigner } from "@platformatic/kafka";
import { type AssignedMember, assignPartitions } from "../assignment.ts";

/**
 * What each member tells the group leader when it joins (the subscription's user data): its
 * stable name (the group instance id when it has one), the partition numbers it owns now and the
 * generation it owns them in (as Kafka's sticky assignor sends), and the changelog offset its local state covers per partition number (its active and standby
 * stores).
 */
export function memberUserData(name: string, owned: readonly number[] = [], warm: ReadonlyMap<number, bigint> = new Map(), generation = -1): Buffer {
  return Buffer.from(JSON.stringify({ fv: 1, name, owned, generation, warm: Object.fromEntries([...warm].map(([p, offset]) => [p, String(offset)])) }));
}

/** A member's user data as sent by `memberUserData`; a member without it (another client) is named by its member id. */
export function parseUserData(memberId: string, userData: Buffer | undefined): AssignedMember {
  try {
    const data = userData?.length ? JSON.parse(userData.toString()) : undefined;
    const name = typeof data?.name === "string" ? data.name : memberId;
    const owned = Array.isArray(data?.owned) ? data.owned.filter((p: unknown) => Number.isInteger(p)) : [];
    const generation = Number.isInteger(data?.generation) ? (data.generation as number) : -1;
    const warm = new Map<number, bigint>();
    for (const [p, offset] of Object.entries((data?.warm ?? {}) as Record<string, string>)) {
      if (/^\d+$/.test(p) && /^\d+$/.test(String(offset))) warm.set(Number(p), BigInt(offset));
    }
    return { memberId, name, owned, generation, warm };
  } catch {
    return { memberId, name: memberId, owned: [], generation: -1, warm: new Map() };
  }
}

/**
 * Partition number p of every subscribed topic goes to the same member (stateful stages keep one
 * task per partition number, and a join needs partition p of both inputs in one place; the
 * library's round-robin deals partitions of all topics out in one sequence and splits them).
 * Which member: `assignPartitions` (../assignment.ts).
 */
export const coPartitionedAssigner: GroupPartitionsAssigner = (_current, members, topics, metadata) => {
  const assigned = [...members.entries()].map(([memberId, subscription]) => parseUserData(memberId, subscription.metadata as Buffer | undefined));
  const counts = [...topics].map((topic) => metadata.topics.get(topic)?.partitionsCount ?? 0);
  const owners = assignPartitions(assigned, Math.max(0, ...counts));
  const out = new Map(assigned.map((m) => [m.memberId, { memberId: m.memberId, assignments: new Map<string, { topic: string; partitions: number[] }>() }]));
  for (const topic of topics) {
    const count = metadata.topics.get(topic)?.partitionsCount ?? 0;
    for (let p = 0; p < count; p++) {
      const member = out.get(owners[p]!)!;
      const entry = member.assignments.get(topic) ?? { topic, partitions: [] };
      entry.partitions.push(p);
      member.assignments.set(topic, entry);
    }
  }
  return [...out.values()];
};
