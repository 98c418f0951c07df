import * as v from "valibot";
import type { Row } from "../expr/index.ts";
import { checkEventTime } from "./event-time.ts";
import { type GroupKey, groupKey, readGroup, writeGroup } from "./group-key.ts";
import { MinHeap } from "./min-heap.ts";
import type { CacheStats, CompiledOperator, OperatorContext, OperatorOutput, StateSource } from "./operator.ts";
import { OperatorState, StatefulOperator } from "./operator-state.ts";
import { Spill, type SpillEntity } from "./spill.ts";
import { approxBytes, type StateReader } from "./state-values.ts";
import { allowedLatenessMs, checkDistinctColumns, checkInputs, columnName, groupBy, groupByColumns, groupedOperator, milliseconds, rowCount, timeColumn } from "./step-fields.ts";

export const lastNSchema = v.strictObject({
  op: v.literal("lastN"),
  timeColumn,
  n: rowCount,
  /** Keep this column's values instead of whole rows. */
  column: v.optional(columnName),
  groupBy,
  /** The output column holding the list (default "last"). */
  alias: v.optional(columnName, "last"),
  allowedLatenessMs,
  /** Forget a group when the watermark is this far past its latest row. Absent: groups are kept for good. */
  expireAfterMs: v.optional(milliseconds("expireAfterMs", 1)),
});

export type LastNDef = v.InferOutput<typeof lastNSchema>;

const OP = "lastN";

/**
 * `{ op = "lastN", timeColumn = "ts", n = 3, column = "price", groupBy = ["sym"] }`: on every
 * row, the group's last n rows (or values of `column`) in arrival order, oldest first:
 * `{ sym: "A", last: [101, 102, 103] }`.
 *
 * @example
 * const op = compileLastN({ op: "lastN", timeColumn: "ts", n: 2, column: "px", groupBy: [], alias: "last", allowedLatenessMs: 0 }, { stage: 0, step: 0, inputs: 1 }).create();
 * op.process({ ts: 1, px: 5 }, 1, 0).rows; // [{ last: [5] }]
 */
export function compileLastN(def: LastNDef, ctx: OperatorContext): CompiledOperator {
  checkInputs(OP, ctx, "one or more");
  checkDistinctColumns(OP, ctx, [...groupByColumns(def.groupBy), { name: def.alias, field: "alias" }]);
  const config: LastNConfig = { n: def.n, column: def.column, group: groupKey(def.groupBy), alias: def.alias, expireAfterMs: def.expireAfterMs };
  return groupedOperator(OP, def, ctx, () => new LastN(config));
}

interface LastNConfig {
  n: number;
  column: string | undefined;
  group: GroupKey;
  alias: string;
  expireAfterMs: number | undefined;
}

/** One group's last n items, as a ring. Key: `g:<group key JSON>`. */
interface Recent extends SpillEntity {
  /** The group's in-memory identity (see GroupKey.idOf). */
  readonly id: unknown;
  readonly group: unknown[];
  readonly items: unknown[];
  readonly itemBytes: number[];
  /** Where the next item goes once `items` is full (it is also the oldest). */
  next: number;
  /** The latest event time seen, for expireAfterMs. */
  latest: number;
  bytes: number;
}

interface Timer {
  at: number;
  seq: number;
  recent: Recent;
}

class LastN extends StatefulOperator<Recent> {
  readonly #c: LastNConfig;
  protected readonly state: OperatorState<Recent>;
  readonly #groups = new Map<unknown, Recent>();
  /** Expiries, when expireAfterMs is set; a group that saw a later row leaves a stale one behind. */
  readonly #timers = new MinHeap<Timer>((a, b) => a.at < b.at || (a.at === b.at && a.seq < b.seq));
  /** Set while the state lives in a store (see `spill`); memory then holds a bounded part of it. */
  #spill: Spill | undefined;

  constructor(config: LastNConfig) {
    super();
    this.#c = config;
    this.state = new OperatorState<Recent>(OP, {
      decode: (r, value) => this.#decode(r, value),
      encode: (g) => ({ group: g.group, seq: g.seq, latest: g.latest, items: ordered(g.items, g.next) }),
      clear: () => {
        this.#groups.clear();
        this.#timers.clear();
      },
      load: (groups) => {
        for (const g of groups) {
          this.#groups.set(g.id, g);
          this.#setTimer(g);
        }
      },
      live: () => this.#spill === undefined ? this.#groups.values() : [...this.#groups.values(), ...this.#stored()],
    });
  }

  process(row: Row, eventTime: number, _input: number): OperatorOutput {
    this.state.begin();
    checkEventTime(eventTime);
    const { n, column } = this.#c;
    const id = this.#c.group.idOfRow(row);
    let g = this.#groups.get(id);
    if (g === undefined && this.#spill !== undefined) {
      g = this.#fetch(this.#c.group.values(row));
      if (g !== undefined) this.#groups.set(id, g);
    } else if (g !== undefined && this.#spill !== undefined) {
      this.#spill.hits++;
      g.hot = true;
    }
    if (g === undefined) {
      const group = this.#c.group.values(row);
      const key = `g:${this.#c.group.textOf(group)}`;
      g = { key, seq: this.state.nextSeq(), persisted: false, dirty: false, removed: false, drainedAt: 0, hot: false, inSource: false, id, group, items: [], itemBytes: [], next: 0, latest: eventTime, bytes: 96 + 2 * key.length };
      this.#groups.set(id, g);
      this.state.created(g);
      this.#setTimer(g);
    } else {
      this.state.touched(g);
      if (eventTime > g.latest) {
        g.latest = eventTime;
        this.#setTimer(g);
      }
    }
    // A copy of the row (the caller may reuse it), or the column's value (null when missing).
    const item = column === undefined ? { ...row } : row[column] ?? null;
    const bytes = 8 + approxBytes(item);
    if (g.items.length < n) {
      g.items.push(item);
      g.itemBytes.push(bytes);
    } else {
      g.bytes -= g.itemBytes[g.next]!;
      g.items[g.next] = item;
      g.itemBytes[g.next] = bytes;
      g.next = g.next + 1 === n ? 0 : g.next + 1;
    }
    g.bytes += bytes;
    const out: Row = {};
    writeGroup(out, this.#c.group.columns, g.group);
    out[this.#c.alias] = ordered(g.items, g.next);
    return { rows: [out], late: [] };
  }

  advance(watermark: number): Row[] {
    this.state.begin();
    if (!this.state.advanceTo(watermark)) return [];
    const expireAfterMs = this.#c.expireAfterMs;
    if (expireAfterMs === undefined) return [];
    for (let t = this.#timers.peek(); t !== undefined && t.at <= watermark; t = this.#timers.peek()) {
      this.#timers.pop();
      const g = t.recent;
      if (this.#groups.get(g.id) !== g || g.latest + expireAfterMs !== t.at) continue;
      this.#groups.delete(g.id);
      this.state.removed(g);
    }
    return [];
  }

  read(group: readonly unknown[]): Row[] {
    this.state.ready();
    let g = this.#groups.get(this.#c.group.idOf(group));
    if (g === undefined && this.#spill !== undefined) {
      const key = `g:${this.#c.group.textOf(group)}`;
      const value = this.#spill.source.get(key);
      if (value !== undefined) g = this.#spill.decode(key, value, this.#decoder);
    }
    if (g === undefined) return [];
    const out: Row = {};
    writeGroup(out, this.#c.group.columns, g.group);
    out[this.#c.alias] = ordered(g.items, g.next);
    return [out];
  }

  *groups(): Iterable<readonly unknown[]> {
    this.state.ready();
    for (const g of this.#groups.values()) yield g.group;
    for (const g of this.#stored()) yield g.group;
  }

  override stateKeys(): number {
    this.state.ready();
    return this.#spill === undefined ? this.#groups.size : this.stateSize().keys;
  }

  stateSize(): { keys: number; bytes: number } {
    this.state.ready();
    const spill = this.#spill;
    let bytes = 0;
    let unstored = 0;
    for (const g of this.#groups.values()) {
      bytes += g.bytes;
      if (spill !== undefined && !spill.isStored(g)) unstored++;
    }
    return { keys: spill === undefined ? this.#groups.size : spill.source.keys + unstored, bytes };
  }

  /**
   * State beyond memory (see Operator.spill). Not with expireAfterMs: its expiries are a timer per
   * group in memory.
   */
  spill(source: StateSource, cacheKeys: number, options: { resident?: boolean } = {}): boolean {
    if (this.#c.expireAfterMs !== undefined) return false;
    this.state.ready();
    this.#spill = new Spill(OP, source, cacheKeys);
    this.state.stampDrains = true;
    // Every group in memory: pinned until the source has every drain so far (those carried no stamp).
    // Counted as stored (stateSize) once in the changelog.
    if (options.resident) {
      for (const g of this.#groups.values()) {
        g.drainedAt = this.state.drains;
        g.inSource = g.persisted;
      }
    }
    return true;
  }

  settled(drains: number): void {
    const spill = this.#spill;
    if (spill === undefined) return;
    if (drains > spill.settledDrains) spill.settledDrains = drains;
    if (spill.excess(this.#groups.size) > 0) spill.evict(this.#groups.size, () => this.#groups.values(), (g) => this.#groups.delete(g.id));
  }

  cacheStats(): CacheStats | undefined {
    return this.#spill?.stats(this.#groups.size);
  }

  /** Spilling: the stored group, not in memory; undefined when the store has none. */
  #fetch(group: readonly unknown[]): Recent | undefined {
    return this.#spill!.fetch(`g:${this.#c.group.textOf(group)}`, this.#decoder);
  }

  readonly #decoder = (r: StateReader, value: unknown) => this.#decode(r, value);

  /** Spilling: the stored groups not in memory, decoded. */
  *#stored(): Iterable<Recent> {
    const spill = this.#spill;
    if (spill === undefined) return;
    for (const { key, value } of spill.source.prefixed("g:")) {
      const g = spill.decode(key, value, this.#decoder);
      if (!this.#groups.has(g.id)) yield g;
    }
  }

  #setTimer(g: Recent): void {
    if (this.#c.expireAfterMs !== undefined) this.#timers.push({ at: g.latest + this.#c.expireAfterMs, seq: g.seq, recent: g });
  }

  #decode(r: StateReader, value: unknown): Recent {
    const o = r.object(value, "a lastN group");
    const group = readGroup(r, o.group, this.#c.group);
    const items = r.list(o.items, "items");
    if (items.length > this.#c.n) r.fail(`holds ${items.length} items, more than n = ${this.#c.n}`);
    if (this.#c.column === undefined) items.forEach((item) => r.row(item, "an item"));
    const itemBytes = items.map((item) => 8 + approxBytes(item));
    const key = `g:${this.#c.group.textOf(group)}`;
    return {
      key,
      seq: r.integer(o.seq, "seq"),
      persisted: true, dirty: false, removed: false, drainedAt: 0, hot: false, inSource: false,
      id: this.#c.group.idOf(group),
      group,
      items: [...items],
      itemBytes,
      next: 0,
      latest: r.number(o.latest, "latest"),
      bytes: 96 + 2 * key.length + itemBytes.reduce((a, b) => a + b, 0),
    };
  }
}

/** A ring's items, oldest first. */
function ordered(items: readonly unknown[], next: number): unknown[] {
  return next === 0 ? items.slice() : [...items.slice(next), ...items.slice(0, next)];
}
