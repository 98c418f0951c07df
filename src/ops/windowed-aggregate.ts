import * as v from "valibot";
import type { Row } from "../expr/index.ts";
import { aggregateList, Aggregates, type Slots } from "./aggregates.ts";
import { checkEventTime } from "./event-time.ts";
import { type GroupKey, groupKey, readGroup, writeGroup } from "./group-key.ts";
import { type CacheStats, type CompiledOperator, NO_OUTPUT, type OperatorContext, type OperatorOutput, type StateSource } from "./operator.ts";
import { OperatorState, StatefulOperator } from "./operator-state.ts";
import { SlidingAggregate } from "./sliding-aggregate.ts";
import { Spill, type SpillEntity } from "./spill.ts";
import { type RawState, StateReader } from "./state-values.ts";
import { allowedLatenessMs, checkDistinctColumns, emitMode, checkInputs, groupBy, groupByColumns, groupedOperator, invalidStep, milliseconds, timeColumn } from "./step-fields.ts";
import { hoppingStarts, tumblingStart } from "./time-windows.ts";

export const windowedAggregateSchema = v.strictObject({
  op: v.literal("windowedAggregate"),
  timeColumn,
  windowMs: milliseconds("windowMs", 1),
  /** Hopping windows: a new window every slideMs. Absent (or equal to windowMs): tumbling. */
  slideMs: v.optional(milliseconds("slideMs", 1)),
  /** Sliding windows (Kafka Streams' SlidingWindows): a window per distinct set of rows within windowMs. */
  sliding: v.optional(v.boolean("sliding is true or false"), false),
  allowedLatenessMs,
  groupBy,
  aggs: aggregateList,
  emit: emitMode,
});

export type WindowedAggregateDef = v.InferOutput<typeof windowedAggregateSchema>;

const OP = "windowedAggregate";

/**
 * Spilling: most windows read back from the store and fired per advance (the rest go at the next
 * ones): a window closing over millions of groups goes out in steps, not as one list in memory.
 */
export const FIRE_BUDGET = 20_000;

/**
 * `{ op = "windowedAggregate", timeColumn = "ts", windowMs = 60000, groupBy = ["sym"], aggs = [...] }`:
 * per group, one row per window once the watermark reaches the window's end.
 *
 * @example
 * const compiled = compileWindowedAggregate({ op: "windowedAggregate", timeColumn: "ts", windowMs: 60_000, allowedLatenessMs: 0, groupBy: ["sym"], aggs: [{ op: "count" }] }, { stage: 0, step: 0, inputs: 1 });
 * const op = compiled.create();
 * op.process({ sym: "A", ts: 5_000 }, 5_000, 0);
 * op.advance(60_000); // [{ windowStart: 0, windowEnd: 60000, sym: "A", count: 1 }]
 */
export function compileWindowedAggregate(def: WindowedAggregateDef, ctx: OperatorContext): CompiledOperator {
  checkInputs(OP, ctx, "one or more");
  const slideMs = def.slideMs ?? def.windowMs;
  if (slideMs > def.windowMs) throw invalidStep(OP, ctx, "slideMs", `slideMs (${slideMs}) cannot exceed windowMs (${def.windowMs}): rows between windows would belong to none`);
  const aggs = new Aggregates(def.aggs);
  checkDistinctColumns(OP, ctx, [
    { name: "windowStart", field: "windowStart" },
    { name: "windowEnd", field: "windowEnd" },
    ...groupByColumns(def.groupBy),
    ...aggs.list.map((a, i) => ({ name: a.alias, field: `aggs.${i}.alias` })),
  ]);
  if (def.sliding) {
    if (def.slideMs !== undefined) throw invalidStep(OP, ctx, "slideMs", "sliding windows have no slideMs: a window starts or ends at each row; drop slideMs, or drop sliding for hopping windows");
    const sliding = { sizeMs: def.windowMs, aggs, group: groupKey(def.groupBy), update: def.emit === "update" };
    return groupedOperator(OP, def, ctx, () => new SlidingAggregate(sliding));
  }
  const config: WindowConfig = { sizeMs: def.windowMs, slideMs, aggs, group: groupKey(def.groupBy), update: def.emit === "update" };
  return { ...groupedOperator(OP, def, ctx, () => new WindowedAggregate(config)), holdsUndecoded: true };
}

interface WindowConfig {
  sizeMs: number;
  slideMs: number;
  aggs: Aggregates;
  group: GroupKey;
  /** emit = "update": a row per change, none at close. */
  update: boolean;
}

/** One group's accumulators in one window. Key: `w:<start>:<group key JSON>`. */
interface Window extends SpillEntity {
  readonly start: number;
  /** The group's in-memory identity (see GroupKey.idOf). */
  readonly id: unknown;
  readonly group: unknown[];
  readonly acc: Slots;
}

/** About what a window not decoded yet takes once it is (its text, twice), for stateSize. */
const heldBytes = (key: string, raw: RawState) => 96 + 2 * key.length + 2 * raw.length;

class WindowedAggregate extends StatefulOperator<Window> {
  readonly #c: WindowConfig;
  protected readonly state: OperatorState<Window>;
  /** Open windows by end, each map in arrival order of its groups. */
  readonly #byEnd = new Map<number, Map<unknown, Window>>();
  /** The keys of #byEnd, ascending. */
  #ends: number[] = [];
  #count = 0;
  // Per-row scratch, reused (process is synchronous).
  readonly #values: unknown[];
  readonly #starts: number[] = [];
  /** Set while the state lives in a store (see `spill`); memory then holds a bounded part of it. */
  #spill: Spill | undefined;
  /**
   * Spilling: window starts that may have windows in the store and not in memory (all starts of
   * the store at first, and each start a window of which left memory). A start not here has all
   * its live windows in memory, so a new group's window needs no store lookup.
   */
  readonly #coldStarts = new Set<number>();
  /**
   * Spilling: due starts whose stored windows are being fired in parts (a budget per advance),
   * with the last key fired and the keys fired from memory (the store still holds them until
   * their tombstones are written).
   */
  readonly #firing = new Map<number, { after: string | undefined; fromMemory: Set<string> }>();
  /**
   * Restored windows not decoded yet, by start, then by key (a restore from the changelog hands
   * them over as the records' bytes): each is decoded when first needed, by a row, its firing, a
   * read or a snapshot. They count in #count and their ends are in #ends.
   */
  readonly #undecoded = new Map<number, Map<string, RawState>>();
  /**
   * Ends with windows from #undecoded: their windows go out (and into snapshots) in arrival
   * order, as a restore that decoded everything would have them, whichever was decoded first.
   */
  readonly #unsorted = new Set<number>();
  /** About what the windows in #undecoded take once decoded (their text, twice), kept as they come and go. */
  #undecodedBytes = 0;

  constructor(config: WindowConfig) {
    super();
    this.#c = config;
    this.#values = new Array(config.aggs.size);
    this.state = new OperatorState<Window>(OP, {
      decode: (r, value) => this.#decode(r, value),
      encode: (w) => ({ start: w.start, group: w.group, seq: w.seq, acc: this.#c.aggs.encode(w.acc) }),
      clear: () => {
        this.#byEnd.clear();
        this.#ends = [];
        this.#count = 0;
        this.#undecoded.clear();
        this.#unsorted.clear();
        this.#undecodedBytes = 0;
      },
      load: (windows) => {
        for (const w of windows) this.#insert(w);
      },
      loadUndecoded: (entries) => this.#loadUndecoded(entries),
      live: () => {
        this.#decodeAll();
        return this.#spill === undefined ? this.#live() : [...this.#live(), ...this.#stored()];
      },
    });
  }

  process(row: Row, eventTime: number, _input: number): OperatorOutput {
    this.state.begin();
    checkEventTime(eventTime);
    const { sizeMs, slideMs } = this.#c;
    // 1. Read and check every aggregate input, so a poison row changes nothing.
    this.#c.aggs.read(row, this.#values);
    // 2. Add the row to each of its windows the watermark has not closed.
    const watermark = this.state.watermark;
    let id: unknown;
    const update = this.#c.update;
    if (slideMs === sizeMs) {
      const start = tumblingStart(eventTime, sizeMs);
      if (start + sizeMs <= watermark) return { rows: [], late: [row] };
      const w = this.#add(start, this.#c.group.idOfRow(row), row, eventTime);
      return update ? { rows: [this.#result(w, start + sizeMs)], late: [] } : NO_OUTPUT;
    }
    let open = false;
    const changed: Row[] = [];
    for (const start of hoppingStarts(eventTime, sizeMs, slideMs, this.#starts)) {
      if (start + sizeMs <= watermark) continue;
      if (!open) id = this.#c.group.idOfRow(row);
      const w = this.#add(start, id, row, eventTime);
      if (update) changed.push(this.#result(w, start + sizeMs));
      open = true;
    }
    if (!open) return { rows: [], late: [row] };
    return update ? { rows: changed, late: [] } : NO_OUTPUT;
  }

  advance(watermark: number): Row[] {
    this.state.begin();
    const spill = this.#spill;
    // Restored windows of the ends due decoded first: one that does not decode fails the call
    // before anything changes (the watermark included).
    if (this.#unsorted.size > 0) {
      const due = watermark === Number.POSITIVE_INFINITY ? Number.MAX_VALUE : watermark;
      for (let i = 0; i < this.#ends.length && this.#ends[i]! <= due; i++) if (this.#unsorted.has(this.#ends[i]!)) this.#settle(this.#ends[i]!);
    }
    if (!this.state.advanceTo(watermark) && (spill === undefined || !this.#coldDue())) return [];
    watermark = this.state.watermark;
    const out: Row[] = [];
    let fired = 0;
    while (fired < this.#ends.length && this.#ends[fired]! <= watermark) {
      const end = this.#ends[fired++]!;
      const windows = this.#byEnd.get(end)!;
      this.#byEnd.delete(end);
      // Spilling: the store may hold these windows too (until their tombstones are written).
      const start = end - this.#c.sizeMs;
      let fromMemory: Set<string> | undefined;
      if (spill !== undefined && this.#coldStarts.has(start)) {
        if (!this.#firing.has(start)) this.#firing.set(start, { after: undefined, fromMemory: new Set() });
        fromMemory = this.#firing.get(start)!.fromMemory;
      }
      for (const w of windows.values()) {
        out.push(this.#result(w, end));
        this.state.removed(w);
        fromMemory?.add(w.key);
      }
      this.#count -= windows.size;
    }
    if (fired > 0) this.#ends = this.#ends.slice(fired);
    if (spill !== undefined) this.#fireStored(out, FIRE_BUDGET);
    // emit = "update": each change went out when it happened; closing only forgets the window.
    return this.#c.update ? [] : out;
  }

  read(group: readonly unknown[]): Row[] {
    this.state.ready();
    const id = this.#c.group.idOf(group);
    const found: Window[] = [];
    let text: string | undefined;
    for (const end of this.#ends) {
      const windows = this.#byEnd.get(end)!;
      let w = windows.get(id);
      const held = w === undefined ? this.#undecoded.get(end - this.#c.sizeMs) : undefined;
      if (held !== undefined) w = this.#take(end - this.#c.sizeMs, held, `w:${end - this.#c.sizeMs}:${(text ??= this.#c.group.textOf(group))}`, windows);
      if (w !== undefined) found.push(w);
    }
    // Spilling: the group's windows of stored starts that are not in memory.
    if (this.#spill !== undefined) {
      for (const start of this.#coldStarts) {
        if (this.#byEnd.get(start + this.#c.sizeMs)?.has(id)) continue;
        const key = `w:${start}:${this.#c.group.textOf(group)}`;
        const value = this.#spill.source.get(key);
        if (value !== undefined && this.#storedLive(key, start)) found.push(this.#spill.decode(key, value, this.#decoder));
      }
      found.sort((a, b) => a.start - b.start);
    }
    return found.map((w) => this.#result(w, w.start + this.#c.sizeMs));
  }

  *groups(): Iterable<readonly unknown[]> {
    this.state.ready();
    this.#decodeAll();
    const seen = new Set<unknown>();
    for (const w of this.#live()) {
      if (seen.has(w.id)) continue;
      seen.add(w.id);
      yield w.group;
    }
    for (const w of this.#stored()) {
      if (seen.has(w.id)) continue;
      seen.add(w.id);
      yield w.group;
    }
  }

  override stateKeys(): number {
    this.state.ready();
    return this.#spill === undefined ? this.#count : this.stateSize().keys;
  }

  stateSize(): { keys: number; bytes: number } {
    this.state.ready();
    const spill = this.#spill;
    let bytes = 0;
    // Spilling: windows in memory the store does not hold yet.
    let unstored = 0;
    // Plain loops, not #live(): this runs at every checkpoint over everything in memory.
    for (const end of this.#ends) {
      for (const w of this.#byEnd.get(end)!.values()) {
        bytes += 96 + 4 * w.key.length + this.#c.aggs.bytes(w.acc);
        if (spill !== undefined && !spill.isStored(w)) unstored++;
      }
    }
    bytes += this.#undecodedBytes;
    return { keys: spill === undefined ? this.#count : spill.source.keys + unstored, bytes };
  }

  /** Spilling: whether a stored window (not in memory) is live: its start not fired, or not this key yet. */
  #storedLive(key: string, start: number): boolean {
    if (!this.#coldStarts.has(start)) return false;
    const firing = this.#firing.get(start);
    return firing === undefined || !((firing.after !== undefined && key <= firing.after) || firing.fromMemory.has(key));
  }

  /** Spilling: the live windows in the store and not in memory, decoded. */
  *#stored(): Iterable<Window> {
    const spill = this.#spill;
    if (spill === undefined) return;
    const resident = new Set<string>();
    for (const w of this.#live()) resident.add(w.key);
    for (const start of [...this.#coldStarts].sort((a, b) => a - b)) {
      for (const { key, value } of spill.source.prefixed(`w:${start}:`)) {
        if (!resident.has(key) && this.#storedLive(key, start)) yield spill.decode(key, value, this.#decoder);
      }
    }
  }

  #add(start: number, id: unknown, row: Row, time: number): Window {
    const end = start + this.#c.sizeMs;
    let windows = this.#byEnd.get(end);
    if (windows === undefined) windows = this.#openEnd(end);
    let w = windows.get(id);
    if (w === undefined && this.#undecoded.size > 0) {
      const held = this.#undecoded.get(start);
      if (held !== undefined) w = this.#take(start, held, `w:${start}:${this.#c.group.textOf(this.#c.group.values(row))}`, windows);
    }
    if (w === undefined && this.#spill !== undefined && this.#coldStarts.has(start)) {
      w = this.#fetch(start, this.#c.group.values(row));
      if (w !== undefined) windows.set(id, w), this.#count++;
    } else if (w !== undefined && this.#spill !== undefined) {
      this.#spill.hits++;
      w.hot = true;
    }
    if (w === undefined) {
      const acc = this.#c.aggs.create();
      const group = this.#c.group.values(row);
      const key = `w:${start}:${this.#c.group.textOf(group)}`;
      w = { key, seq: this.state.nextSeq(), persisted: false, dirty: false, removed: false, drainedAt: 0, hot: false, inSource: false, start, id, group, acc };
      windows.set(id, w);
      this.#count++;
      this.state.created(w);
    } else {
      this.state.touched(w);
    }
    this.#c.aggs.add(w.acc, this.#values, time);
    return w;
  }

  /** Spilling: the stored window of (start, group), not in memory; undefined when the store has none. */
  #fetch(start: number, group: readonly unknown[]): Window | undefined {
    return this.#spill!.fetch(`w:${start}:${this.#c.group.textOf(group)}`, this.#decoder);
  }

  readonly #decoder = (r: StateReader, value: unknown) => this.#decode(r, value);

  spill(source: StateSource, cacheKeys: number, options: { resident?: boolean } = {}): boolean {
    this.state.ready();
    if (options.resident) this.#releaseUndecoded();
    this.#decodeAll();
    this.#spill = new Spill(OP, source, cacheKeys);
    this.state.stampDrains = true;
    if (options.resident) {
      // Every live window is in memory but those let go of undecoded: no other start is cold. (The
      // source may still hold windows fired since the restore, until their tombstones land: never
      // read, as their starts are closed.)
      // Pinned until the source has every drain so far: one taken before now carried no stamp.
      // Counted as stored (stateSize) once in the changelog: the store has them, or will once the
      // writes under way land.
      for (const w of this.#live()) {
        w.drainedAt = this.state.drains;
        w.inSource = w.persisted;
      }
      return true;
    }
    // Every window start the store holds, one cursor seek per start (keys sort by start's text).
    for (let key = source.firstKeyFrom("w:"); key !== undefined && key.startsWith("w:");) {
      const colon = key.indexOf(":", 2);
      const start = Number(key.slice(2, colon));
      if (colon < 0 || !Number.isFinite(start)) new StateReader(OP, key).fail("the key is not w:<start>:<group>");
      this.#coldStarts.add(start);
      key = source.firstKeyFrom(`w:${key.slice(2, colon)};`);
    }
    return true;
  }

  settled(drains: number): void {
    const spill = this.#spill;
    if (spill === undefined) return;
    if (drains > spill.settledDrains) spill.settledDrains = drains;
    if (spill.excess(this.#count) === 0) return;
    spill.evict(this.#count, () => this.#live(), (w) => {
      this.#byEnd.get(w.start + this.#c.sizeMs)!.delete(w.id);
      this.#count--;
      this.#coldStarts.add(w.start);
    });
  }

  cacheStats(): CacheStats | undefined {
    return this.#spill?.stats(this.#count);
  }

  firing(): boolean {
    return this.#spill !== undefined && this.#coldDue();
  }

  /** Spilling: whether a stored start is due (its windows closed) and not fired yet. */
  #coldDue(): boolean {
    for (const start of this.#coldStarts) if (start + this.#c.sizeMs <= this.state.watermark) return true;
    return false;
  }

  /**
   * Spilling: fires the stored windows (not in memory) of due starts, oldest start first, at most
   * `budget` of them; the rest go at the next advance (late rows for them are refused meanwhile).
   */
  #fireStored(out: Row[], budget: number): void {
    const spill = this.#spill!;
    const due = [...this.#coldStarts].filter((s) => s + this.#c.sizeMs <= this.state.watermark).sort((a, b) => a - b);
    for (const start of due) {
      const firing = this.#firing.get(start) ?? { after: undefined, fromMemory: new Set<string>() };
      this.#firing.set(start, firing);
      const end = start + this.#c.sizeMs;
      for (const { key, value } of spill.source.prefixed(`w:${start}:`, firing.after)) {
        if (budget-- <= 0) return;
        firing.after = key;
        if (firing.fromMemory.has(key)) continue;
        const w = spill.decode(key, value, this.#decoder);
        out.push(this.#result(w, end));
        this.state.removed(w);
      }
      this.#coldStarts.delete(start);
      this.#firing.delete(start);
    }
  }

  /** Restored windows handed over undecoded (distinct keys): indexed by the start in their key, decoded on first use. */
  #loadUndecoded(entries: ReadonlyArray<{ readonly key: string; readonly value: RawState }>): void {
    // Keys of one start come in runs: its prefix is parsed and checked once per run.
    let prefix = "";
    let held: Map<string, RawState> | undefined;
    let bytes = 0;
    for (const { key, value: raw } of entries) {
      if (held === undefined || !key.startsWith(prefix)) {
        const colon = key.indexOf(":", 2);
        const start = colon > 2 && key.startsWith("w:") ? Number(key.slice(2, colon)) : NaN;
        // As the window's own key is written (a start in another form would never be found by a row).
        if (!Number.isFinite(start) || String(start) !== key.slice(2, colon)) new StateReader(OP, key).fail("the key is not w:<start>:<group>");
        // What the window's own decode checks: caught at the restore, as when every value is decoded.
        if (tumblingStart(start, this.#c.slideMs) !== start) {
          new StateReader(OP, key).fail(`window start ${start} is not a multiple of slideMs ${this.#c.slideMs}: was the step's windowMs or slideMs changed?`);
        }
        prefix = key.slice(0, colon + 1);
        held = this.#undecoded.get(start);
        if (held === undefined) {
          this.#undecoded.set(start, (held = new Map()));
          const end = start + this.#c.sizeMs;
          if (!this.#byEnd.has(end)) this.#openEnd(end);
          this.#unsorted.add(end);
        }
      }
      held.set(key, raw);
      bytes += heldBytes(key, raw);
    }
    this.#count += entries.length;
    this.#undecodedBytes += bytes;
  }

  /** The held window of `key` (start `start`), decoded into `windows`; undefined when none is held. */
  #take(start: number, held: Map<string, RawState>, key: string, windows: Map<unknown, Window>): Window | undefined {
    const raw = held.get(key);
    if (raw === undefined) return undefined;
    // Decoded before it leaves the index: a value that does not decode stays there, and fails
    // again at every use (a state read's caller gets the error; the loop fails on it).
    const r = new StateReader(OP, key);
    const w = this.#decode(r, raw.parse());
    if (w.key !== key) r.fail(`the value belongs to key ${JSON.stringify(w.key)}`);
    held.delete(key);
    this.#undecodedBytes -= heldBytes(key, raw);
    if (held.size === 0) this.#undecoded.delete(start);
    windows.set(w.id, w);
    return w;
  }

  /** The windows of `end` all decoded, in arrival order. */
  #settle(end: number): void {
    const start = end - this.#c.sizeMs;
    const windows = this.#byEnd.get(end)!;
    const held = this.#undecoded.get(start);
    if (held !== undefined) for (const key of [...held.keys()]) this.#take(start, held, key, windows);
    const sorted = [...windows.values()].sort((a, b) => a.seq - b.seq);
    windows.clear();
    for (const w of sorted) windows.set(w.id, w);
    this.#unsorted.delete(end);
  }

  /**
   * A resident spill (the store now holds what was restored): the held windows never used since
   * the restore leave memory undecoded, their starts cold. Each is in the store as it was restored,
   * and nothing changed it since, so no drain has to land first. (The #decodeAll after it puts
   * the windows left of their ends in arrival order.)
   */
  #releaseUndecoded(): void {
    for (const [start, held] of this.#undecoded) {
      this.#count -= held.size;
      this.#coldStarts.add(start);
    }
    this.#undecoded.clear();
    this.#undecodedBytes = 0;
  }

  /** Every held window decoded (a snapshot, a walk over all groups). */
  #decodeAll(): void {
    for (const end of [...this.#unsorted]) this.#settle(end);
  }

  #openEnd(end: number): Map<unknown, Window> {
    const windows = new Map<unknown, Window>();
    this.#byEnd.set(end, windows);
    const ends = this.#ends;
    let i = ends.length;
    while (i > 0 && ends[i - 1]! > end) i--;
    ends.splice(i, 0, end);
    return windows;
  }

  #insert(w: Window): void {
    const end = w.start + this.#c.sizeMs;
    const windows = this.#byEnd.get(end) ?? this.#openEnd(end);
    windows.set(w.id, w);
    this.#count++;
  }

  *#live(): Iterable<Window> {
    for (const end of this.#ends) yield* this.#byEnd.get(end)!.values();
  }

  #result(w: Window, end: number): Row {
    const out: Row = { windowStart: w.start, windowEnd: end };
    writeGroup(out, this.#c.group.columns, w.group);
    this.#c.aggs.results(w.acc, out);
    return out;
  }

  #decode(r: StateReader, value: unknown): Window {
    const o = r.object(value, "a window");
    const start = r.number(o.start, "start");
    if (tumblingStart(start, this.#c.slideMs) !== start) {
      r.fail(`window start ${start} is not a multiple of slideMs ${this.#c.slideMs}: was the step's windowMs or slideMs changed?`);
    }
    const group = readGroup(r, o.group, this.#c.group);
    return {
      key: `w:${start}:${this.#c.group.textOf(group)}`,
      seq: r.integer(o.seq, "seq"),
      persisted: true, dirty: false, removed: false, drainedAt: 0, hot: false, inSource: false,
      start,
      id: this.#c.group.idOf(group),
      group,
      acc: this.#c.aggs.decode(r, o.acc),
    };
  }
}
