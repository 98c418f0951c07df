/**
 * Exactly-once failover without waiting for the transaction timeout.
 *
 * A member killed inside a transaction leaves it open until the broker aborts it: the
 * transaction timeout plus the broker's abort check (about 17 s here). Until then its output
 * records hold back every read_committed reader of those partitions (the last stable offset
 * cannot pass them), and its pending offsets hold back the member that takes its partitions.
 * Its transactional id ends that at once: InitProducerId with that id aborts the open
 * transaction and fences whoever held it.
 *
 * So every member keeps the group's last stable view of who owns which partition (DescribeGroups
 * after each rebalance). When it is assigned partitions, it reads the view again once the group
 * is stable; a previous owner of those partitions that is no longer in the group departed (killed,
 * or expelled as a zombie), and its transactional id is fenced.
 *
 * Why this is safe: fencing never commits anything; at worst it aborts. A departed member cannot
 * commit any more (a zombie's commit would fail on its stale generation anyway). A member that
 * left cleanly committed or aborted first, so fencing its id changes nothing. A member that
 * restarted with the same STREAM_INSTANCE_ID keeps its name, so it is not taken for departed.
 */
import { deadline, delay } from "../async.ts";
import type { Admin, GroupMember, KafkaClient, TopicPartition } from "../kafka/port.ts";
import type { Logger } from "../logger.ts";
import type { LoopCounters } from "./counters.ts";
import { transactionalIdOf } from "./plan.ts";

/** The group is described until it is stable: this many tries, this far apart. */
const DESCRIBE_ATTEMPTS = 25;
const DESCRIBE_RETRY_MS = 200;
const FENCE_TIMEOUT_MS = 15_000;

export interface DepartedOwnersOptions {
  pipeline: string;
  groupId: string;
  /** This member's name in the group (its own transactional id is never fenced here). */
  me: string;
  log: Logger;
  /**
   * Exactly-once: transactional ids fenced per departed member, one per producer it may have had.
   * Default 2, the most STREAM_TRANSACTION_PRODUCERS allows, whatever this member's own setting:
   * a member that ran with another setting leaves no transaction open past its fencing.
   */
  producers?: number;
}

/**
 * Who owned which partition at the last stable view of the group, kept across sessions (one per
 * consumer loop), and the fencing of owners whose transaction blocks partitions this member got.
 */
export class DepartedOwners {
  readonly #options: DepartedOwnersOptions;
  /** Input partition → names of the members that owned it at the last stable view. */
  #owners = new Map<number, string[]>();
  readonly #counters: LoopCounters;

  constructor(options: DepartedOwnersOptions, counters: LoopCounters) {
    this.#options = options;
    this.#counters = counters;
  }

  /** Takes the group's members as the latest view of who owns what. */
  remember(members: readonly GroupMember[]): void {
    const owners = new Map<number, string[]>();
    for (const m of members) for (const p of m.partitions) owners.set(p, [...(owners.get(p) ?? []), m.name]);
    this.#owners = owners;
  }

  /** The members other than this one that owned `partitions` at the last view, each with those of the partitions it owned. */
  previousOwners(partitions: Iterable<number>): Map<string, number[]> {
    const out = new Map<string, number[]>();
    for (const p of new Set(partitions)) {
      for (const name of this.#owners.get(p) ?? []) if (name !== this.#options.me) out.set(name, [...(out.get(name) ?? []), p]);
    }
    return out;
  }

  /**
   * After an assignment: reads the group's members once it is stable, fences the previous
   * owners of the newly assigned partitions that are no longer members (exactly-once), and keeps
   * the new view for the next failover. Never throws; `signal` ends it.
   */
  async assigned(assigned: readonly TopicPartition[], admin: Admin, client: KafkaClient, exactlyOnce: boolean, signal: AbortSignal): Promise<void> {
    // Who had these partitions, as known before this rebalance.
    const previous = this.previousOwners(assigned.map((tp) => tp.partition));
    const members = await this.#describe(admin, signal);
    if (!members || signal.aborted) return;
    this.remember(members);
    if (!exactlyOnce) return;
    const present = new Set(members.map((m) => m.name));
    await Promise.all([...previous].filter(([name]) => !present.has(name)).map(([name, partitions]) => this.#fence(client, name, partitions)));
  }

  /** The group's members once it is stable (a few tries), or undefined. */
  async #describe(admin: Admin, signal: AbortSignal): Promise<GroupMember[] | undefined> {
    if (!admin.groupMembers) return undefined;
    for (let attempt = 0; attempt < DESCRIBE_ATTEMPTS && !signal.aborted; attempt++) {
      try {
        const members = await admin.groupMembers(this.#options.groupId);
        if (members) return members;
      } catch {
        // Tried again below, or at the next assignment.
      }
      await delay(DESCRIBE_RETRY_MS, signal).catch(() => {});
    }
    return undefined;
  }

  async #fence(client: KafkaClient, owner: string, partitions: number[]): Promise<void> {
    const { groupId, pipeline, log } = this.#options;
    const ids = Array.from({ length: this.#options.producers ?? 2 }, (_, turn) => transactionalIdOf(pipeline, owner, turn));
    log("info", `previous owner ${owner} of partitions ${partitions.sort((a, b) => a - b).join(",")} left the group: fencing its transactional id${ids.length > 1 ? "s" : ""} ${ids.join(", ")}, so the broker aborts a transaction it left open now rather than at its timeout`);
    const fenced = await Promise.all(ids.map(async (transactionalId) => {
      const producer = client.transactionalProducer({ clientId: `${groupId}-fence`, transactionalId });
      try {
        await deadline(producer.ready(), FENCE_TIMEOUT_MS);
        return true;
      } catch (error) {
        log("warn", `fencing transactional id ${transactionalId}: ${(error as Error).message} (the broker aborts a transaction it left open at its timeout instead)`);
        return false;
      } finally {
        await deadline(producer.close(), FENCE_TIMEOUT_MS).catch(() => {});
      }
    }));
    if (fenced.every(Boolean)) this.#counters.transactionsFenced = (this.#counters.transactionsFenced ?? 0) + 1;
  }
}
