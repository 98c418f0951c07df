import type { CompiledStage } from "../topology/compile-topology.ts";
import { FvError } from "../errors.ts";
import type { Row } from "../expr/index.ts";
import { type StateRead, type StateWatches, watchKeyOf } from "./state-reads.ts";
import type { Admin, InboundRecord, OutboundRecord, TopicPartition } from "../kafka/port.ts";
import { PairMap, PartitionMap } from "../kafka/topic-partition.ts";
import { type CacheStats, eventTimeOf, META_KEY, NO_OUTPUT, type Operator, RawState, type StateEntry, type StateSource } from "../ops/index.ts";
import { delay } from "../async.ts";
import type { Logger } from "../logger.ts";
import type { Written } from "../kafka/port.ts";
import type { LocalStateStore, LocalStateStores, StoreChange, StoreIdentity } from "../state/local-store.ts";
import { HeardWatermarks, type HopSource } from "./repartition.ts";
import { keyText } from "./record-codec.ts";
import { coveredOf, OFFSETS_KEY, offsetsValue, stageGroups, TIME_KEY } from "./changelog-groups.ts";

/** The state of one stateful stage for one input partition number (a join's inputs are co-partitioned). */
export interface Task {
  stage: CompiledStage;
  partition: number;
  op: Operator;
  /** Next input offset per topic (or per upstream "topic:partition" through a hop) already folded into the state. */
  covered: Map<string, bigint>;
  /** Whether `covered` (or the event times) moved since the last changelog. */
  offsetsDirty: boolean;
  /** Highest event time folded in, per input topic: checkpointed, so a restored task knows how far its partition got. */
  eventTimes: Map<string, number>;
  /** Its local state store (STREAM_STATE_DIR), when on. */
  store?: LocalStateStore;
  /** Keys a group cut short wrote, with their restored values: the next changelog writes them first. */
  repairs?: StoreChange[];
  /** The operator's state bytes when last walked (stateSize), and when to walk again: see STATE_BYTES_MS. */
  bytes?: { value: number; next: number };
  /**
   * The store written behind the restore (`DecodedState.writeBehind`): the last write queued, which
   * the next waits for. The restore's own write waits for the restores under way, so the store's
   * writes keep their order while the first of them is held back.
   */
  writes?: Promise<boolean>;
}

/** One partition's restore under way, for /status and the log. */
export interface RestoreProgress {
  stage: number;
  partition: number;
  /** Changelog records read so far (offsets past the start: the tail after the local store, or all). */
  read: number;
  /** Changelog records to read in all (offsets between the start and the end). */
  total: number;
  /** Records of the local store loaded before the changelog's tail. */
  fromStore: number;
  startedAt: number;
  /** Records per second so far. */
  rate: number;
  /** Seconds left at that rate; null before there is a rate. */
  etaSeconds: number | null;
}

/** How long a task let go of in a rebalance still answers reads (marked stale). */
const RETIRED_READS_MS = 30_000;

/** How long a store written behind its restore waits for the other restores under way, at most. */
const WRITE_BEHIND_MAX_WAIT_MS = 5_000;
/**
 * A restore into an empty store is written behind it up to this many caches
 * (STREAM_STATE_CACHE_KEYS) of entities when the operator holds restored values as bytes
 * (`holdsUndecoded`); larger states are written into the store before the task starts.
 */
const WRITE_BEHIND_CACHES = 10;

/** A long restore logs its progress this often. */
const RESTORE_LOG_MS = 5000;
/**
 * How old a task's state bytes may be, for the build record and /metrics: stateSize() walks every
 * live key for them, and walking 300k keys at each checkpoint (and each record) took 13% of a
 * restarted run's samples. At least this long, and 50 times the last walk (300k keys took about
 * 100 ms: every 5 s), so the walks cost at most 2% of the loop's time. The key count (stateKeys)
 * is always current.
 */
const STATE_BYTES_MS = 2000;
const STATE_BYTES_WALKS = 50;

export interface OperatorTaskOptions {
  /** The compacted state topic, `fv-state-<name>`; changelog of input partition p goes to its partition p. */
  stateTopic: string;
  /** A partition without input for this long stops holding the watermark back. */
  idlePartitionMs: number;
  /** Most live state keys one task may hold. */
  maxStateKeys: number;
  /**
   * With a local store: entities a task keeps in memory; the rest stays in the store and is read
   * when a row needs it (operators that support it, see Operator.spill). 0 or absent: all in memory.
   */
  cacheKeys?: number;
  /**
   * The group's stable committed offsets of these input topics at one partition (no
   * transaction pending for them). A restore waits for them before it reads the changelog, and
   * checks that the state it read covers them.
   */
  committedOffsets?: (topics: string[], partition: number) => Promise<Array<{ topic: string; offset: bigint }>>;
  /** The local state stores; undefined: state lives only in memory and the changelog. */
  stores?: LocalStateStores;
  /** The pipeline's name (what a local store belongs to). */
  pipeline?: string;
  /** Before a task's store opens: its standby copy, if any, is closed (it may be promoted). */
  beforeOpen?: (stage: number, partition: number) => Promise<void>;
  /** Exactly-once: the changelog is written in transactions, so no group is ever cut (changelog-groups.ts). */
  transactional?: boolean;
  log?: Logger;
}

/**
 * A restore that finds its state behind the committed input offsets reads the changelog again,
 * this often and at most this many times: the previous owner's transaction commits its changelog
 * and its offsets together, but the commit markers reach the partitions one by one.
 */
const RESTORE_RETRY_MS = 200;
const RESTORE_ATTEMPTS = 50;

export interface TaskCounters {
  late: number;
  /** Changelog records read by restores. */
  restoredRecords: number;
  /** State entries restores took from the local store instead. */
  restoredFromStore: number;
  restoreMs: number;
  stateKeys: number;
  stateBytes: number;
}

/** Rows a stage's timers fired, and the input partitions (of `topics`) whose state fired them. */
/** Rows one task's timers fired (its watermark moved). */
export interface Fired {
  stage: CompiledStage;
  rows: Row[];
  topics: string[];
  /** The task's input partition. */
  partition: number;
}

/** What a task's changelog holds: its entries, the input offsets it covers, its event-time progress. */
interface DecodedState {
  entries: StateEntry[];
  covered: Map<string, bigint>;
  eventTimes: Map<string, number>;
  heard: Record<string, number | null>;
  /** The last version of each key read from the changelog (for the local store). */
  changes: StoreChange[];
  /** Entries taken from the local store. */
  fromStore: number;
  /** The store's entries were left where they are (a spilling restore): only bookkeeping was read. */
  lazy: boolean;
  /**
   * Restored into memory though the operator may spill: the store was empty and the state fits
   * the cache (an operator that holds restored values as bytes: WRITE_BEHIND_CACHES caches). The
   * store is written behind the restore, and the operator spills once it lands.
   */
  writeBehind: boolean;
  /** The keys of a group cut short (not applied), with their restored values: written again first (changelog-groups.ts). */
  repairs: StoreChange[];
  /** Where the local store may cover the changelog to after this read: never past a group cut short. */
  storeCovers: bigint | undefined;
}

/** Live state of one input partition's tasks: keys and heap bytes, the local store's keys and size, and the cache of spilling operators. */
export interface StateSize {
  keys: number;
  bytes: number;
  store?: { keys: number; bytesOnDisk: number };
  cache?: CacheStats;
}

/** The bytes, copied out of whatever buffer they are a view of (Uint8Array's slice copies; a Buffer's is a view). */
const copyOf = (bytes: Uint8Array): Uint8Array => Uint8Array.prototype.slice.call(bytes);

/** A local store as a spilling operator's source: its `keys` count the operator's entities, not the bookkeeping. */
function entitySource(store: LocalStateStore): StateSource {
  const source = store.source();
  return {
    get: source.get,
    prefixed: source.prefixed,
    firstKeyFrom: source.firstKeyFrom,
    get keys() {
      let keys = source.keys;
      for (const key of [TIME_KEY, OFFSETS_KEY, META_KEY]) if (source.get(key) !== undefined) keys--;
      return keys;
    },
  };
}

/** A local store's entities (its entries but the task's bookkeeping keys), for an operator that keeps all state in memory. */
function* storedEntities(store: LocalStateStore): Iterable<StateEntry> {
  for (const entry of store.entries()) if (entry.key !== OFFSETS_KEY && entry.key !== TIME_KEY) yield entry;
}

/** A local store whose content does not decode: it is rebuilt from the changelog. */
class StoreUnreadable extends Error {}

/** A digest of a stateful stage's definition: a store written for another definition is foreign. */
function fingerprintOf(stage: CompiledStage): string {
  // FNV-1a (32 bits), twice with different seeds: a digest to tell definitions apart, not a secret.
  const text = JSON.stringify(stage.def.steps[stage.operator!.step]);
  const fnv = (seed: number) => {
    let h = seed;
    for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193) >>> 0;
    return h.toString(16).padStart(8, "0");
  };
  return fnv(0x811c9dc5) + fnv(0x050c5d1f);
}

/**
 * The stateful operators of one consumer loop: one instance per (stage, partition), restored from
 * the state topic before its first row, fed rows and watermarks, and drained into changelog
 * records at each checkpoint. Pure bookkeeping around pure operators; the loop does the I/O.
 */
export class OperatorTasks {
  readonly #stages: readonly CompiledStage[];
  readonly #options: OperatorTaskOptions;
  readonly #admin: Admin;
  /** Restored tasks by (stage index, partition). */
  readonly #tasks = new PairMap<number, number, Task>();
  /** Partition numbers owned since the last assignment; undefined before the first one. */
  #ownedPartitions: Set<number> | undefined;
  /** Max event time and when it was last seen, per stage index and input partition. */
  readonly #eventTimes = new Map<number, PartitionMap<{ max: number; seenAt: number }>>();
  /** When each input partition was first seen owned, so an empty one stops holding back in time. */
  readonly #ownedSince = new PartitionMap<number>();
  /** The loop's counters: late rows, restore figures and live state size are kept there. */
  readonly counters: TaskCounters;
  /** Stages fed through a repartition topic: what each upstream partition announced. */
  readonly #heard = new HeardWatermarks();

  constructor(stages: readonly CompiledStage[], admin: Admin, options: OperatorTaskOptions, counters: TaskCounters) {
    this.#stages = stages.filter((s) => s.operator);
    this.#admin = admin;
    this.#options = options;
    this.counters = counters;
  }

  get active(): boolean {
    return this.#stages.length > 0;
  }

  /** Restores in flight, by (stage index, partition): a second caller waits for the same one. */
  readonly #loading = new PairMap<number, number, Promise<Task>>();
  /**
   * Restores under way, and since when one has been: `counters.restoreMs` counts the time any
   * restore ran (tasks restore in parallel, so their own times would add up to more than that).
   */
  #restoring = 0;
  /** Waiting for no restore to be under way (a store written behind its restore). */
  #restoresDone: Array<() => void> = [];
  #restoringSince = 0;
  /**
   * Per partition, how many times it was released (revoked or no longer owned). A restore begun
   * before a release is not kept: another member may have moved the partition's state on since it
   * read the changelog, and the next owner, or this one when it gets the partition back, reads it again.
   */
  readonly #releases = new Map<number, number>();

  /** Partitions whose state is being restored now (the process is not ready meanwhile). */
  restoringPartitions(): Set<number> {
    return new Set(this.#loading.entries().map(([, partition]) => partition));
  }

  /** Starts restoring the tasks of newly assigned partitions at once, before their first row. */
  prefetch(assigned: TopicPartition[]): void {
    for (const stage of this.#stages) {
      const topics = this.#stageTopics(stage);
      for (const tp of assigned) if (topics.has(tp.topic)) void this.task(stage, tp.partition).catch(() => {});
    }
  }

  /** Whether the task of (stage, partition) is restored and ready. */
  has(stage: CompiledStage, partition: number): boolean {
    return this.#tasks.has(stage.index, partition);
  }

  /** The task of (stage, partition) when it is restored and ready (the common case: no await per row). */
  ready(stage: CompiledStage, partition: number): Task | undefined {
    return this.#tasks.get(stage.index, partition);
  }

  /** Resolves once no restore is under way, or after WRITE_BEHIND_MAX_WAIT_MS. */
  #restoresOver(): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(done, WRITE_BEHIND_MAX_WAIT_MS);
      (timer as { unref?: () => void }).unref?.();
      this.#restoresDone.push(done);
    });
  }

  /** The task of (stage, partition), restored from the state topic on first use. */
  task(stage: CompiledStage, partition: number): Promise<Task> {
    const existing = this.#tasks.get(stage.index, partition);
    if (existing) return Promise.resolve(existing);
    let loading = this.#loading.get(stage.index, partition);
    if (!loading) {
      if (this.#restoring++ === 0) this.#restoringSince = Date.now();
      const started = this.#load(stage, partition).finally(() => {
        if (--this.#restoring === 0) {
          this.counters.restoreMs += Date.now() - this.#restoringSince;
          for (const wake of this.#restoresDone.splice(0)) wake();
        }
        if (this.#loading.get(stage.index, partition) === started) this.#loading.delete(stage.index, partition);
      });
      this.#loading.set(stage.index, partition, (loading = started));
    }
    return loading;
  }

  async #load(stage: CompiledStage, partition: number): Promise<Task> {
    const releases = this.#releases.get(partition) ?? 0;
    const topics = [...this.#stageTopics(stage)];
    let store = await this.#openStore(stage, partition);
    try {
      for (let attempt = 1; ; attempt++) {
        // 1. The input's committed offsets, once stable: the previous owner's transaction, which
        //    wrote this partition's changelog and offsets together, has ended.
        let committed: Array<{ topic: string; offset: bigint }>;
        try {
          committed = this.#options.committedOffsets ? await this.#options.committedOffsets(topics, partition) : [];
        } catch (error) {
          // Not known yet (a pending transaction past the client's own retries, a coordinator
          // moving): never take that for "nothing committed"; read again, as when behind.
          if (!(error instanceof FvError) || error.code !== "KAFKA_RETRYABLE" || attempt >= RESTORE_ATTEMPTS) throw error;
          await delay(RESTORE_RETRY_MS);
          continue;
        }
        // 2. The changelog, read_committed, up to its end: all of it, or only the tail after what
        //    the local store covers.
        const from = store?.covered;
        const progress = this.#startProgress(stage, partition, store);
        let logEnd: bigint | undefined;
        let topicId: string | undefined;
        const records = await this.#admin.readPartition(this.#options.stateTopic, partition, {
          ...(from === undefined ? {} : { from }),
          onProgress: (p) => {
            logEnd = p.logEnd;
            topicId = p.topicId;
            this.#progressed(progress, p.position, p.end, p.start);
          },
        });
        // A store of another incarnation of the state topic (deleted and created again, a new
        // broker's): it covers offsets of a log that is gone. Past the log's end, not only past the
        // stable end: a transaction left open (a skipped marker) holds that back, while this
        // store covers this member's own committed transactions after it.
        const foreign = store && store.topicId !== undefined && topicId !== undefined && store.topicId !== topicId
          ? `it was written from another ${this.#options.stateTopic} (topic id ${store.topicId}, now ${topicId}: deleted and created again?)`
          : store && from !== undefined && logEnd !== undefined && from > logEnd
          ? `it covers ${this.#options.stateTopic}[${partition}] up to offset ${from}, past the topic's end ${logEnd} (was the state topic deleted and created again?)`
          : undefined;
        if (foreign) {
          store = await this.#options.stores!.rebuild(store!, foreign);
          continue;
        }
        let read: DecodedState;
        try {
          read = this.#decode(stage, partition, records, store, (this.#options.cacheKeys ?? 0) > 0);
        } catch (error) {
          if (!(error instanceof StoreUnreadable) || !store) throw error;
          store = await this.#options.stores!.rebuild(store, error.message);
          continue;
        }
        // 3. The state must cover what the group committed: each checkpoint records the next input
        //    offset of every partition it committed. Behind means the changelog's commit marker had
        //    not arrived yet; starting from the committed offset would lose the rows in between.
        const behind = committed.filter((c) => c.offset >= 0n && read.covered.has(c.topic) && read.covered.get(c.topic)! < c.offset);
        if (behind.length === 0) {
          const op = await this.#restored(stage, partition, read, records, store, topicId);
          return this.#install(stage, partition, op, read, records, releases, store, topicId);
        }
        const what = behind.map((c) => `${c.topic}[${partition}] state at ${read.covered.get(c.topic)}, committed ${c.offset}`).join(", ");
        if (attempt >= RESTORE_ATTEMPTS) {
          throw new FvError("KAFKA_RETRYABLE", `the state of stage ${stage.index + 1} does not cover the committed input offsets after ${attempt} reads (${what}): starting over`);
        }
        await delay(RESTORE_RETRY_MS);
      }
    } catch (error) {
      this.#closeLater(store);
      throw error;
    } finally {
      this.#progress.delete(stage.index, partition);
    }
  }

  /**
   * The local store of a task, opened and taken over (its standby copy first promoted when it
   * goes further); undefined when stores are off.
   */
  async #openStore(stage: CompiledStage, partition: number): Promise<LocalStateStore | undefined> {
    const stores = this.#options.stores;
    if (!stores) return undefined;
    const identity = this.storeIdentity(stage, partition);
    await this.#options.beforeOpen?.(stage.index, partition);
    stores.promote(identity);
    return await stores.open(identity);
  }

  /** What the local store of (stage, partition) belongs to. */
  storeIdentity(stage: CompiledStage, partition: number): StoreIdentity {
    return {
      pipeline: this.#options.pipeline ?? "",
      stateTopic: this.#options.stateTopic,
      stage: stage.index,
      operator: stage.operator!.op,
      fingerprint: fingerprintOf(stage),
      partition,
    };
  }

  /** Restores under way, by (stage index, partition). */
  readonly #progress = new PairMap<number, number, RestoreProgress & { loggedAt: number }>();

  #startProgress(stage: CompiledStage, partition: number, store: LocalStateStore | undefined): RestoreProgress & { loggedAt: number } {
    const now = Date.now();
    const progress = { stage: stage.index, partition, read: 0, total: 0, fromStore: store?.keys ?? 0, startedAt: now, rate: 0, etaSeconds: null, loggedAt: now };
    this.#progress.set(stage.index, partition, progress);
    return progress;
  }

  #progressed(progress: RestoreProgress & { loggedAt: number }, position: bigint, end: bigint, start: bigint): void {
    const now = Date.now();
    progress.total = Math.max(0, Number(end - start));
    progress.read = Math.min(progress.total, Math.max(0, Number(position - start)));
    const seconds = (now - progress.startedAt) / 1000;
    progress.rate = seconds > 0 ? Math.round(progress.read / seconds) : 0;
    progress.etaSeconds = progress.rate > 0 ? Math.ceil((progress.total - progress.read) / progress.rate) : null;
    if (now - progress.loggedAt >= RESTORE_LOG_MS && progress.read < progress.total) {
      progress.loggedAt = now;
      const percent = progress.total > 0 ? Math.floor((progress.read * 100) / progress.total) : 100;
      this.#options.log?.("info", `restoring stage ${progress.stage + 1} partition ${progress.partition}: ${progress.read} of ${progress.total} changelog records (${percent}%), ${progress.rate}/s, about ${progress.etaSeconds ?? "?"} s left`);
    }
  }

  /** The restores under way: how far each got, its rate and ETA (for /status and the dashboard). */
  restoreProgress(): RestoreProgress[] {
    return this.#progress.values().map(({ loggedAt: _, ...progress }) => progress);
  }

  /**
   * Decodes one stage's entries, covered offsets and event-time progress: the local store's (when
   * given), with the changelog records read after what it covers on top.
   */
  #decode(stage: CompiledStage, partition: number, records: InboundRecord[], store?: LocalStateStore, lazy = false): DecodedState {
    const prefix = `${stage.index}/`;
    const entries: StateEntry[] = [];
    const covered = new Map<string, bigint>();
    const eventTimes = new Map<string, number>();
    let heard: Record<string, number | null> = {};
    const decoder = new TextDecoder();
    const apply = (stateKey: string, value: unknown) => {
      if (stateKey === TIME_KEY) {
        const time = (value ?? {}) as { eventTimes?: Record<string, number>; heard?: Record<string, number | null> };
        eventTimes.clear();
        for (const [topic, t] of Object.entries(time.eventTimes ?? {})) eventTimes.set(topic, t);
        heard = time.heard ?? {};
      } else if (stateKey === OFFSETS_KEY) {
        covered.clear();
        for (const [topic, offset] of coveredOf(value)) covered.set(topic, offset);
      } else {
        entries.push({ key: stateKey, value });
      }
    };
    // A changelog not yet compacted holds a version of a key for every checkpoint that changed
    // it, and only the last counts: the records are read from the end, the last version of each
    // key kept, and only those are parsed, in log order.
    // Only complete groups are applied: the stage's records after its last offsets record are a
    // group a kill cut short (changelog-groups.ts).
    let before: unknown;
    try {
      before = store?.get(OFFSETS_KEY);
    } catch (error) {
      throw new StoreUnreadable(`a stored value does not decode (${(error as Error).message})`);
    }
    const { complete, cut } = stageGroups(records, prefix, before, this.#options.transactional);
    const latest: Array<{ stateKey: string; record: InboundRecord }> = [];
    const seen = new Set<string>();
    for (let i = complete - 1; i >= 0; i--) {
      const record = records[i]!;
      const key = record.key ? decoder.decode(record.key) : "";
      if (!key.startsWith(prefix)) continue;
      // One lookup: the key is new when adding it grows the set.
      const size = seen.size;
      seen.add(key);
      if (seen.size === size) continue;
      latest.push({ stateKey: key.slice(prefix.length), record });
    }
    latest.reverse();
    // An empty store (a new machine, a store rebuilt) whose state fits the cache, or ten caches
    // when its operator holds restored values as bytes until first use: restored into memory as
    // with no store, and the store written behind it (#install), not before the task starts.
    // (Writing 75k keys into LMDB took 110-200 ms of this thread: a new machine's restore ran at
    // half the rate of one with the store off.) The changelog's records are all in memory while
    // they are read either way; an operator that holds bytes lets go of those it never used once
    // the write lands. (The bound: until then, every task restoring at the same time holds its
    // state at once.)
    let entities = 0;
    for (const { stateKey } of latest) if (stateKey !== TIME_KEY && stateKey !== OFFSETS_KEY && stateKey !== META_KEY) entities++;
    const cache = this.#options.cacheKeys ?? 0;
    const writeBehind = lazy && store !== undefined && store.keys === 0 &&
      entities <= (stage.operator!.compiled.holdsUndecoded ? WRITE_BEHIND_CACHES * cache : cache);
    if (writeBehind) lazy = false;
    // The local store first: what the changelog's tail changed again replaces it.
    let fromStore = 0;
    if (store && lazy) {
      // Spilling: the store's entries stay there (the tail is written into it before the operator
      // starts); only the task's bookkeeping is read, and the operator's meta.
      try {
        fromStore = store.keys;
        for (const key of [TIME_KEY, OFFSETS_KEY, META_KEY]) {
          const value = store.get(key);
          if (value === undefined) continue;
          fromStore--;
          if (!seen.has(prefix + key)) apply(key, value);
        }
        for (const { stateKey } of latest) if (stateKey !== TIME_KEY && stateKey !== OFFSETS_KEY && stateKey !== META_KEY && store.get(stateKey) !== undefined) fromStore--;
      } catch (error) {
        throw new StoreUnreadable(`a stored value does not decode (${(error as Error).message})`);
      }
    } else if (store) {
      try {
        for (const { key, value } of store.entries()) {
          if (seen.has(prefix + key)) continue;
          apply(key, value);
          fromStore++;
        }
      } catch (error) {
        throw new StoreUnreadable(`a stored value does not decode (${(error as Error).message})`);
      }
    }
    const changes: StoreChange[] = [];
    const where = `${this.#options.stateTopic}[${partition}]`;
    for (const { stateKey, record } of latest) {
      let value: unknown;
      let text: string | null = null;
      const entity = stateKey !== TIME_KEY && stateKey !== OFFSETS_KEY && stateKey !== META_KEY;
      // An entity's value goes to the operator unparsed: it parses it during op.restore, or (a
      // windowed aggregate) when the entity is first needed. Without a store, not even decoded;
      // a copy, as a view would keep its whole fetch response (up to 4 MB) alive until then.
      if (entity && !store && record.value !== null) {
        apply(stateKey, new RawState(copyOf(record.value), where, record.offset));
        continue;
      }
      try {
        text = record.value === null ? null : decoder.decode(record.value);
        // Spilling: an entity's value goes into the store as text (parsed there), not into memory.
        if (lazy && store && entity) {
          changes.push({ key: stateKey, value: text });
          continue;
        }
        if (entity && text !== null) {
          changes.push({ key: stateKey, value: text });
          apply(stateKey, new RawState(text, where, record.offset));
          continue;
        }
        value = text === null ? null : JSON.parse(text);
      } catch (error) {
        throw new FvError("STATE_CORRUPTED", `state record ${this.#options.stateTopic}[${partition}]@${record.offset} is not JSON`, { cause: error });
      }
      if (store) changes.push({ key: stateKey, value: text });
      apply(stateKey, value);
    }
    const repairs = this.#repairsOf(cut, prefix, latest, store);
    if (cut.length > 0) {
      this.#options.log?.(
        "warn",
        `stage ${stage.index + 1} partition ${partition}: the changelog ends with a checkpoint cut short (${cut.length} record(s) of ${this.#options.stateTopic}[${partition}] from offset ${cut[0]!.offset}, after the last complete one: a process stopped while writing it); not applied, and its ${repairs.length} key(s) are written again with the restored values`,
      );
    }
    const storeCovers = cut.length > 0 ? cut[0]!.offset : records.length > 0 ? records[records.length - 1]!.offset + 1n : store?.covered;
    return { entries, covered, eventTimes, heard, changes, fromStore, lazy: lazy && store !== undefined, writeBehind, repairs, storeCovers };
  }

  /** The keys of a group cut short, each with its value before that group (from the complete groups, else the local store), or a tombstone. */
  #repairsOf(cut: readonly InboundRecord[], prefix: string, latest: ReadonlyArray<{ stateKey: string; record: InboundRecord }>, store: LocalStateStore | undefined): StoreChange[] {
    if (cut.length === 0) return [];
    const decoder = new TextDecoder();
    const before = new Map(latest.map(({ stateKey, record }) => [stateKey, record.value === null ? null : decoder.decode(record.value)]));
    const repairs = new Map<string, string | null>();
    for (const record of cut) {
      const stateKey = decoder.decode(record.key!).slice(prefix.length);
      if (repairs.has(stateKey)) continue;
      if (before.has(stateKey)) {
        repairs.set(stateKey, before.get(stateKey)!);
        continue;
      }
      let stored: unknown;
      try {
        stored = store?.get(stateKey);
      } catch (error) {
        throw new StoreUnreadable(`a stored value does not decode (${(error as Error).message})`);
      }
      repairs.set(stateKey, stored === undefined ? null : JSON.stringify(stored));
    }
    return [...repairs].map(([key, value]) => ({ key, value }));
  }

  /**
   * The task's operator with its state: restored into memory, or (spilling) reading its state
   * from the local store, into which the changelog's tail is written first.
   */
  async #restored(stage: CompiledStage, partition: number, read: DecodedState, records: InboundRecord[], store: LocalStateStore | undefined, topicId: string | undefined): Promise<Operator> {
    const op = stage.operator!.compiled.create();
    // Each key once: the store's entries and the tail's last versions never overlap (#decode).
    op.restore(read.entries, { unique: true });
    if (!read.lazy || !store) return op;
    if (records.length > 0 || (topicId !== undefined && store.topicId === undefined)) {
      if (!(await store.write(read.changes, read.storeCovers ?? 0n, topicId))) {
        throw new FvError("KAFKA_RETRYABLE", `the local state store ${store.path} was taken over while stage ${stage.index + 1} partition ${partition} restored: starting over`);
      }
    }
    if (op.spill?.(entitySource(store), this.#options.cacheKeys!)) return op;
    // This operator keeps its state in memory: every stored entity (the bookkeeping is read).
    op.restore(storedEntities(store), { unique: true });
    return op;
  }

  #install(stage: CompiledStage, partition: number, op: Operator, read: DecodedState, records: InboundRecord[], releases: number, store: LocalStateStore | undefined, topicId: string | undefined): Task {
    const { covered, eventTimes, heard } = read;
    const task: Task = { stage, partition, op, covered, offsetsDirty: false, eventTimes, ...(store ? { store } : {}), ...(read.repairs.length ? { repairs: read.repairs } : {}) };
    // Event-time progress comes back with the state: a partition without new rows still counts
    // with how far it got (until it goes idle), and a hop partition with what it last heard.
    const now = Date.now();
    for (const [topic, t] of eventTimes) {
      const seen = this.#eventTimesOf(stage).get({ topic, partition });
      if (!seen || seen.max < t) this.#eventTimesOf(stage).set({ topic, partition }, { max: t, seenAt: now });
    }
    for (const [source, watermark] of Object.entries(heard)) if (watermark !== null) this.hearWatermark(stage, partition, source, watermark, false, true);
    // The partition may have moved away while its state was read (and maybe come back, with its
    // state moved on by another member): then the task is never kept.
    const current = (this.#releases.get(partition) ?? 0) === releases;
    if (current && (!this.#ownedPartitions || this.#ownedPartitions.has(partition))) {
      this.#tasks.set(stage.index, partition, task);
      // The tail read goes into the store, which then covers the changelog up to its end (a
      // spilling restore wrote it already).
      if (store && !read.lazy && (read.writeBehind || records.length > 0 || (topicId !== undefined && store.topicId === undefined))) {
        // Written behind (an empty store): once no restore is under way (the parse and the puts
        // take this thread; the other partitions' restores go first), or after WRITE_BEHIND_MAX_WAIT_MS.
        if (read.writeBehind) task.writes = this.#restoresOver().then(() => true);
        const write = this.#storeWrite(task, () => store.write(read.changes, read.storeCovers ?? 0n, topicId));
        this.#track(write);
        // The operator spills from now on, once the store holds what it restored, if it is still
        // this partition's task. (Spilling may decode restored values: one that does not decode
        // fails the stream as a store error would, not as an unhandled rejection.)
        if (read.writeBehind) {
          void write.then((done) => {
            if (!done || this.#tasks.get(stage.index, partition) !== task) return;
            try {
              op.spill?.(entitySource(store), this.#options.cacheKeys!, { resident: true });
            } catch (error) {
              this.onStoreError?.(error instanceof FvError ? error : new FvError("STATE_CORRUPTED", (error as Error).message, { cause: error }));
            }
          }, () => {});
        }
      }
    } else {
      this.#closeLater(store);
    }
    this.counters.restoredRecords += records.length;
    this.counters.restoredFromStore += read.fromStore;
    this.#options.log?.("info", `restored stage ${stage.index + 1} partition ${partition}: ${read.fromStore} entries from the local store, ${records.length} changelog records${records.length ? ` (offsets ${records[0]!.offset}..${records[records.length - 1]!.offset})` : ""}`);
    return task;
  }

  /**
   * Feeds one row (already through the inline steps before the operator). Returns the rows the
   * operator emits now and the late rows it refused; `skipped` when the restored state already
   * covers this record (it was processed before a restart). Throws FvError POISON_ROW for a row
   * without a usable event time.
   */
  process(task: Task, record: InboundRecord, row: Row, input: number, source?: HopSource): { rows: Row[]; late: Row[]; skipped: boolean } {
    // A row read through a repartition hop is tracked by the upstream partition and offset it came
    // from: a replay of the upstream (at-least-once, after a rebalance) then changes no state twice.
    const coverKey = source?.key ?? record.topic;
    const offset = source?.offset ?? record.offset;
    const next = offset + 1n;
    if (offset < (task.covered.get(coverKey) ?? -1n)) return { rows: [], late: [], skipped: true };
    const compiled = task.stage.operator!.compiled;
    const time = compiled.eventTime ? compiled.eventTime(row, input) : eventTimeOf(row, compiled.timeColumn);
    // A tableJoin's table rows are keyed by their message key.
    const out = compiled.tableInput === input && source === undefined ? task.op.process(row, time, input, keyText(record.key)) : task.op.process(row, time, input);
    task.covered.set(coverKey, next);
    if (this.watches?.watches(task.stage.index)) this.#tellWatchers(task, compiled.keyColumns, row);
    task.offsetsDirty = true;
    if ((task.eventTimes.get(record.topic) ?? -Infinity) < time) task.eventTimes.set(record.topic, time);
    const seen = this.#eventTimesOf(task.stage).get(record);
    if (!seen || seen.max < time) this.#eventTimesOf(task.stage).set(record, { max: time, seenAt: Date.now() });
    else seen.seenAt = Date.now();
    this.counters.late += out.late.length;
    return { rows: out.rows, late: out.late, skipped: false };
  }

  /**
   * A record without a value on a tableJoin's table: its key is deleted. Tracked like a row (its
   * offset is covered once applied), but it moves no event time.
   */
  tombstone(task: Task, record: InboundRecord, input: number): { rows: Row[]; skipped: boolean } {
    if (record.offset < (task.covered.get(record.topic) ?? -1n)) return { rows: [], skipped: true };
    const key = keyText(record.key);
    if (key === null) throw new FvError("POISON_ROW", "tableJoin: a table tombstone has no key: nothing to delete", { context: { reason: "null_key" } });
    const out = task.op.tombstone?.(key, input, Number(record.timestamp)) ?? NO_OUTPUT;
    task.covered.set(record.topic, record.offset + 1n);
    task.offsetsDirty = true;
    return { rows: out.rows, skipped: false };
  }

  /** Keys being watched (the loop's, across sessions): each change a row makes goes to their listeners. */
  watches: StateWatches | undefined;

  #tellWatchers(task: Task, keyColumns: readonly string[], row: Row): void {
    const group = keyColumns.map((c) => row[c] ?? null);
    const listeners = this.watches!.listeners(task.stage.index, watchKeyOf(group));
    if (!listeners || !task.op.read) return;
    const read: StateRead = { partition: task.partition, rows: task.op.read(group), position: this.#positionOf(task) };
    for (const listener of listeners) listener(read);
  }

  /**
   * Marks a stage as fed through a repartition topic by these upstream partitions. Its watermark
   * is then the minimum of what each of them announced (`hearWatermark`), per repartition
   * partition, not the event times its own rows carry: rows of every upstream partition meet in
   * each repartition partition, and a fast one must not make a slow one's rows late.
   */
  setUpstream(stage: CompiledStage, upstream: readonly string[]): void {
    this.#heard.setUpstream(stage.index, upstream);
  }

  /** A watermark record read from partition `partition` of a stage's repartition topic. */
  hearWatermark(stage: CompiledStage, partition: number, source: string, watermark: number | null, idle: boolean, restored = false): void {
    this.#heard.hear(stage.index, partition, source, watermark, idle, restored);
  }

  #eventTimesOf(stage: CompiledStage): PartitionMap<{ max: number; seenAt: number }> {
    let map = this.#eventTimes.get(stage.index);
    if (!map) this.#eventTimes.set(stage.index, (map = new PartitionMap()));
    return map;
  }

  /**
   * Moves each stage's watermark: the minimum over its owned input partitions of max event time
   * minus allowed lateness, leaving out partitions idle longer than `idlePartitionMs` (unless
   * `hasBacklog` says records are waiting there), and partitions that never had a record
   * (`isEmpty`: end offset 0) and gave this task none: they have been without rows for as long as
   * they exist. Returns the rows fired per task (stage and partition).
   */
  advance(owned: TopicPartition[], now = Date.now(), hasBacklog: (tp: TopicPartition) => boolean = () => false, isEmpty: (tp: TopicPartition) => boolean = () => false): Fired[] {
    const fired: Fired[] = [];
    for (const tp of owned) if (!this.#ownedSince.has(tp)) this.#ownedSince.set(tp, now);
    for (const stage of this.#stages) {
      if (this.#heard.fedThroughHop(stage.index)) {
        for (const task of this.#tasks.values()) {
          if (task.stage !== stage) continue;
          const watermark = this.#heard.watermark(stage.index, task.partition);
          if (watermark === undefined) continue;
          const out = task.op.advance(watermark - stage.operator!.compiled.allowedLatenessMs);
          if (out.length) fired.push({ stage, rows: out, topics: [...this.#stageTopics(stage)], partition: task.partition });
        }
        continue;
      }
      let watermark = Infinity;
      let any = false;
      /**
       * The least max event time over the owned input partitions seen so far, idle or not. One
       * never seen (an empty partition, or one whose rows were all processed before the event-time
       * checkpoint) has no time to hold back; while it is not idle it holds the watermark anyway.
       */
      let least = Infinity;
      for (const tp of owned) {
        if (!this.#stageTopics(stage).has(tp.topic)) continue;
        const seen = this.#eventTimesOf(stage).get(tp);
        if (seen) least = Math.min(least, seen.max);
        const idleSince = seen?.seenAt ?? this.#ownedSince.get(tp) ?? now;
        // Idle: no rows for a while and nothing left to read. A partition with a backlog is slow, not idle.
        if (now - idleSince > this.#options.idlePartitionMs && !hasBacklog(tp)) continue;
        // An empty partition newly owned held every window of its new owner for the idle time
        // after each rebalance (the fault soak, Node, seed 23: the last windows of a partition that
        // moved with an empty one never fired before the stop).
        if (!seen && isEmpty(tp)) continue;
        if (!seen) {
          watermark = -Infinity;
          continue;
        }
        any = true;
        watermark = Math.min(watermark, seen.max);
      }
      // Every owned partition idle: nothing is on its way here, so the least of how far each got holds.
      if (!any && watermark !== -Infinity && least !== Infinity) watermark = least;
      else if (!any || watermark === -Infinity) continue;
      watermark -= stage.operator!.compiled.allowedLatenessMs;
      for (const task of this.#tasks.values()) {
        if (task.stage !== stage) continue;
        const out = task.op.advance(watermark);
        if (out.length) fired.push({ stage, rows: out, topics: [...this.#stageTopics(stage)], partition: task.partition });
      }
    }
    return fired;
  }

  /** Whether some task has windows due that its last advance left for the next (a spilling operator fires in steps). */
  get firing(): boolean {
    for (const task of this.#tasks.values()) if (task.op.firing?.()) return true;
    return false;
  }

  /** Input topics of each stateful stage, set by the loop (datasets resolve to topics there). */
  readonly #topicsByStage = new Map<number, Set<string>>();
  setStageTopics(stage: CompiledStage, topics: string[]): void {
    this.#topicsByStage.set(stage.index, new Set(topics));
  }
  #stageTopics(stage: CompiledStage): Set<string> {
    return this.#topicsByStage.get(stage.index) ?? new Set();
  }

  /** Changelog records of everything that changed since the last call: dirty keys, tombstones, covered offsets. */
  drainChangelog(): OutboundRecord[] {
    const out: OutboundRecord[] = [];
    const forStores: Array<{ task: Task; changes: StoreChange[]; drains: number }> = [];
    let keys = 0;
    let bytes = 0;
    for (const task of this.#tasks.values()) {
      const prefix = `${task.stage.index}/`;
      const changes: StoreChange[] = [];
      const add = (key: string, value: string | null) => {
        out.push({ topic: this.#options.stateTopic, partition: task.partition, key: prefix + key, value });
        if (task.store) changes.push({ key, value });
      };
      const first = out.length;
      // A group cut short before this task was restored: its keys again, as restored, before anything newer.
      for (const { key, value } of task.repairs ?? []) add(key, value);
      delete task.repairs;
      for (const entry of task.op.drainChanges()) add(entry.key, entry.value === null ? null : JSON.stringify(entry.value));
      if (task.offsetsDirty || this.#heard.dirty(task.stage.index, task.partition)) {
        const heard = this.#heard.take(task.stage.index, task.partition);
        add(TIME_KEY, JSON.stringify({ eventTimes: Object.fromEntries(task.eventTimes), heard }));
      }
      // The offsets end every group (changelog-groups.ts), moved or not.
      if (task.offsetsDirty || out.length > first) {
        add(OFFSETS_KEY, offsetsValue(task.covered));
        task.offsetsDirty = false;
      }
      if (changes.length) forStores.push({ task, changes, drains: task.op.drains ?? 0 });
      // The cap is checked once per checkpoint.
      const live = task.op.stateKeys();
      if (live > this.#options.maxStateKeys) {
        throw new FvError(
          "STATE_LIMIT",
          `stage ${task.stage.index + 1} (${task.stage.operator!.op}) holds ${live} state keys for partition ${task.partition}, over STREAM_STATE_MAX_KEYS=${this.#options.maxStateKeys}: shorten windows or lateness, make groupBy coarser, or raise the cap`,
        );
      }
      keys += live;
      bytes += this.#bytesOf(task);
    }
    this.counters.stateKeys = keys;
    this.counters.stateBytes = bytes;
    if (forStores.length) this.#drained.set(out, forStores);
    return out;
  }

  /** What each drained changelog holds for the local stores, until it is committed (`persist`) or dropped. */
  readonly #drained = new WeakMap<OutboundRecord[], Array<{ task: Task; changes: StoreChange[]; drains: number }>>();

  /**
   * A drained changelog is committed (exactly-once: its transaction; at-least-once: acknowledged):
   * its changes go into the local stores, which then cover the changelog from the first offset
   * `written` there. Only committed state ever reaches a store: after a crash it is at or behind
   * the changelog, never ahead, and the tail read brings it up to date. Not awaited by the loop: a
   * store that cannot write (disk full) fails the stream through `onStoreError`.
   */
  persist(changelog: OutboundRecord[], written: Written | void): void {
    const drained = this.#drained.get(changelog);
    if (!drained) return;
    this.#drained.delete(changelog);
    const firsts = new Map<number, bigint>();
    for (const w of written ?? []) if (w.topic === this.#options.stateTopic) firsts.set(w.partition, w.offset);
    for (const { task, changes, drains } of drained) {
      const write = this.#storeWrite(task, () => task.store!.write(changes, firsts.get(task.partition)));
      this.#track(write);
      // A spilling operator may now let go of what this drain wrote (the store holds it).
      if (task.op.settled) void write.then((done) => done && task.op.settled!(drains), () => {});
    }
  }

  /**
   * A write into the task's store: at once, or, while the store is written behind its restore
   * (Task.writes), after the writes queued before it. A write that failed or was refused there
   * stops the ones behind it: a checkpoint's write on a store without the restored state would
   * make it cover what it does not hold.
   */
  #storeWrite(task: Task, write: () => Promise<boolean>): Promise<boolean> {
    if (!task.writes) return write();
    const next = task.writes.then((ok) => (ok ? write() : false));
    task.writes = next.then((done) => done, () => false);
    return next;
  }

  /** A store write's failure (disk full, read-only) is fatal: it reaches the loop through this. */
  onStoreError: ((error: FvError) => void) | undefined;
  #track(write: Promise<boolean>): void {
    write.catch((error) => this.onStoreError?.(error instanceof FvError ? error : new FvError("STATE_STORE_FAILED", (error as Error).message, { cause: error })));
  }

  /**
   * Queryable state: what this loop's tasks of stage `stageIndex` hold for one group key, one
   * entry per partition that has it, with the input offset its state reflects.
   */
  readState(stageIndex: number, group: readonly unknown[], options: { retired?: boolean } = {}): StateRead[] {
    const out: StateRead[] = [];
    const read = (task: Task, stale: boolean) => {
      if (task.stage.index !== stageIndex || !task.op.read) return;
      const rows = task.op.read(group);
      if (rows.length > 0) out.push({ partition: task.partition, rows, position: this.#positionOf(task), ...(stale ? { stale } : {}) });
    };
    for (const task of this.#tasks.values()) read(task, false);
    if (options.retired && out.length === 0) {
      const now = Date.now();
      for (const { task, until } of this.#retired.values()) {
        if (until <= now) continue;
        try {
          read(task, true);
        } catch {
          // A spilling operator reads its store, which closed when the task was let go of: nothing to give.
        }
      }
    }
    return out;
  }

  /**
   * Tasks let go of in a rebalance, kept for reads only for a while: while their partition moves
   * and its new owner restores it, a read gets their state, marked stale.
   */
  readonly #retired = new PairMap<number, number, { task: Task; until: number }>();

  /** Queryable state: every group key this loop's tasks of stage `stageIndex` hold, with its partition. */
  stateGroups(stageIndex: number): Array<{ partition: number; group: readonly unknown[] }> {
    const out: Array<{ partition: number; group: readonly unknown[] }> = [];
    for (const task of this.#tasks.values()) {
      if (task.stage.index !== stageIndex || !task.op.groups) continue;
      for (const group of task.op.groups()) out.push({ partition: task.partition, group });
    }
    return out;
  }

  /** The partitions of stage `stageIndex` this loop holds state of, each with its position. */
  statePartitions(stageIndex: number): Array<{ partition: number; position: number | null }> {
    return [...this.#tasks.values()].filter((t) => t.stage.index === stageIndex).map((t) => ({ partition: t.partition, position: this.#positionOf(t) }));
  }

  /** The next input offset of the task's partition folded into its state (its first input, or the hop's upstream). */
  #positionOf(task: Task): number | null {
    for (const topic of this.#stageTopics(task.stage)) {
      const covered = task.covered.get(topic);
      if (covered !== undefined) return Number(covered);
    }
    const first = task.covered.values().next();
    return first.done ? null : Number(first.value);
  }

  /** The task's state bytes, walked again when they are old enough (STATE_BYTES_MS). */
  #bytesOf(task: Task): number {
    const now = Date.now();
    if (task.bytes === undefined || now >= task.bytes.next) {
      const value = task.op.stateSize().bytes;
      const took = Date.now() - now;
      task.bytes = { value, next: now + Math.max(STATE_BYTES_MS, STATE_BYTES_WALKS * took) };
    }
    return task.bytes.value;
  }

  /** Live state fed by one partition of one topic, over the stateful stages (for the build record); undefined when none. */
  sizeOf(topic: string, partition: number): StateSize | undefined {
    let size: StateSize | undefined;
    for (const task of this.#tasks.values()) {
      if (task.partition !== partition || !this.#stageTopics(task.stage).has(topic)) continue;
      const s = { keys: task.op.stateKeys(), bytes: this.#bytesOf(task) };
      size = { keys: (size?.keys ?? 0) + s.keys, bytes: (size?.bytes ?? 0) + s.bytes, ...(size?.store ? { store: size.store } : {}), ...(size?.cache ? { cache: size.cache } : {}) };
      if (task.store) size.store = { keys: (size.store?.keys ?? 0) + task.store.keys, bytesOnDisk: (size.store?.bytesOnDisk ?? 0) + task.store.bytesOnDisk };
      const cache = task.op.cacheStats?.();
      if (cache) size.cache = { resident: (size.cache?.resident ?? 0) + cache.resident, hits: (size.cache?.hits ?? 0) + cache.hits, misses: (size.cache?.misses ?? 0) + cache.misses };
    }
    return size;
  }

  /**
   * At each checkpoint, before `drainChangelog`: the next input offset of each partition whose
   * offsets are being committed, recorded in the state of every task it feeds (also when no row
   * reached the operator, e.g. all filtered out). A restore then knows exactly which committed
   * offsets its state covers.
   */
  async noteConsumed(offsets: ReadonlyArray<{ topic: string; partition: number; offset: bigint }>): Promise<void> {
    for (const o of offsets) {
      for (const stage of this.#stages) {
        if (!this.#stageTopics(stage).has(o.topic)) continue;
        // A partition whose rows never reached the operator this session has no task yet; its
        // offsets still must be recorded in its state, or the next restore finds the state behind.
        const task = await this.task(stage, o.partition);
        if (this.#tasks.get(stage.index, o.partition) !== task) {
          throw new FvError("KAFKA_RETRYABLE", `${o.topic}:${o.partition} was revoked while its checkpoint was being taken: starting over`);
        }
        if ((task.covered.get(o.topic) ?? -1n) >= o.offset) continue;
        task.covered.set(o.topic, o.offset);
        task.offsetsDirty = true;
      }
    }
  }

  /**
   * Forgets the tasks of partitions this loop no longer owns (their new owner restores them),
   * and of `revoked` ones even when owned again: another member may have moved their state on.
   */
  release(owned: TopicPartition[], revoked: TopicPartition[] = []): void {
    const partitions = new Set(owned.map((tp) => tp.partition));
    const moved = new Set(revoked.map((tp) => tp.partition));
    const released = new Set([...moved, ...[...this.#tasks.values()].map((t) => t.partition), ...this.restoringPartitions()].filter((p) => !partitions.has(p) || moved.has(p)));
    this.#ownedPartitions = partitions;
    for (const p of released) this.#releases.set(p, (this.#releases.get(p) ?? 0) + 1);
    const now = Date.now();
    for (const [stage, partition, { until }] of this.#retired.entries()) if (until <= now) this.#retired.delete(stage, partition);
    for (const task of this.#tasks.values()) {
      if (!released.has(task.partition)) continue;
      this.#closeLater(task.store, task.writes);
      this.#retired.set(task.stage.index, task.partition, { task, until: now + RETIRED_READS_MS });
    }
    this.#tasks.deleteWhere((_, partition) => released.has(partition));
    this.#loading.deleteWhere((_, partition) => released.has(partition));
    for (const eventTimes of this.#eventTimes.values()) for (const [tp] of eventTimes.entries()) if (!partitions.has(tp.partition)) eventTimes.delete(tp);
    this.#heard.keepOnly(partitions);
  }

  /** Drops every task: the next rows restore them from the last checkpoint (after an abort). */
  clear(): void {
    for (const task of this.#tasks.values()) this.#closeLater(task.store, task.writes);
    // Their state may hold what the abort undid.
    this.#retired.deleteWhere(() => true);
    this.#tasks.clear();
    this.#eventTimes.clear();
    this.#heard.clear();
    this.#ownedSince.clear();
  }

  /** Stores let go of without waiting (released, dropped, a failed restore): close waits for them. */
  readonly #closing = new Set<Promise<void>>();

  /** Closes `store` after `writes`, the writes still held back behind its restore's (Task.writes). */
  #closeLater(store: LocalStateStore | undefined, writes?: Promise<unknown>): void {
    if (!store) return;
    const closing = closeAfter(store, writes);
    this.#closing.add(closing);
    void closing.finally(() => this.#closing.delete(closing));
  }

  /**
   * Closes the local stores (the session ends), after their writes under way, and waits for the
   * ones let go of earlier: the thread may end next, and an LMDB environment still closing when
   * a Worker is torn down crashes the process (SIGSEGV on exit, seen under Bun).
   */
  async close(): Promise<void> {
    // Stores written behind their restore need not wait for restores that no longer matter.
    for (const wake of this.#restoresDone.splice(0)) wake();
    await Promise.all([...this.#tasks.values().map((task) => task.store && closeAfter(task.store, task.writes)), ...this.#closing]);
  }
}

/** Closes `store` once `writes` (those held back behind its restore's, Task.writes) are done. */
const closeAfter = (store: LocalStateStore, writes: Promise<unknown> | undefined): Promise<void> => (writes ? writes.then(() => store.close()) : store.close());

