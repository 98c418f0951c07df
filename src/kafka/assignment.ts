/**
 * Who owns which partition number, and who keeps standby copies of its state: pure functions the
 * group leader's assignor (platformatic/assigner.ts) and every member (the standby tasks) share,
 * so all of them agree without a word more than the group protocol carries.
 */

/** A member as the assignor sees it. */
export interface AssignedMember {
  memberId: string;
  /** Stable name (group instance id, else client id): the order of members. */
  name: string;
  /** Partition numbers it owns now (empty for a member that just started). */
  owned: readonly number[];
  /**
   * The generation in which it owned them (-1: none). A member that lost its membership (a paused
   * zombie, a member the broker forgot) still claims what it owned generations ago; the claims of
   * the latest generation go first, so a stale claim never takes a partition from its current owner.
   */
  generation?: number;
  /** Per partition number, the changelog offset its local state covers (active or standby store). */
  warm: ReadonlyMap<number, bigint>;
}

/** Members in the one order every member computes alike: by name, then member id. */
export function orderMembers<M extends { memberId: string; name: string }>(members: Iterable<M>): M[] {
  return [...members].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : a.memberId < b.memberId ? -1 : a.memberId > b.memberId ? 1 : 0));
}

/**
 * The owner (member id) of each partition number 0..count-1:
 *
 * 1. Balanced: every member gets ⌊count/members⌋ or one more (the extra ones go to the members
 *    that own the most now, then by order).
 * 2. Sticky: a member keeps what it owns, up to its share, so a member that joins or leaves moves
 *    only the partitions it must (Kafka's sticky assignor); nothing else restores. Claims of the
 *    latest generation first: a member that claims from an older one (it was out of the group
 *    meanwhile) keeps only partitions nobody owns now.
 * 3. Warm: a partition that moves goes to the member whose local state of it covers the most of
 *    its changelog (a standby, or a restarted member's own store), so it restores only a tail.
 * 4. The rest go round, to the least loaded member: a fresh group gets p modulo the member count.
 */
export function assignPartitions(members: readonly AssignedMember[], count: number): string[] {
  const sorted = orderMembers(members);
  const owners = new Array<string>(count);
  if (sorted.length === 0 || count === 0) return owners;
  const base = Math.floor(count / sorted.length);
  const extra = count % sorted.length;
  const latest = Math.max(-1, ...sorted.map((m) => m.generation ?? -1));
  // Who gets the extra partitions: those that own the most now (current claims only).
  const owning = (m: AssignedMember) => ((m.generation ?? -1) < latest ? 0 : new Set(m.owned.filter((p) => Number.isInteger(p) && p >= 0 && p < count)).size);
  const byClaim = sorted.map((m, index) => ({ m, index })).sort((a, b) => owning(b.m) - owning(a.m) || a.index - b.index);
  const capacity = new Map<string, number>(sorted.map((m) => [m.memberId, base]));
  for (const { m } of byClaim.slice(0, extra)) capacity.set(m.memberId, base + 1);
  const load = new Map<string, number>(sorted.map((m) => [m.memberId, 0]));
  const give = (p: number, m: AssignedMember) => {
    owners[p] = m.memberId;
    load.set(m.memberId, load.get(m.memberId)! + 1);
  };
  const room = (m: AssignedMember) => load.get(m.memberId)! < capacity.get(m.memberId)!;
  const newestFirst = [...sorted].sort((a, b) => (b.generation ?? -1) - (a.generation ?? -1));
  for (const m of newestFirst) {
    for (const p of [...new Set(m.owned)].sort((a, b) => a - b)) if (p >= 0 && p < count && owners[p] === undefined && room(m)) give(p, m);
  }
  for (let p = 0; p < count; p++) {
    if (owners[p] !== undefined) continue;
    let best: AssignedMember | undefined;
    for (const m of sorted) {
      const offset = m.warm.get(p);
      if (offset === undefined || !room(m)) continue;
      if (!best || offset > best.warm.get(p)!) best = m;
    }
    if (best) give(p, best);
  }
  for (let p = 0; p < count; p++) {
    if (owners[p] !== undefined) continue;
    let best: AssignedMember | undefined;
    for (const m of sorted) if (room(m) && (!best || load.get(m.memberId)! < load.get(best.memberId)!)) best = m;
    give(p, best!);
  }
  return owners;
}

/**
 * The partition numbers `me` keeps standby copies of: replica r (1..replicas) of a partition
 * lives on the r-th member after its owner, in member order (never on its owner, so with fewer
 * members than replicas + 1 some replicas are not placed).
 */
export function standbyPartitions(members: ReadonlyArray<{ memberId: string; name: string; partitions: readonly number[] }>, me: string, replicas: number): number[] {
  const sorted = orderMembers(members);
  const index = sorted.findIndex((m) => m.name === me);
  if (index < 0 || replicas <= 0) return [];
  const out = new Set<number>();
  for (let i = 0; i < sorted.length; i++) {
    if (i === index) continue;
    const distance = (index - i + sorted.length) % sorted.length;
    if (distance >= 1 && distance <= replicas) for (const p of sorted[i]!.partitions) out.add(p);
  }
  for (const p of sorted[index]!.partitions) out.delete(p);
  return [...out].sort((a, b) => a - b);
}
