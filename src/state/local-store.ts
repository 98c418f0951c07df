/**
 * The local state store: one LMDB environment per (stateful stage, input partition) under
 * STREAM_STATE_DIR, holding the last committed value of every state key of that task, and the
 * changelog offset it covers. The compacted `fv-state-<name>` topic stays the source of truth:
 * the store only ever receives what the changelog already holds committed, so a restore reads
 * the store and then the changelog's tail from the covered offset on (see docs/operators.md, "State").
 *
 * Layout: `<dir>/stage-<n>/partition-<p>/` with `state.mdb` (LMDB: a `state` table of key → value,
 * MessagePack with shared structures, a `meta` table with the covered offset and the owner) and `.checkpoint` (JSON: what the
 * store belongs to and the offset it covers, like Kafka Streams' `.checkpoint` file).
 */
import { closeSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, readSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import type { Database, RootDatabase } from "lmdb";
import { deadline } from "../async.ts";
import { FvError } from "../errors.ts";
import type { Logger } from "../logger.ts";
import type { StateEntry, StateSource } from "../ops/index.ts";
import { prefixEnd } from "../ops/spill.ts";

type Lmdb = typeof import("lmdb");
/** The store open on each path in this thread (see LocalStateStore.open). */
const openHere = new Map<string, LocalStateStore>();
/** lmdb, loaded when the first store opens: undefined once it failed to load (no addon for this platform). */
let lmdb: Promise<Lmdb | undefined> | undefined;
let lmdbLoaded: Lmdb | undefined;

/**
 * Loads lmdb's native addon once. Where it cannot load (a platform without a prebuilt addon, a
 * binary built without one) the stores are off: every task restores from the changelog alone, as
 * with STREAM_STATE_DIR=off, and the first open says so.
 */
function loadLmdb(log: Logger, dir: string): Promise<Lmdb | undefined> {
  lmdb ??= import("lmdb").then(
    (module) => (lmdbLoaded = module),
    (error: unknown) => {
      log("warn", `the local state store under ${dir} is off: its database (lmdb) did not load here (${(error as Error).message.split("\n")[0]}); restores read the changelog alone, as with STREAM_STATE_DIR=off`);
      return undefined;
    },
  );
  return lmdb;
}

/** How long a thread's end waits for its stores to close (a session gave each 15 s already). */
export const STORES_CLOSE_MS = 15_000;

/**
 * Closes every store this thread still has open (after the writes under way), and says how many
 * were open. A thread must not end with an LMDB environment open: a Worker torn down, or a process
 * exiting, with one open can crash in the addon's cleanup (seen as SIGSEGV on exit under Bun).
 * Rejects with a DeadlineError past `withinMs`: a thread's end is not held without bound.
 */
export async function closeStoresOfThisThread(withinMs = STORES_CLOSE_MS): Promise<number> {
  const open = [...openHere.values()];
  await deadline(Promise.all(open.map((store) => store.close())), withinMs);
  return open.length;
}

/** What a store belongs to: a store of anything else is foreign and rebuilt. */
export interface StoreIdentity {
  pipeline: string;
  stateTopic: string;
  /** Stage index (0-based). */
  stage: number;
  /** The operator (window, session, join ...). */
  operator: string;
  /** A digest of the stage's definition: a changed topology makes the store foreign. */
  fingerprint: string;
  partition: number;
}

/** The `.checkpoint` file next to each store. */
interface CheckpointFile extends StoreIdentity {
  version: number;
  /** The changelog offset from which a restore reads the tail (every record before it is in the store). */
  changelogOffset: string | null;
  /** The state topic's id (Kafka's topic UUID) the store was filled from. */
  topicId?: string;
  updatedAt: string;
}

/** 2: values are MessagePack with shared structures (1 was JSON text; such a store is rebuilt). */
const FORMAT_VERSION = 2;
/** Where lmdb keeps the shared MessagePack structures of the state table (a symbol: never a state key). */
const STRUCTURES = Symbol.for("fv-structures");
const DATA_FILE = "state.mdb";
const CHECKPOINT_FILE = ".checkpoint";
/** LMDB's magic number, in the first meta page right after the page header (16 or 24 bytes, by version). */
const LMDB_MAGIC = 0xbeefc0de;
const COVERED = "covered";
const OWNER = "owner";
const TOPIC_ID = "topicId";

/** One store write: a state key and its JSON text, or null to delete it. */
export interface StoreChange {
  key: string;
  value: string | null;
}

/**
 * Opens the stores of one loop. A store that cannot be trusted (another pipeline's, another
 * topology's, unreadable, never completed) is wiped at open, with a warning naming its path: its
 * task restores from the changelog alone, and nothing else stops.
 */
export class LocalStateStores {
  readonly dir: string;
  readonly #log: Logger;

  constructor(dir: string, log: Logger) {
    this.dir = resolve(dir);
    this.#log = log;
  }

  /** Where the store of a task lives: `<dir>/stage-<n>/partition-<p>`, or under `<dir>/standby/` for a standby copy. */
  pathOf(stage: number, partition: number, role: "active" | "standby" = "active"): string {
    return join(this.dir, ...(role === "standby" ? ["standby"] : []), `stage-${stage + 1}`, `partition-${partition}`);
  }

  /**
   * Opens (or creates) the store of one task and takes it over: a previous owner's late writes
   * are refused from now on. `standby`: the copy a standby task keeps up to date. Undefined when
   * lmdb cannot load on this platform (the stores are off, see loadLmdb).
   */
  async open(identity: StoreIdentity, role: "active" | "standby" = "active"): Promise<LocalStateStore | undefined> {
    if (!(await loadLmdb(this.#log, this.dir))) return undefined;
    const path = this.pathOf(identity.stage, identity.partition, role);
    const problem = inspect(path, identity);
    if (problem) {
      this.#log("warn", `local state store ${path}: ${problem}; rebuilding it from the changelog ${identity.stateTopic}[${identity.partition}]`);
      wipe(path);
    }
    try {
      return await LocalStateStore.open(path, identity);
    } catch (error) {
      if (error instanceof FvError && error.code === "STATE_STORE_FAILED") throw error;
      // Opened but unreadable (a damaged page): start it over once.
      this.#log("warn", `local state store ${path} could not be opened (${(error as Error).message}); rebuilding it from the changelog ${identity.stateTopic}[${identity.partition}]`);
      wipe(path);
      return await LocalStateStore.open(path, identity);
    }
  }

  /**
   * A partition becomes active here: its standby copy (closed by now) replaces the active store
   * when it covers more of the changelog (or the active one is missing); otherwise it goes.
   */
  promote(identity: StoreIdentity): void {
    const standby = this.pathOf(identity.stage, identity.partition, "standby");
    if (!existsSync(standby)) return;
    const active = this.pathOf(identity.stage, identity.partition);
    const covered = (path: string) => {
      if (inspect(path, identity) || !existsSync(join(path, DATA_FILE))) return undefined;
      try {
        const offset = (JSON.parse(readFileSync(join(path, CHECKPOINT_FILE), "utf8")) as CheckpointFile).changelogOffset;
        return offset === null ? undefined : BigInt(offset);
      } catch {
        return undefined;
      }
    };
    const fromStandby = covered(standby);
    const fromActive = covered(active);
    if (fromStandby !== undefined && (fromActive === undefined || fromStandby > fromActive)) {
      wipe(active);
      mkdirSync(join(active, ".."), { recursive: true });
      try {
        renameSync(standby, active);
      } catch (error) {
        throw storeFailure(active, "promoting the standby copy to", error);
      }
      this.#log("info", `local state store ${active}: took over its standby copy (it covers the changelog up to offset ${fromStandby})`);
    } else {
      wipe(standby);
    }
  }

  /**
   * Per partition number, the changelog offset the stores on disk cover (the least over a
   * partition's stages, active or standby copy, whichever goes further): what this process tells
   * the assignor, so that a partition goes where its state is furthest along.
   */
  warm(pipeline: string, stateTopic: string): Map<number, bigint> {
    const best = new Map<string, bigint>(); // "stage/partition" → offset
    for (const role of ["active", "standby"] as const) {
      const root = role === "standby" ? join(this.dir, "standby") : this.dir;
      let stages: string[];
      try {
        stages = readdirSync(root).filter((d) => /^stage-\d+$/.test(d));
      } catch {
        continue;
      }
      for (const stage of stages) {
        let partitions: string[];
        try {
          partitions = readdirSync(join(root, stage)).filter((d) => /^partition-\d+$/.test(d));
        } catch {
          continue;
        }
        for (const partition of partitions) {
          try {
            const c = JSON.parse(readFileSync(join(root, stage, partition, CHECKPOINT_FILE), "utf8")) as CheckpointFile;
            if (c.pipeline !== pipeline || c.stateTopic !== stateTopic || c.changelogOffset === null) continue;
            const key = `${c.stage}/${c.partition}`;
            const offset = BigInt(c.changelogOffset);
            if ((best.get(key) ?? -1n) < offset) best.set(key, offset);
          } catch {
            // Not a store (yet): not warm.
          }
        }
      }
    }
    const out = new Map<number, bigint>();
    for (const [key, offset] of best) {
      const partition = Number(key.split("/")[1]);
      const seen = out.get(partition);
      if (seen === undefined || offset < seen) out.set(partition, offset);
    }
    return out;
  }

  /** Wipes one store (its state could not be decoded): the task restores from the changelog alone. */
  async rebuild(store: LocalStateStore, reason: string): Promise<LocalStateStore> {
    this.#log("warn", `local state store ${store.path}: ${reason}; rebuilding it from the changelog ${store.identity.stateTopic}[${store.identity.partition}]`);
    await store.close();
    wipe(store.path);
    return LocalStateStore.open(store.path, store.identity);
  }
}

export class LocalStateStore {
  readonly path: string;
  readonly identity: StoreIdentity;
  readonly #root: RootDatabase;
  readonly #state: Database<unknown, string>;
  readonly #meta: Database<string, string>;
  readonly #owner = crypto.randomUUID();
  #closed = false;
  #closing: Promise<void> | undefined;
  /** Writes not finished yet: close waits for them. */
  #writing: Promise<unknown> = Promise.resolve();

  private constructor(path: string, identity: StoreIdentity, root: RootDatabase) {
    this.path = path;
    this.identity = identity;
    this.#root = root;
    // MessagePack with shared structures: a restore decodes a million small values in about a
    // third of the time JSON.parse of their text takes (measured on Bun here: 0.3 vs 1.2 s).
    this.#state = root.openDB<unknown, string>({ name: "state", encoding: "msgpack", sharedStructuresKey: STRUCTURES });
    this.#meta = root.openDB<string, string>({ name: "meta", encoding: "string" });
  }

  static async open(path: string, identity: StoreIdentity): Promise<LocalStateStore> {
    // Another store of this thread still has the path open (its task moved to another consumer
    // of this process and has not let go yet): it is taken over, so it closes first. Two handles
    // of one LMDB environment in one thread must not overlap (closing one can close the other's).
    await openHere.get(path)?.close();
    let root: RootDatabase;
    try {
      mkdirSync(path, { recursive: true });
      if (!existsSync(join(path, CHECKPOINT_FILE))) writeCheckpoint(path, identity, null);
      root = lmdbLoaded!.open({ path: join(path, DATA_FILE), maxDbs: 4, compression: false });
    } catch (error) {
      throw storeFailure(path, "opening", error);
    }
    const store = new LocalStateStore(path, identity, root);
    openHere.set(path, store);
    // Taking over: the owner changes in a committed write, so a process that had the partition
    // before (still writing its last checkpoint) can no longer change the store. An asynchronous
    // write transaction, never a synchronous one: the write lock may be held by the previous
    // owner (another consumer of this process, on this thread), whose own transaction needs this
    // thread to finish; blocking the thread for the lock would wait forever.
    try {
      await store.#meta.transaction(() => {
        void store.#meta.put(OWNER, store.#owner);
        // A store without a covered offset was never completed (its first fill was cut short):
        // it starts empty, or keys deleted since would come back.
        // Key by key (not clear: that would drop the shared MessagePack structures too).
        if (store.#meta.get(COVERED) === undefined) for (const key of [...store.#state.getKeys({})]) void store.#state.remove(key);
      });
    } catch (error) {
      store.closeNow();
      throw storeFailure(path, "taking over", error);
    }
    return store;
  }

  /** False once closed (or taken over by another open of its path in this thread). */
  get isOpen(): boolean {
    return !this.#closed;
  }

  /** The changelog offset from which a restore reads (undefined: the store is empty, read it all). */
  get covered(): bigint | undefined {
    const value = this.#meta.get(COVERED);
    return value === undefined ? undefined : BigInt(value);
  }

  /** The id of the state topic the store was written from (another id: the topic was created again). */
  get topicId(): string | undefined {
    return this.#meta.get(TOPIC_ID);
  }

  /** The stored value of one key (decoded JSON); undefined when it has none. */
  get(key: string): unknown {
    return this.#state.get(key);
  }

  /** Every stored key and its value (decoded JSON). */
  *entries(): Iterable<{ key: string; value: unknown }> {
    for (const { key, value } of this.#state.getRange({})) yield { key: key as string, value };
  }

  /**
   * The store as a spilling operator's StateSource: synchronous reads of the committed state
   * (LMDB's reads see every write transaction that has completed).
   */
  source(): StateSource {
    const state = this.#state;
    const store = this;
    return {
      get: (key: string) => state.get(key),
      *prefixed(prefix: string, after?: string): Iterable<StateEntry> {
        for (const { key, value } of state.getRange({ start: after ?? prefix, end: prefixEnd(prefix) })) {
          if (key === after) continue;
          yield { key: key as string, value };
        }
      },
      firstKeyFrom: (from) => {
        for (const key of state.getKeys({ start: from })) if (typeof key === "string") return key;
        return undefined;
      },
      get keys() {
        return store.keys;
      },
    };
  }

  /** Live keys in the store. */
  get keys(): number {
    const count = (this.#state.getStats() as { entryCount?: number }).entryCount ?? 0;
    // The shared structures are an entry of the table too.
    return this.#state.get(STRUCTURES as unknown as string) === undefined ? count : Math.max(0, count - 1);
  }

  /** Bytes the store takes on disk. */
  get bytesOnDisk(): number {
    try {
      return statSync(join(this.path, DATA_FILE)).size;
    } catch {
      return 0;
    }
  }

  /**
   * Applies committed changes, and moves the covered offset to `covered` when given, in one LMDB
   * transaction: the store never holds half a checkpoint. Refused (false) once another owner took
   * the store over. Throws STATE_STORE_FAILED when the disk refuses the write (full, read-only).
   */
  write(changes: readonly StoreChange[], covered?: bigint, topicId?: string): Promise<boolean> {
    if (this.#closed) return Promise.resolve(false);
    // The values are parsed in the transaction, when LMDB runs it (after the caller's turn: a
    // restore written behind hands over the whole state, and its parse no longer delays the task).
    let corrupt: Error | undefined;
    const written = this.#state.transaction(() => {
      if (this.#meta.get(OWNER) !== this.#owner) return false;
      let values: unknown[];
      try {
        values = changes.map((c) => (c.value === null ? null : JSON.parse(c.value)));
      } catch (error) {
        corrupt = new FvError("STATE_CORRUPTED", `local state store ${this.path}: a changelog value to store is not JSON (${(error as Error).message})`, { cause: error });
        return false;
      }
      for (let i = 0; i < changes.length; i++) {
        if (values[i] === null) void this.#state.remove(changes[i]!.key);
        else void this.#state.put(changes[i]!.key, values[i]);
      }
      if (covered !== undefined) void this.#meta.put(COVERED, String(covered));
      if (topicId !== undefined) void this.#meta.put(TOPIC_ID, topicId);
      return true;
    }).then(
      (done) => {
        if (corrupt) throw corrupt;
        if (done && covered !== undefined && !this.#closed) writeCheckpoint(this.path, this.identity, covered, this.topicId);
        return done;
      },
      (error) => {
        throw storeFailure(this.path, "writing", error);
      },
    );
    this.#writing = written.catch(() => {});
    return written;
  }

  /** Closes after the writes under way. */
  async close(): Promise<void> {
    if (this.#closing) return this.#closing;
    this.#closed = true;
    this.#closing = (async () => {
      await this.#writing;
      await this.#root.close().catch(() => {});
      if (openHere.get(this.path) === this) openHere.delete(this.path);
    })();
    return this.#closing;
  }

  /** Closes without waiting (a failed open or restore). */
  closeNow(): void {
    void this.close();
  }
}

/** Why a store cannot be trusted, or undefined when it can be opened. */
function inspect(path: string, identity: StoreIdentity): string | undefined {
  const checkpointPath = join(path, CHECKPOINT_FILE);
  const dataPath = join(path, DATA_FILE);
  if (!existsSync(path)) return undefined;
  if (!existsSync(checkpointPath)) return existsSync(dataPath) ? "it has no .checkpoint file" : undefined;
  let checkpoint: CheckpointFile;
  try {
    checkpoint = JSON.parse(readFileSync(checkpointPath, "utf8")) as CheckpointFile;
  } catch {
    return "its .checkpoint file is not JSON (a torn write?)";
  }
  if (checkpoint.version !== FORMAT_VERSION) return `it has format version ${checkpoint.version}, this engine writes ${FORMAT_VERSION}`;
  for (const field of ["pipeline", "stateTopic", "stage", "operator", "fingerprint", "partition"] as const) {
    if (checkpoint[field] !== identity[field]) {
      return `it belongs to ${field} ${JSON.stringify(checkpoint[field])}, not ${JSON.stringify(identity[field])} (another pipeline's or topology's store)`;
    }
  }
  if (!existsSync(dataPath)) return undefined;
  // LMDB trusts its file: a damaged one can crash the process instead of failing a read. The
  // header is checked before it is mapped.
  const size = statSync(dataPath).size;
  if (size === 0) return undefined;
  if (size < 4096) return `${DATA_FILE} is truncated (${size} bytes)`;
  const header = Buffer.alloc(32);
  const fd = openSync(dataPath, "r");
  try {
    readSync(fd, header, 0, 32, 0);
  } finally {
    closeSync(fd);
  }
  if (header.readUInt32LE(16) !== LMDB_MAGIC && header.readUInt32LE(24) !== LMDB_MAGIC) return `${DATA_FILE} is not an LMDB file (bad magic number)`;
  return undefined;
}

function wipe(path: string): void {
  try {
    rmSync(path, { recursive: true, force: true });
  } catch (error) {
    throw storeFailure(path, "removing", error);
  }
}

function writeCheckpoint(path: string, identity: StoreIdentity, covered: bigint | null, topicId?: string): void {
  const file: CheckpointFile = {
    version: FORMAT_VERSION,
    ...identity,
    ...(topicId ? { topicId } : {}),
    changelogOffset: covered === null ? null : String(covered),
    updatedAt: new Date().toISOString(),
  };
  const target = join(path, CHECKPOINT_FILE);
  try {
    // Written aside and renamed: a crash leaves the old file or the new one, never half of one.
    writeFileSync(`${target}.tmp`, `${JSON.stringify(file, null, 2)}\n`);
    renameSync(`${target}.tmp`, target);
  } catch (error) {
    throw storeFailure(path, "writing the .checkpoint file of", error);
  }
}

function storeFailure(path: string, doing: string, error: unknown): FvError {
  if (error instanceof FvError) return error;
  const message = (error as Error)?.message ?? String(error);
  const code = (error as { code?: string })?.code;
  const full = code === "ENOSPC" || /MDB_MAP_FULL|No space left|ENOSPC/i.test(message);
  const hint = full
    ? "the disk is full: free space there or point STREAM_STATE_DIR at a larger disk (the committed state is safe in the changelog topic)"
    : "check that the directory is writable, or point STREAM_STATE_DIR elsewhere (the committed state is safe in the changelog topic)";
  return new FvError("STATE_STORE_FAILED", `${doing} the local state store ${path} failed: ${message}; ${hint}`, { cause: error, context: { path } });
}
