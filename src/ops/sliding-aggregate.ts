/**
 * `windowedAggregate` with `sliding = true`: Kafka Streams' SlidingWindows. A window is
 * `[start, start + windowMs]` (both ends included) and exists for each distinct set of a group's
 * rows that fits in windowMs: each row `t` ends one window (`[t − windowMs, t]`, its left window)
 * and starts one after it (`[t + 1, t + 1 + windowMs]`, its right window, when some row falls in
 * it). Windows with the same start are one window. Not hopping windows with a small slide: no
 * empty window, and no window whose rows another window already holds at the same start.
 *
 * State: the rows of the last windowMs (+ 1) per group (their aggregate inputs and event time),
 * each its own changelog entry `r:<seq>`. A window's aggregates are computed from them when it is
 * emitted: at close (`emit = "final"`, when the watermark passes its end) or at each change
 * (`emit = "update"`).
 */
import type { Row } from "../expr/index.ts";
import type { Aggregates } from "./aggregates.ts";
import { checkEventTime } from "./event-time.ts";
import { type GroupKey, readGroup, writeGroup } from "./group-key.ts";
import { MinHeap } from "./min-heap.ts";
import { NO_OUTPUT, type OperatorOutput } from "./operator.ts";
import { type Entity, OperatorState, StatefulOperator } from "./operator-state.ts";
import { approxBytes, type StateReader } from "./state-values.ts";

const OP = "windowedAggregate";

export interface SlidingConfig {
  sizeMs: number;
  aggs: Aggregates;
  group: GroupKey;
  update: boolean;
}

/** One buffered row of a group. Key: `r:<seq>`. */
interface Buffered extends Entity {
  readonly time: number;
  /** The group's in-memory identity (see GroupKey.idOf), and its values. */
  readonly id: unknown;
  readonly group: unknown[];
  /** The row's aggregate inputs, as Aggregates.read gave them. */
  readonly values: unknown[];
}

/** A group's buffered rows, sorted by event time, then arrival. */
interface Group {
  readonly group: unknown[];
  rows: Buffered[];
}

/** When something happens to a row: its left window closes (`time`), or its right window closes and it leaves (`time + windowMs + 1`). */
interface Timer {
  at: number;
  seq: number;
  row: Buffered;
}

export class SlidingAggregate extends StatefulOperator<Buffered> {
  readonly #c: SlidingConfig;
  protected readonly state: OperatorState<Buffered>;
  readonly #groups = new Map<unknown, Group>();
  readonly #timers = new MinHeap<Timer>((a, b) => a.at < b.at || (a.at === b.at && a.seq < b.seq));
  #count = 0;

  constructor(config: SlidingConfig) {
    super();
    this.#c = config;
    this.state = new OperatorState<Buffered>(OP, {
      decode: (r, value) => this.#decode(r, value),
      encode: (b) => ({ time: b.time, seq: b.seq, group: b.group, values: b.values }),
      clear: () => {
        this.#groups.clear();
        this.#timers.clear();
        this.#count = 0;
      },
      load: (rows) => {
        for (const b of rows) this.#insert(b);
      },
      live: () => this.#live(),
    });
  }

  process(row: Row, eventTime: number, _input: number): OperatorOutput {
    this.state.begin();
    checkEventTime(eventTime);
    const { aggs, group } = this.#c;
    // 1. Read and check every aggregate input, so a poison row changes nothing.
    const values = new Array<unknown>(aggs.size);
    aggs.read(row, values);
    // A missing column is skipped like null; kept as null, so the state stays JSON.
    for (let i = 0; i < values.length; i++) if (values[i] === undefined) values[i] = null;
    // 2. Late when its own (left) window has closed: the windows it would change are emitted.
    if (eventTime < this.state.watermark) return { rows: [], late: [row] };
    const groupValues = group.values(row);
    const seq = this.state.nextSeq();
    const b: Buffered = { key: `r:${seq}`, seq, persisted: false, dirty: false, removed: false, time: eventTime, id: group.idOf(groupValues), group: groupValues, values };
    this.#insert(b);
    this.state.created(b);
    if (!this.#c.update) return NO_OUTPUT;
    // 3. emit = "update": every window the row changed (or made), by start.
    return { rows: this.#changed(this.#groups.get(b.id)!, eventTime), late: [] };
  }

  advance(watermark: number): Row[] {
    this.state.begin();
    const from = this.state.watermark;
    if (!this.state.advanceTo(watermark)) return [];
    const until = this.state.watermark;
    const { sizeMs } = this.#c;
    // 1. The timers below the new watermark: a row's left window closes (at its time), or its
    //    right window closes and it leaves (at time + windowMs + 1). The candidate starts per group.
    const touched = new Map<Group, Set<number>>();
    for (let t = this.#timers.peek(); t !== undefined && t.at < until; t = this.#timers.peek()) {
      this.#timers.pop();
      const b = t.row;
      if (b.removed) continue;
      const g = this.#groups.get(b.id)!;
      let starts = touched.get(g);
      if (starts === undefined) touched.set(g, (starts = new Set()));
      if (this.#c.update) continue;
      if (t.at === b.time) starts.add(b.time - sizeMs);
      else if (this.#countIn(g, b.time + 1, b.time + 1 + sizeMs) > 0) starts.add(b.time + 1);
    }
    // 2. emit = "final": the windows that close now (their end in [from, until)), by end.
    const out: Array<{ end: number; start: number; first: number; row: Row }> = [];
    for (const [g, starts] of touched) {
      const first = g.rows[0]!.seq;
      for (const start of starts) if (start + sizeMs >= from) out.push({ end: start + sizeMs, start, first, row: this.#result(g, start) });
    }
    out.sort((a, b) => a.end - b.end || a.start - b.start || a.first - b.first);
    // 3. Rows whose last window has closed leave: a prefix of each group's rows (sorted by time).
    for (const g of touched.keys()) {
      let leaving = 0;
      while (leaving < g.rows.length && g.rows[leaving]!.time + sizeMs + 1 < until) {
        this.state.removed(g.rows[leaving]!);
        leaving++;
      }
      this.#count -= leaving;
      if (leaving > 0) g.rows = g.rows.slice(leaving);
      if (g.rows.length === 0) this.#groups.delete(this.#c.group.idOf(g.group));
    }
    return out.map((o) => o.row);
  }

  read(group: readonly unknown[]): Row[] {
    this.state.ready();
    const g = this.#groups.get(this.#c.group.idOf(group));
    if (g === undefined) return [];
    // The open windows of the group: each row's left window and non-empty right window not closed yet.
    const starts = new Set<number>();
    for (const b of g.rows) {
      if (b.time >= this.state.watermark) starts.add(b.time - this.#c.sizeMs);
      if (this.#countIn(g, b.time + 1, b.time + 1 + this.#c.sizeMs) > 0) starts.add(b.time + 1);
    }
    return [...starts].sort((a, b) => a - b).map((start) => this.#result(g, start));
  }

  *groups(): Iterable<readonly unknown[]> {
    this.state.ready();
    for (const g of this.#groups.values()) yield g.group;
  }

  override stateKeys(): number {
    this.state.ready();
    return this.#count;
  }

  stateSize(): { keys: number; bytes: number } {
    this.state.ready();
    let bytes = 0;
    for (const g of this.#groups.values()) for (const b of g.rows) bytes += 96 + approxBytes(b.values);
    return { keys: this.#count, bytes };
  }

  *#live(): Iterable<Buffered> {
    for (const g of this.#groups.values()) yield* g.rows;
  }

  /** Adds a row to its group, in (time, arrival) order, with its two timers. */
  #insert(b: Buffered): void {
    let g = this.#groups.get(b.id);
    if (g === undefined) this.#groups.set(b.id, (g = { group: b.group, rows: [] }));
    const rows = g.rows;
    let at = rows.length;
    while (at > 0 && (rows[at - 1]!.time > b.time || (rows[at - 1]!.time === b.time && rows[at - 1]!.seq > b.seq))) at--;
    rows.splice(at, 0, b);
    this.#count++;
    this.#timers.push({ at: b.time, seq: b.seq, row: b });
    this.#timers.push({ at: b.time + this.#c.sizeMs + 1, seq: b.seq, row: b });
  }

  /** The group's rows with from ≤ time ≤ to, in (time, arrival) order (a binary search, then a walk). */
  #rowsIn(g: Group, from: number, to: number): Buffered[] {
    const rows = g.rows;
    const out: Buffered[] = [];
    for (let i = lowerBound(rows, from); i < rows.length && rows[i]!.time <= to; i++) out.push(rows[i]!);
    return out;
  }

  #countIn(g: Group, from: number, to: number): number {
    const rows = g.rows;
    let n = 0;
    for (let i = lowerBound(rows, from); i < rows.length && rows[i]!.time <= to; i++) n++;
    return n;
  }

  /** The windows a row at `t` changed or made: its left and right windows, and those of the rows around it that hold it. */
  #changed(g: Group, t: number): Row[] {
    const size = this.#c.sizeMs;
    const starts = new Set<number>([t - size]);
    if (this.#countIn(g, t + 1, t + 1 + size) > 0) starts.add(t + 1);
    for (const b of g.rows) {
      if (b.time > t && b.time <= t + size) starts.add(b.time - size);
      if (b.time < t && b.time >= t - size - 1) starts.add(b.time + 1);
    }
    return [...starts].sort((a, b) => a - b).map((start) => this.#result(g, start));
  }

  /** The window [start, start + size] of a group, aggregated over its rows in arrival order. */
  #result(g: Group, start: number): Row {
    const end = start + this.#c.sizeMs;
    const aggs = this.#c.aggs;
    const rows = this.#rowsIn(g, start, end);
    if (aggs.arrivalOrdered) rows.sort((a, b) => a.seq - b.seq);
    const acc = aggs.create();
    for (const b of rows) aggs.add(acc, b.values, b.time);
    const out: Row = { windowStart: start, windowEnd: end };
    writeGroup(out, this.#c.group.columns, g.group);
    aggs.results(acc, out);
    return out;
  }

  #decode(r: StateReader, value: unknown): Buffered {
    if (!r.key.startsWith("r:")) r.fail("the key is not r:<seq>");
    const o = r.object(value, "a buffered row");
    const group = readGroup(r, o.group, this.#c.group);
    const values = r.list(o.values, "values");
    if (values.length !== this.#c.aggs.size) r.fail(`values has ${values.length} entries, the step has ${this.#c.aggs.size} aggregates: was aggs changed?`);
    const seq = r.integer(o.seq, "seq");
    if (seq < 0 || r.key !== `r:${seq}`) r.fail(`seq ${seq} does not match the key`);
    return { key: r.key, seq, persisted: true, dirty: false, removed: false, time: r.number(o.time, "time"), id: this.#c.group.idOf(group), group, values };
  }
}

/** The first index whose row is at `time` or later. */
function lowerBound(rows: readonly Buffered[], time: number): number {
  let lo = 0;
  let hi = rows.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (rows[mid]!.time < time) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
