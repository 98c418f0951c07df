/**
 * The bookkeeping every operator shares: the watermark, the arrival sequence, the dirty keys
 * that make up the next changelog batch, restore from a changelog or a snapshot, and the
 * snapshot itself. Each operator supplies a codec for its own entities, and extends
 * `StatefulOperator` for the Operator methods that only hand over to its state.
 */
import { FvError } from "../errors.ts";
import type { Row } from "../expr/index.ts";
import { type Operator, type OperatorOutput, type OperatorSnapshot, SNAPSHOT_VERSION, type StateEntry } from "./operator.ts";
import { assertJsonState, RawState, StateReader } from "./state-values.ts";

/** One keyed unit of operator state (a window of a group, a session list, a buffered row ...). */
export interface Entity {
  /** The changelog key. */
  readonly key: string;
  /** Arrival sequence: ties fire in this order, so output order survives a restore. */
  seq: number;
  /** True when the changelog may hold a live value for this key (so removing it needs a tombstone). */
  persisted: boolean;
  /** Waiting in the next changelog batch (OperatorState's bookkeeping; start false). */
  dirty: boolean;
  /** Gone from the live state (OperatorState's bookkeeping; start false). */
  removed: boolean;
  /** Spilling operators only (see spill.ts): the drain that last wrote it. */
  drainedAt?: number;
}

export interface StateCodec<E extends Entity> {
  /** Turns one restored value back into an entity; throws STATE_CORRUPTED (via the reader) for a key or shape it does not know. */
  decode(reader: StateReader, value: unknown): E;
  /** The entity as a plain JSON value. */
  encode(entity: E): unknown;
  /** Forgets all live state. */
  clear(): void;
  /** Takes restored entities, in arrival order, as live state. */
  load(entities: E[]): void;
  /** Every live entity. */
  live(): Iterable<E>;
  /**
   * Optional: takes restored values not parsed yet (after `load`; distinct keys, none of them
   * loaded), each to be decoded when first needed; their sequence numbers are all below the
   * restored meta's. Without it, or without a restored meta, every value is parsed and decoded
   * during the restore.
   */
  loadUndecoded?(entries: ReadonlyArray<{ readonly key: string; readonly value: RawState }>): void;
}

/** The changelog key of the operator's own bookkeeping: format version, watermark, sequence. */
export const META_KEY = "meta";
const META_VERSION = 1;

export class OperatorState<E extends Entity> {
  readonly op: string;
  /** The highest watermark seen (epoch ms); -Infinity before the first. */
  watermark = -Infinity;
  readonly #codec: StateCodec<E>;
  #seq = 0;
  // Changed entities, each once (its `dirty` flag says it is here): a flag test per row, no map lookup.
  #dirty: E[] = [];
  /** Entities in #dirty that were removed since (skipped at drain; compacted away when they pile up). */
  #removedDirty = 0;
  /** Keys to delete in the next batch. */
  readonly #tombstones = new Set<string>();
  #metaDirty = false;
  #started = false;
  // Restored entities wait here (later entries win) until the operator first needs them.
  readonly #restored = new Map<string, E>();
  /** Restored entities known to have distinct keys (`restore(entries, { unique: true })`): no map needed. */
  #restoredList: E[] = [];
  #restoredSeq = 0;
  #restoredWatermark = -Infinity;
  /** Whether a meta entry was restored (it carries the next sequence number, above every entity's). */
  #restoredMeta = false;
  /** Restored values not parsed yet, for a codec that decodes them on first use. */
  #undecoded: Array<{ readonly key: string; readonly value: RawState }> = [];
  #needsLoad = false;
  /** How many times drainChanges ran. */
  drains = 0;
  /** Stamp each drained entity with `drainedAt` (a spilling operator's entities carry the field). */
  stampDrains = false;

  constructor(op: string, codec: StateCodec<E>) {
    this.op = op;
    this.#codec = codec;
  }

  /** Makes restored state live. Call first in every method that reads state. */
  ready(): void {
    if (!this.#needsLoad) return;
    this.#needsLoad = false;
    this.#codec.clear();
    // Values the codec would decode on first use need the meta's sequence number (above theirs).
    if (this.#undecoded.length && !this.#restoredMeta) this.#parseUndecoded(false);
    const entities = (this.#restoredList.length ? this.#restoredList : [...this.#restored.values()]).sort((a, b) => a.seq - b.seq);
    let seq = this.#restoredSeq;
    for (const entity of entities) {
      entity.persisted = true;
      if (entity.seq >= seq) seq = entity.seq + 1;
    }
    this.#codec.load(entities);
    // Kept until begin(), like the restored entities: a restore after a read loads them all again.
    if (this.#undecoded.length) this.#codec.loadUndecoded!(this.#undecoded);
    this.#seq = seq;
    this.watermark = this.#restoredWatermark;
    this.#dirty = [];
    this.#removedDirty = 0;
    this.#tombstones.clear();
    this.#metaDirty = false;
  }

  /** Makes restored state live and closes the door on further restores. Call first in process() and advance(). */
  begin(): void {
    if (this.#started) return;
    this.ready();
    this.#started = true;
    this.#restored.clear();
    this.#restoredList = [];
    this.#undecoded = [];
  }

  /** The next arrival sequence number. */
  nextSeq(): number {
    this.#metaDirty = true;
    return this.#seq++;
  }

  /**
   * Moves the watermark forward; false (and nothing changes) when `watermark` is not above it.
   * Infinity (flush everything) is kept as Number.MAX_VALUE, so the changelog can carry it.
   */
  advanceTo(watermark: number): boolean {
    const w = watermark === Number.POSITIVE_INFINITY ? Number.MAX_VALUE : watermark;
    if (!(w > this.watermark)) return false;
    this.watermark = w;
    this.#metaDirty = true;
    return true;
  }

  /** A new entity: it goes into the next changelog batch. */
  created(entity: E): void {
    // A tombstone still waiting for this key means the log holds the old value: the new one replaces it.
    entity.persisted = this.#tombstones.delete(entity.key);
    entity.dirty = true;
    this.#dirty.push(entity);
  }

  /** An entity changed. */
  touched(entity: E): void {
    if (entity.dirty) return;
    entity.dirty = true;
    this.#dirty.push(entity);
  }

  /** An entity is gone: a tombstone, unless the log never saw it. */
  removed(entity: E): void {
    entity.removed = true;
    if (entity.persisted) this.#tombstones.add(entity.key);
    // Someone who never drains (a library user without a changelog) must not keep every fired window alive.
    if (entity.dirty && ++this.#removedDirty > 1024 && this.#removedDirty * 2 > this.#dirty.length) {
      this.#dirty = this.#dirty.filter((e) => !e.removed);
      this.#removedDirty = 0;
    }
  }

  drainChanges(): StateEntry[] {
    this.ready();
    const out: StateEntry[] = [];
    const dirty = this.#dirty;
    for (let i = 0; i < dirty.length; i++) {
      const entity = dirty[i]!;
      if (entity.removed) continue;
      const value = this.#codec.encode(entity);
      assertJsonState(this.op, entity.key, value);
      out.push({ key: entity.key, value });
    }
    for (const key of this.#tombstones) out.push({ key, value: null });
    if (this.#metaDirty) out.push({ key: META_KEY, value: this.#meta() });
    // Only now that every value encoded: a refused batch stays dirty.
    const drain = ++this.drains;
    const stamp = this.stampDrains;
    for (let i = 0; i < dirty.length; i++) {
      const entity = dirty[i]!;
      entity.dirty = false;
      if (!entity.removed) entity.persisted = true;
      if (stamp) entity.drainedAt = drain;
    }
    this.#dirty = [];
    this.#removedDirty = 0;
    this.#tombstones.clear();
    this.#metaDirty = false;
    return out;
  }

  restore(entries: Iterable<StateEntry>, options: { unique?: boolean } = {}): void {
    this.#checkNotStarted("restore");
    // Distinct keys into an empty state (a local store's entries): a list, not a map of a million keys.
    const unique = options.unique === true && this.#restored.size === 0 && this.#restoredList.length === 0 && this.#undecoded.length === 0;
    if (!unique && this.#restoredList.length) {
      for (const entity of this.#restoredList) this.#restored.set(entity.key, entity);
      this.#restoredList = [];
    }
    // Later entries may replace or delete these keys: decoded now, into the map.
    if (!unique && this.#undecoded.length) this.#parseUndecoded(true);
    const defer = unique && this.#codec.loadUndecoded !== undefined;
    for (const entry of entries) {
      const key = (entry as { key?: unknown })?.key;
      if (typeof key !== "string") throw new FvError("STATE_CORRUPTED", `${this.op}: a changelog entry has no string key`, { context: { op: this.op } });
      let value = entry.value;
      if (value instanceof RawState) {
        if (defer && key !== META_KEY) {
          this.#undecoded.push(entry as { key: string; value: RawState });
          continue;
        }
        value = value.parse();
      }
      const reader = new StateReader(this.op, key);
      if (value === undefined) reader.fail("the value is missing (use null for a tombstone)");
      if (key === META_KEY) {
        this.#restoreMeta(reader, value);
      } else if (value === null) {
        if (!unique) this.#restored.delete(key);
      } else {
        const entity = this.#codec.decode(reader, value);
        if (entity.key !== key) reader.fail(`the value belongs to key ${JSON.stringify(entity.key)}`);
        if (unique) this.#restoredList.push(entity);
        else this.#restored.set(key, entity);
      }
    }
    this.#needsLoad = true;
  }

  snapshot(): OperatorSnapshot {
    this.ready();
    const entries: StateEntry[] = [];
    for (const entity of this.#codec.live()) {
      const value = this.#codec.encode(entity);
      assertJsonState(this.op, entity.key, value);
      entries.push({ key: entity.key, value });
    }
    entries.push({ key: META_KEY, value: this.#meta() });
    return { version: SNAPSHOT_VERSION, op: this.op, watermark: Number.isFinite(this.watermark) ? this.watermark : null, entries };
  }

  restoreSnapshot(snapshot: OperatorSnapshot): void {
    this.#checkNotStarted("restoreSnapshot");
    const s = snapshot as Partial<OperatorSnapshot> | null;
    if (typeof s !== "object" || s === null) throw this.#badSnapshot("it is not an object");
    if (s.version !== SNAPSHOT_VERSION) {
      throw this.#badSnapshot(`its format version ${JSON.stringify(s.version)} is not one this build reads (version ${SNAPSHOT_VERSION})`);
    }
    if (s.op !== this.op) throw this.#badSnapshot(`it was taken from op ${JSON.stringify(s.op)}`);
    if (!Array.isArray(s.entries)) throw this.#badSnapshot("entries is not a list");
    if (s.watermark !== null && (typeof s.watermark !== "number" || !Number.isFinite(s.watermark))) {
      throw this.#badSnapshot("watermark must be a finite number or null");
    }
    this.#restored.clear();
    this.#restoredList = [];
    this.#undecoded = [];
    this.#restoredMeta = false;
    this.#restoredSeq = 0;
    this.#restoredWatermark = -Infinity;
    this.restore(s.entries);
    if (s.watermark !== null && s.watermark > this.#restoredWatermark) this.#restoredWatermark = s.watermark;
  }

  #meta(): unknown {
    return { v: META_VERSION, watermark: Number.isFinite(this.watermark) ? this.watermark : null, seq: this.#seq };
  }

  /**
   * Parses and decodes the values held for decoding on first use, as a restore without it would
   * have: into the map when more entries are coming (they may replace or delete these keys), else
   * with the list of the restore that held them (it had distinct keys).
   */
  #parseUndecoded(intoMap: boolean): void {
    const held = this.#undecoded;
    this.#undecoded = [];
    for (const { key, value } of held) {
      const entity = this.#codec.decode(new StateReader(this.op, key), value.parse());
      if (entity.key !== key) new StateReader(this.op, key).fail(`the value belongs to key ${JSON.stringify(entity.key)}`);
      if (intoMap) this.#restored.set(key, entity);
      else this.#restoredList.push(entity);
    }
  }

  #restoreMeta(reader: StateReader, value: unknown): void {
    this.#restoredMeta = value !== null;
    if (value === null) {
      this.#restoredSeq = 0;
      this.#restoredWatermark = -Infinity;
      return;
    }
    const meta = reader.object(value, "meta");
    if (meta.v !== META_VERSION) reader.fail(`meta format version ${JSON.stringify(meta.v)} is not one this build reads (version ${META_VERSION})`);
    const watermark = reader.numberOrNull(meta.watermark, "meta.watermark");
    this.#restoredWatermark = watermark ?? -Infinity;
    this.#restoredSeq = reader.integer(meta.seq, "meta.seq");
  }

  #checkNotStarted(method: string): void {
    if (this.#started) throw new Error(`${this.op}: ${method}() must come before the first process() or advance()`);
  }

  #badSnapshot(why: string): FvError {
    return new FvError("STATE_CORRUPTED", `${this.op}: cannot restore this snapshot: ${why}`, { context: { op: this.op } });
  }
}

/**
 * An operator whose changelog, restore and snapshot are exactly its OperatorState's. A subclass
 * creates `state` with the codec for its entities and writes process, advance and stateSize.
 */
export abstract class StatefulOperator<E extends Entity> implements Operator {
  protected abstract readonly state: OperatorState<E>;

  abstract process(row: Row, eventTime: number, input: number): OperatorOutput;
  abstract advance(watermark: number): Row[];
  abstract stateSize(): { keys: number; bytes: number };

  /** stateSize().keys; an operator that counts its keys as it goes answers without the walk. */
  stateKeys(): number {
    return this.stateSize().keys;
  }

  drainChanges(): StateEntry[] {
    return this.state.drainChanges();
  }

  get drains(): number {
    return this.state.drains;
  }

  restore(entries: Iterable<StateEntry>, options?: { unique?: boolean }): void {
    this.state.restore(entries, options);
  }

  snapshot(): OperatorSnapshot {
    return this.state.snapshot();
  }

  restoreSnapshot(snapshot: OperatorSnapshot): void {
    this.state.restoreSnapshot(snapshot);
  }
}
