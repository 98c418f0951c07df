/**
 * Standby replicas (STREAM_STANDBY_REPLICAS, Kafka Streams' standby tasks): this process keeps
 * copies of other members' task states up to date by tailing their changelog partitions into
 * local stores (`<STREAM_STATE_DIR>/standby/...`). Which partitions: src/kafka/assignment.ts
 * (replica r of a partition on the r-th member after its owner). When a partition moves here,
 * its standby copy becomes the active store (LocalStateStores.promote) and the restore reads only
 * what the copy had not yet seen; the assignor sends a moving partition where its state is
 * furthest along, which is its standby.
 */
import type { CompiledStage } from "../topology/compile-topology.ts";
import { FvError } from "../errors.ts";
import type { Admin, InboundRecord } from "../kafka/port.ts";
import { standbyPartitions } from "../kafka/assignment.ts";
import { PairMap } from "../kafka/topic-partition.ts";
import type { Logger } from "../logger.ts";
import type { LocalStateStore, LocalStateStores, StoreChange, StoreIdentity } from "../state/local-store.ts";
import type { StateRead } from "./state-reads.ts";
import { OFFSETS_KEY, stageGroups } from "./changelog-groups.ts";

export interface StandbyOptions {
  groupId: string;
  /** This member's name as the assignor orders members (group instance id, else client id). */
  name: string;
  replicas: number;
  stateTopic: string;
  /** The identity of a stage's store for one partition. */
  identityOf(stage: CompiledStage, partition: number): StoreIdentity;
  /** How often the standby stores read their changelog's tail. */
  intervalMs: number;
  /** Exactly-once: the changelog is written in transactions, so no group is ever cut (changelog-groups.ts). */
  transactional?: boolean;
  log: Logger;
  /** A store that cannot be written (STATE_STORE_FAILED): the session fails with it. */
  onFailure?: (error: FvError) => void;
}

/** A standby copy as the build record shows it. */
export interface StandbyPartition {
  topic: string;
  partition: number;
  stage: number;
  /** Changelog offset the copy covers. */
  offset: number;
  /** Changelog records it was behind at its last read. */
  lag: number;
}

interface Standby {
  stage: CompiledStage;
  store: LocalStateStore;
  lag: number;
}

/** A group key's JSON text, as operators end their state keys with it (src/ops/group-key.ts). */
function groupText(group: readonly unknown[]): string {
  return group.length === 0 ? "" : group.length === 1 ? JSON.stringify(group[0] ?? null) : JSON.stringify(group);
}

/** How often the group's members are looked up again (an assignment of others changes ours too). */
const REFRESH_MS = 3000;

export class StandbyTasks {
  readonly #stages: readonly CompiledStage[];
  readonly #admin: Admin;
  readonly #stores: LocalStateStores;
  readonly #options: StandbyOptions;
  readonly #standbys = new PairMap<number, number, Standby>();
  /** Partition numbers this member owns (never a standby here). */
  #owned = new Set<number>();
  #timer: ReturnType<typeof setInterval> | undefined;
  #running: Promise<void> | undefined;
  #refreshedAt = 0;
  #closed = false;
  /** A failure to read or write, reported once until it clears. */
  #warned = false;

  constructor(stages: readonly CompiledStage[], admin: Admin, stores: LocalStateStores, options: StandbyOptions) {
    this.#stages = stages.filter((s) => s.operator);
    this.#admin = admin;
    this.#stores = stores;
    this.#options = options;
  }

  start(): void {
    if (this.#timer || this.#stages.length === 0) return;
    this.#timer = setInterval(() => void this.tick(), this.#options.intervalMs);
    (this.#timer as { unref?: () => void }).unref?.();
  }

  /** The assignment changed: look the group up again at the next tick. */
  assigned(owned: Iterable<number>): void {
    this.#owned = new Set(owned);
    this.#refreshedAt = 0;
    // Owned now: the copy is no longer a standby (the restore promotes it).
    for (const [stage, partition] of this.#standbys.entries()) if (this.#owned.has(partition)) void this.release(stage, partition);
  }

  /** Closes the standby copy of (stage, partition), before the partition's restore promotes it. */
  async release(stage: number, partition: number): Promise<void> {
    await this.#running?.catch(() => {});
    const standby = this.#standbys.get(stage, partition);
    if (!standby) return;
    this.#standbys.delete(stage, partition);
    await standby.store.close();
  }

  /**
   * Queryable state from the standby copies of stage `stageIndex`: the entries of one group key
   * (each operator's state keys end with the key's JSON text), restored into a fresh operator and
   * read. Committed state, as far as the copy has read the changelog (`lag` records behind).
   */
  readState(stageIndex: number, group: readonly unknown[]): StateRead[] {
    const out: StateRead[] = [];
    for (const [stage, partition, standby] of this.#standbys.entries()) {
      const operator = standby.stage.operator;
      if (stage !== stageIndex || !operator || !standby.store.isOpen) continue;
      const suffix = `:${groupText(group)}`;
      const entries = [...standby.store.entries()].filter((e) => e.key === "meta" || e.key.endsWith(suffix));
      if (entries.length === 0) continue;
      const op = operator.compiled.create();
      if (!op.read) continue;
      op.restore(entries, { unique: true });
      const rows = op.read(group);
      if (rows.length > 0) out.push({ partition, rows, position: null, stale: true, standby: true, lag: standby.lag });
    }
    return out;
  }

  list(): StandbyPartition[] {
    return this.#standbys.entries().map(([, partition, s]) => ({
      topic: this.#options.stateTopic,
      partition,
      stage: s.stage.index + 1,
      offset: Number(s.store.covered ?? 0n),
      lag: s.lag,
    })).sort((a, b) => a.partition - b.partition || a.stage - b.stage);
  }

  async close(): Promise<void> {
    this.#closed = true;
    if (this.#timer) clearInterval(this.#timer);
    await this.#running?.catch(() => {});
    await Promise.all(this.#standbys.values().map((s) => s.store.close()));
    this.#standbys.clear();
  }

  /** One round (the timer's): look the group up when due, then read each copy's changelog tail. Never rejects. */
  tick(): Promise<void> {
    if (this.#running || this.#closed) return this.#running ?? Promise.resolve();
    this.#running = this.#run().catch((error) => {
      // Reported to the session, not rethrown: nothing awaits a tick started by the timer.
      if (error instanceof FvError && error.code === "STATE_STORE_FAILED") {
        if (this.#options.onFailure) this.#options.onFailure(error);
        else this.#options.log("error", `standby replicas: ${error.message}`);
        return;
      }
      if (!this.#warned) this.#options.log("warn", `standby replicas: ${(error as Error).message} (trying again)`);
      this.#warned = true;
    }).finally(() => (this.#running = undefined));
    return this.#running;
  }

  async #run(): Promise<void> {
    if (Date.now() - this.#refreshedAt >= REFRESH_MS) await this.#refresh();
    const partitions = new Set(this.#standbys.entries().map(([, partition]) => partition));
    for (const partition of partitions) {
      if (this.#closed) return;
      await this.#catchUp(partition);
    }
    this.#warned = false;
  }

  /** Opens the copies this member should keep and closes the others. */
  async #refresh(): Promise<void> {
    const members = await this.#admin.groupMembers?.(this.#options.groupId);
    // The group is rebalancing (or the client cannot tell): keep what is kept, look again soon.
    if (!members) return;
    this.#refreshedAt = Date.now();
    const me = members.find((m) => m.name === this.#options.name);
    if (me) this.#owned = new Set(me.partitions);
    const wanted = new Set(standbyPartitions(members, this.#options.name, this.#options.replicas).filter((p) => !this.#owned.has(p)));
    for (const [stage, partition, standby] of this.#standbys.entries()) {
      if (wanted.has(partition)) continue;
      this.#standbys.delete(stage, partition);
      await standby.store.close();
    }
    for (const partition of wanted) {
      for (const stage of this.#stages) {
        if (this.#standbys.has(stage.index, partition)) continue;
        const store = await this.#stores.open(this.#options.identityOf(stage, partition), "standby");
        if (!store) return;
        this.#standbys.set(stage.index, partition, { stage, store, lag: 0 });
      }
    }
  }

  /** Reads one changelog partition's tail into its standby copies (one read for all stages). */
  async #catchUp(partition: number): Promise<void> {
    const copies = this.#stages.map((stage) => this.#standbys.get(stage.index, partition)).filter((s): s is Standby => s !== undefined);
    if (copies.length === 0) return;
    const covers = copies.map((c) => c.store.covered);
    const from = covers.some((c) => c === undefined) ? undefined : covers.reduce((a, b) => (a! < b! ? a : b));
    let end: bigint | undefined;
    let topicId: string | undefined;
    const records = await this.#admin.readPartition(this.#options.stateTopic, partition, {
      ...(from === undefined ? {} : { from }),
      onProgress: (p) => void ((end = p.end), (topicId = p.topicId)),
    });
    if (end === undefined) return;
    for (const copy of copies) {
      let { store } = copy;
      const covered = store.covered;
      // Another incarnation of the state topic: start the copy over.
      if ((store.topicId !== undefined && topicId !== undefined && store.topicId !== topicId) || (covered !== undefined && covered > end)) {
        store = copy.store = await this.#stores.rebuild(store, "it was written from another incarnation of the state topic");
        this.#refreshedAt = 0;
        continue;
      }
      copy.lag = Number(end - (covered ?? 0n));
      if (covered !== undefined && covered >= end) continue;
      const { changes, covers } = changesOf(copy.stage, records, covered ?? 0n, end, offsetsOf(store), this.#options.transactional);
      if (!(await store.write(changes, covers, topicId))) {
        // Taken over (the partition became active here meanwhile): no longer a standby.
        if (this.#standbys.get(copy.stage.index, partition) === copy) this.#standbys.delete(copy.stage.index, partition);
        continue;
      }
      // Caught up with the changelog's end as this read found it, but a group still being written.
      // (The lag was the one before the read: while the owner kept writing, a copy that caught up
      // every round still read as behind, and the standby test waited 30 s for a lag of 0 on a
      // busy machine.)
      copy.lag = Number(end - covers);
    }
  }
}

/** The copy's offsets value (undefined when it has none, or it does not decode: then the read decides). */
function offsetsOf(store: LocalStateStore): unknown {
  try {
    return store.get(OFFSETS_KEY);
  } catch {
    return undefined;
  }
}

/**
 * One stage's changes among changelog records at or after `from`, the last version of each key,
 * from its complete groups only; and how far the copy then covers the changelog: up to the
 * stage's group still being written (or cut short), read again next time, else `end`.
 */
function changesOf(stage: CompiledStage, records: readonly InboundRecord[], from: bigint, end: bigint, before: unknown, transactional = false): { changes: StoreChange[]; covers: bigint } {
  const prefix = `${stage.index}/`;
  const decoder = new TextDecoder();
  const latest = new Map<string, string | null>();
  const mine = records.filter((record) => record.offset >= from);
  const { complete, cut } = stageGroups(mine, prefix, before, transactional);
  for (const record of mine.slice(0, complete)) {
    if (!record.key) continue;
    const key = decoder.decode(record.key);
    if (!key.startsWith(prefix)) continue;
    const stateKey = key.slice(prefix.length);
    // Later versions win: the map keeps insertion order, so move the key to the end.
    latest.delete(stateKey);
    latest.set(stateKey, record.value === null ? null : decoder.decode(record.value));
  }
  return { changes: [...latest].map(([key, value]) => ({ key, value })), covers: cut.length > 0 ? cut[0]!.offset : end };
}
