import type * as v from "valibot";
import type { Row } from "../expr/index.ts";

/** What one input row gave: rows to emit now, and rows refused as late. Read-only: see `NO_OUTPUT`. */
export interface OperatorOutput {
  rows: Row[];
  /** Rows refused because the watermark already closed their window (or session, or join bound). The engine counts them, drops or dead-letters them. */
  late: Row[];
}

/**
 * One changelog entry: a state key and its new value, or `null` for a deleted key (a tombstone).
 * Values are plain JSON (no NaN, Infinity or undefined).
 */
export interface StateEntry {
  key: string;
  value: unknown | null;
}

/** A full, self-contained copy of one operator instance's state. */
export interface OperatorSnapshot {
  /** Format version; see `SNAPSHOT_VERSION`. */
  version: number;
  /** The step's op, e.g. "windowedAggregate". A snapshot only restores into the same op. */
  op: string;
  /** The watermark the state was taken at (epoch ms), or null before the first one. */
  watermark: number | null;
  /** Every live key, in the same encoding as the changelog, plus the "meta" entry. */
  entries: StateEntry[];
}

/**
 * What `process` returns when a row neither emits nor is late (most rows of a windowed
 * aggregate): one shared, frozen object, so the hot path allocates nothing. Changing it throws.
 */
export const NO_OUTPUT: OperatorOutput = Object.freeze({ rows: Object.freeze([]) as unknown as Row[], late: Object.freeze([]) as unknown as Row[] });

/**
 * Committed state an operator can read back on demand: the local state store of its task (see
 * `Operator.spill`). Values are the changelog's JSON values; reads are synchronous.
 */
export interface StateSource {
  /** The committed value of one state key; undefined when the key has none. */
  get(key: string): unknown;
  /** Committed entries whose key starts with `prefix`, in key order; only keys after `after` when given. */
  prefixed(prefix: string, after?: string): Iterable<StateEntry>;
  /** The first committed key at or after `from` in key order, or undefined. */
  firstKeyFrom(from: string): string | undefined;
  /** How many of the operator's entity keys are committed (not counting bookkeeping such as "meta"). */
  readonly keys: number;
}

/** What a spilling operator holds in memory and how often it found a key there. */
export interface CacheStats {
  /** Entities in memory now. */
  resident: number;
  /** Lookups that found their entity in memory. */
  hits: number;
  /** Lookups that went to the store (found there or not). */
  misses: number;
}

/** The snapshot format this build writes and reads. */
export const SNAPSHOT_VERSION = 1;

/**
 * One instance of a stateful operator: the engine creates one per input partition. Pure and
 * synchronous: rows and event time in, fired rows out; no I/O, no timers, no clock.
 *
 * @example
 * const op = operatorSteps.windowedAggregate.compile(def, { stage: 0, step: 0, inputs: 1 }).create();
 * op.process({ ts: 1_000, price: 3 }, 1_000, 0); // { rows: [], late: [] }
 * op.advance(60_000);                             // [{ windowStart: 0, windowEnd: 60000, sum_price: 3 }]
 */
export interface Operator {
  /**
   * One input row with its event time in epoch ms. `input` is the index of the stage input it
   * came from (0 = left, 1 = right for streamJoin). Throws FvError POISON_ROW (with
   * `context.reason`) for a row it cannot use; a poison row leaves the state unchanged.
   * The output is read-only (it may be the shared, frozen `NO_OUTPUT`). `key`: the record's
   * message key as text, for an operator that keys by it (a tableJoin's table rows).
   */
  process(row: Row, eventTime: number, input: number, key?: string | null): OperatorOutput;
  /** A record without a value (a tombstone) on an input keyed by its message key, with the record's timestamp: a tableJoin's table deletes the key. */
  tombstone?(key: string, input: number, time?: number): OperatorOutput;
  /** The watermark moved forward (epoch ms): fire and evict whatever it closes. Smaller values are ignored. */
  advance(watermark: number): Row[];
  /** State changed since the last call, as changelog entries; clears the dirty set. Throws STATE_CORRUPTED rather than write a value JSON cannot carry. */
  drainChanges(): StateEntry[];
  /**
   * Rebuilds state from changelog entries in log order (later entries win, null deletes). Only
   * before the first process() or advance(); may be called several times. `unique`: the caller
   * vouches that no key appears twice (a compacted set, as a local store holds): restored faster.
   */
  restore(entries: Iterable<StateEntry>, options?: { unique?: boolean }): void;
  /** The full state, or throws STATE_CORRUPTED when some value cannot be captured (NaN, Infinity, undefined ...). */
  snapshot(): OperatorSnapshot;
  /** Replaces the state with a snapshot's; refuses another op or an unknown version (STATE_CORRUPTED). Only before the first process() or advance(). */
  restoreSnapshot(snapshot: OperatorSnapshot): void;
  /** Live keys and approximate bytes, for the build record and a memory cap. Walks the state for the bytes. */
  stateSize(): { keys: number; bytes: number };
  /**
   * stateSize's keys without the walk (the cap is checked at every checkpoint: at 300k keys the
   * walk took 13% of a restart's samples). Spilling, it walks only what is in memory.
   */
  stateKeys(): number;
  /**
   * Queryable state (GET /state/...): the current value of one group key (its values in groupBy
   * order), shaped like the rows the operator emits; a windowed operator gives one row per open
   * window, oldest first. [] when the key has no state here. Absent on operators whose state is
   * not kept per group key (a stream join buffers rows).
   */
  read?(group: readonly unknown[]): Row[];
  /** Every group key with state here, each once, in no particular order. */
  groups?(): Iterable<readonly unknown[]>;
  /**
   * State beyond memory: from now on the operator reads its committed state from `source` on
   * demand and keeps at most about `cacheKeys` entities in memory (plus those changed since their
   * last commit). Call after `restore` of the bookkeeping entries only (the "meta" key), before the
   * first process() or advance(). False (and nothing changes) when this configuration cannot spill.
   * Absent on operators that keep all their state in memory.
   *
   * With `resident`, later instead: every entity is in memory (restored whole, and processed
   * since), and `source` holds the restored state (written behind the restore). Nothing is read
   * from `source` that memory lacks, but restored values still held undecoded (never used since
   * the restore: `source` has each as it is) may leave memory at once; every other entity stays
   * until the source has every drain taken so far (`settled(drains)`), as a changed one would.
   */
  spill?(source: StateSource, cacheKeys: number, options?: { resident?: boolean }): boolean;
  /** How many times drainChanges() ran: pass it to `settled` once that drain's changes are in the source. */
  readonly drains?: number;
  /** Every change of drains 1..`drains` is now committed in the source: entities unchanged since may leave memory. */
  settled?(drains: number): void;
  /** Windows are due to fire that the last advance left for the next (a spilling operator fires in steps): advance again soon. */
  firing?(): boolean;
  /** Memory use and hit counts while spilling; undefined when not spilling. */
  cacheStats?(): CacheStats | undefined;
}

/** Where a step sits, and how many inputs its stage has. */
export interface OperatorContext {
  /** 0-based stage index. */
  stage: number;
  /** 0-based step index within the stage. */
  step: number;
  /** Number of stage inputs (streamJoin needs exactly 2). */
  inputs: number;
  /** The stage's input datasets, in order (a tableJoin's `table` names one). */
  inputNames?: readonly string[];
}

/** A step compiled once per stage; the engine calls `create()` once per partition. */
export interface CompiledOperator {
  readonly op: string;
  create(): Operator;
  /** The column holding each row's event time (epoch ms number or ISO-8601 string); read it with `eventTimeOf`. */
  readonly timeColumn: string;
  /** How far behind the highest event time the engine keeps the watermark: watermark = max event time − allowedLatenessMs. */
  readonly allowedLatenessMs: number;
  /** Group or join key columns of input 0, for repartitioning. Empty: one global group per partition. */
  readonly keyColumns: readonly string[];
  /**
   * Key columns per stage input (differs from `keyColumns` only for a streamJoin with
   * leftKey/rightKey). Empty for an input keyed by its message key that is never re-keyed (a
   * tableJoin's table).
   */
  readonly inputKeyColumns: readonly (readonly string[])[];
  /** A row's event time, when the operator reads it otherwise than `eventTimeOf(row, timeColumn)`. */
  readonly eventTime?: (row: Row, input: number) => number;
  /** tableJoin: the input that is the table (records keyed by their message key; a tombstone deletes). */
  readonly tableInput?: number;
  /** tableJoin: every member reads the whole table. */
  readonly global?: boolean;
  /**
   * The operator keeps restored values undecoded until first use (StateCodec.loadUndecoded), and
   * once spilling lets go of those never used (they are in its store): a restore into an empty
   * local store then keeps all its state in memory, as bytes, while the store is written behind,
   * up to ten caches of it (operator-tasks.ts, WRITE_BEHIND_CACHES).
   */
  readonly holdsUndecoded?: boolean;
}

/** A stateful step: its valibot schema and its compile function. */
export interface OperatorKind {
  // deno-lint-ignore no-explicit-any
  readonly schema: v.GenericSchema<any, any>;
  /** Takes the schema's output. Throws FvError INVALID_TOPOLOGY (with `context.field`) for a definition that parses but cannot run. */
  // deno-lint-ignore no-explicit-any
  compile(def: any, ctx: OperatorContext): CompiledOperator;
}
