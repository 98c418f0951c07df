/**
 * The pure-JS adapter's partition assignor: partition p of every subscribed topic on one member,
 * members ordered by their stable names.
 */
import { Buffer } from "node:buffer";
import type { GroupPartitionsAssigner } from "@platformatic/kafka";

/**
 * What each member tells the group leader when it joins (the subscription's user data): its
 * stable name, the group instance id when it has one. Constant across rejoins, so a static
 * member that comes back is not seen as changed (which would start a rebalance).
 */
export const memberUserData = (name: string) => Buffer.from(JSON.stringify({ fv: 1, name }));

function memberName(memberId: string, userData: Buffer | undefined): string {
  try {
    const name = userData?.length ? JSON.parse(userData.toString()).name : undefined;
    return typeof name === "string" ? name : memberId;
  } catch {
    return memberId;
  }
}

/**
 * Partition number p of every subscribed topic goes to the same member: p modulo the member
 * count, members sorted by their stable names (group instance ids), so a member that restarts
 * gets the same partitions back. Stateful stages keep one task per partition number, and a join
 * needs partition p of both inputs in one place; the library's round-robin deals partitions of
 * all topics out in one sequence and splits them.
 */
export const coPartitionedAssigner: GroupPartitionsAssigner = (_current, members, topics, metadata) => {
  const ids = [...members.entries()]
    .map(([memberId, subscription]) => ({ memberId, name: memberName(memberId, subscription.metadata as Buffer | undefined) }))
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : a.memberId < b.memberId ? -1 : 1))
    .map((m) => m.memberId);
  const out = ids.map((memberId) => ({ memberId, assignments: new Map<string, { topic: string; partitions: number[] }>() }));
  for (const topic of topics) {
    const count = metadata.topics.get(topic)?.partitionsCount ?? 0;
    for (let p = 0; p < count; p++) {
      const member = out[p % out.length]!;
      const entry = member.assignments.get(topic) ?? { topic, partitions: [] };
      entry.partitions.push(p);
      member.assignments.set(topic, entry);
    }
  }
  return out;
};
