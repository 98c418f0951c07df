import * as v from "valibot";
import { FvError } from "../errors.ts";
import type { Row } from "../expr/index.ts";
import { checkEventTime } from "./event-time.ts";
import { type GroupKey, groupKey, readGroup, writeGroup } from "./group-key.ts";
import { MinHeap } from "./min-heap.ts";
import { type CompiledOperator, NO_OUTPUT, type OperatorContext, type OperatorOutput } from "./operator.ts";
import { type Entity, OperatorState, StatefulOperator } from "./operator-state.ts";
import { approxBytes, type StateReader } from "./state-values.ts";
import { allowedLatenessMs, checkDistinctColumns, checkInputs, columnName, groupBy, groupByColumns, groupedOperator, invalidStep, milliseconds, rowCount, timeColumn } from "./step-fields.ts";
import { tumblingStart } from "./time-windows.ts";

export const topNSchema = v.strictObject({
  op: v.literal("topN"),
  timeColumn,
  n: rowCount,
  /** The numeric column rows are ranked by. */
  by: columnName,
  /** "desc" (default): highest first. "asc": lowest first. */
  order: v.optional(v.picklist(["desc", "asc"], 'order is "desc" or "asc"'), "desc"),
  groupBy,
  /** Per tumbling window, fired once at its close. Absent: a running ranking, emitted on every change. */
  windowMs: v.optional(milliseconds("windowMs", 1)),
  allowedLatenessMs,
  /** Running ranking only: the output column holding the ranked rows (default "top"). */
  alias: v.optional(columnName),
  /** Running ranking only: forget a group when the watermark is this far past its latest row. */
  expireAfterMs: v.optional(milliseconds("expireAfterMs", 1)),
  /** Windowed: "final" (default) at the window's close, or "update": the window's ranking at each change. */
  emit: v.optional(v.picklist(["final", "update"], 'emit is "final" (the ranking when the window closes) or "update" (the ranking at every change)')),
});

export type TopNDef = v.InferOutput<typeof topNSchema>;

const OP = "topN";

/**
 * `{ op = "topN", timeColumn = "ts", n = 3, by = "score", groupBy = ["game"] }`: the n best rows
 * per group. With windowMs: per tumbling window, n rows with a `rank` column at the window's
 * close. Without: one row `{ <groupBy>, top: [...] }` each time the ranking changes. Ties: the
 * earlier arrival ranks higher.
 *
 * @example
 * const op = compileTopN({ op: "topN", timeColumn: "ts", n: 2, by: "score", order: "desc", groupBy: [], allowedLatenessMs: 0 }, { stage: 0, step: 0, inputs: 1 }).create();
 * op.process({ ts: 1, score: 5 }, 1, 0).rows; // [{ top: [{ ts: 1, score: 5 }] }]
 */
export function compileTopN(def: TopNDef, ctx: OperatorContext): CompiledOperator {
  checkInputs(OP, ctx, "one or more");
  const windowed = def.windowMs !== undefined;
  if (windowed && def.alias !== undefined) throw invalidStep(OP, ctx, "alias", "a windowed topN emits one row per rank, not a list: leave alias out");
  if (windowed && def.expireAfterMs !== undefined) throw invalidStep(OP, ctx, "expireAfterMs", "a windowed topN forgets each window when it fires: leave expireAfterMs out");
  if (!windowed && def.emit === "final") throw invalidStep(OP, ctx, "emit", "a running topN (no windowMs) has no window to close: it emits the ranking at every change; leave emit out, or set windowMs");
  const alias = def.alias ?? "top";
  if (!windowed) {
    checkDistinctColumns(OP, ctx, [...groupByColumns(def.groupBy), { name: alias, field: "alias" }]);
  }
  const config: TopNConfig = {
    n: def.n,
    by: def.by,
    descending: def.order === "desc",
    group: groupKey(def.groupBy),
    windowMs: def.windowMs,
    alias,
    expireAfterMs: def.expireAfterMs,
    update: windowed && def.emit === "update",
  };
  return groupedOperator(OP, def, ctx, () => new TopN(config));
}

interface TopNConfig {
  n: number;
  by: string;
  descending: boolean;
  group: GroupKey;
  windowMs: number | undefined;
  alias: string;
  expireAfterMs: number | undefined;
  /** Windowed, emit = "update": the window's ranking at each change, nothing at close. */
  update: boolean;
}

interface Ranked {
  value: number;
  seq: number;
  row: Row;
  bytes: number;
}

/** One group's ranking (in one window, when windowed). Key: `w:<start>:<group key JSON>`, or `g:<group key JSON>`. */
interface Ranking extends Entity {
  readonly group: unknown[];
  /** Window start, or null for a running ranking. */
  readonly start: number | null;
  /** Best first, at most n. */
  rows: Ranked[];
  /** Running ranking: the latest event time seen, for expireAfterMs. */
  latest: number;
  bytes: number;
}

interface Timer {
  at: number;
  seq: number;
  ranking: Ranking;
}

class TopN extends StatefulOperator<Ranking> {
  readonly #c: TopNConfig;
  protected readonly state: OperatorState<Ranking>;
  readonly #rankings = new Map<string, Ranking>();
  /** Windowed: window closes. Running with expireAfterMs: expiries (stale ones skipped). Ties fire in arrival order. */
  readonly #timers = new MinHeap<Timer>((a, b) => a.at < b.at || (a.at === b.at && a.seq < b.seq));

  constructor(config: TopNConfig) {
    super();
    this.#c = config;
    this.state = new OperatorState<Ranking>(OP, {
      decode: (r, value) => this.#decode(r, value),
      encode: (k) => ({
        start: k.start,
        group: k.group,
        seq: k.seq,
        latest: k.latest,
        rows: k.rows.map((x) => ({ value: x.value, seq: x.seq, row: x.row })),
      }),
      clear: () => {
        this.#rankings.clear();
        this.#timers.clear();
      },
      load: (rankings) => {
        for (const k of rankings) {
          this.#rankings.set(k.key, k);
          this.#setTimer(k);
        }
      },
      live: () => this.#rankings.values(),
    });
  }

  process(row: Row, eventTime: number, _input: number): OperatorOutput {
    this.state.begin();
    checkEventTime(eventTime);
    const { by, windowMs } = this.#c;
    const value = row[by];
    // 1. A row without a value to rank by is skipped (as aggregates skip null); a non-number is poison.
    if (value === null || value === undefined) return NO_OUTPUT;
    if (typeof value !== "number" || !Number.isFinite(value)) {
      throw new FvError("POISON_ROW", `topN ranks by column "${by}", which needs a finite number, got ${typeof value} ${JSON.stringify(value)}`, {
        context: { reason: "type_error", field: by },
      });
    }
    // 2. Find (or open) the group's ranking; a windowed row whose window closed is late.
    let start: number | null = null;
    if (windowMs !== undefined) {
      start = tumblingStart(eventTime, windowMs);
      if (start + windowMs <= this.state.watermark) return { rows: [], late: [row] };
    }
    const group = this.#c.group.values(row);
    const gk = this.#c.group.textOf(group);
    const key = start === null ? `g:${gk}` : `w:${start}:${gk}`;
    let ranking = this.#rankings.get(key);
    const isNew = ranking === undefined;
    if (ranking === undefined) {
      ranking = { key, seq: this.state.nextSeq(), persisted: false, dirty: false, removed: false, group, start, rows: [], latest: eventTime, bytes: 96 + 2 * key.length };
      this.#rankings.set(key, ranking);
      this.state.created(ranking);
      if (start !== null) this.#setTimer(ranking);
    }
    // 3. Running rankings with expireAfterMs remember the latest row's time.
    let changed = false;
    if (this.#c.expireAfterMs !== undefined && (isNew || eventTime > ranking.latest)) {
      ranking.latest = eventTime;
      this.#setTimer(ranking);
      changed = true;
    }
    // 4. Rank the row: it enters when it beats the n-th (ties keep the earlier arrival).
    const entered = this.#rank(ranking, value, row);
    if (entered || changed) {
      if (!isNew) this.state.touched(ranking);
    }
    if (!entered) return NO_OUTPUT;
    if (start !== null) return this.#c.update ? { rows: this.#windowRows(ranking), late: [] } : NO_OUTPUT;
    return { rows: [this.#update(ranking)], late: [] };
  }

  advance(watermark: number): Row[] {
    this.state.begin();
    if (!this.state.advanceTo(watermark)) return [];
    const out: Row[] = [];
    const { windowMs, expireAfterMs } = this.#c;
    for (let t = this.#timers.peek(); t !== undefined && t.at <= watermark; t = this.#timers.peek()) {
      this.#timers.pop();
      const k = t.ranking;
      if (this.#rankings.get(k.key) !== k) continue;
      if (k.start !== null) {
        // emit = "update": each change went out when it happened; closing only forgets the window.
        if (!this.#c.update) out.push(...this.#windowRows(k));
      } else if (k.latest + expireAfterMs! !== t.at) {
        continue;
      }
      this.#rankings.delete(k.key);
      this.state.removed(k);
    }
    return out;
  }

  read(group: readonly unknown[]): Row[] {
    this.state.ready();
    const gk = this.#c.group.textOf(group);
    if (this.#c.windowMs === undefined) {
      const k = this.#rankings.get(`g:${gk}`);
      return k === undefined ? [] : [this.#update(k)];
    }
    // Windowed: the rows each open window of the group would emit if it closed now, oldest window first.
    const open = [...this.#rankings.values()].filter((k) => k.start !== null && k.key === `w:${k.start}:${gk}`).sort((a, b) => a.start! - b.start!);
    return open.flatMap((k) => this.#windowRows(k));
  }

  /** A window's ranking as rows: each ranked row with windowStart, windowEnd and rank. */
  #windowRows(k: Ranking): Row[] {
    const end = k.start! + this.#c.windowMs!;
    return k.rows.map((x, i) => ({ ...x.row, windowStart: k.start, windowEnd: end, rank: i + 1 }));
  }

  *groups(): Iterable<readonly unknown[]> {
    this.state.ready();
    const seen = new Set<string>();
    for (const k of this.#rankings.values()) {
      const gk = this.#c.group.textOf(k.group);
      if (seen.has(gk)) continue;
      seen.add(gk);
      yield k.group;
    }
  }

  override stateKeys(): number {
    this.state.ready();
    return this.#rankings.size;
  }

  stateSize(): { keys: number; bytes: number } {
    this.state.ready();
    let bytes = 0;
    for (const k of this.#rankings.values()) bytes += k.bytes;
    return { keys: this.#rankings.size, bytes };
  }

  /** Puts the row in its place when it makes the top n; true when the ranking changed. */
  #rank(ranking: Ranking, value: number, row: Row): boolean {
    const { n, descending } = this.#c;
    const rows = ranking.rows;
    // Strictly better only: an equal value arrived later, so it ranks below.
    const beats = (x: Ranked) => descending ? value > x.value : value < x.value;
    if (rows.length === n && !beats(rows[n - 1]!)) return false;
    let at = rows.length;
    while (at > 0 && beats(rows[at - 1]!)) at--;
    const copy = { ...row };
    const entry: Ranked = { value, seq: this.state.nextSeq(), row: copy, bytes: 48 + approxBytes(copy) };
    rows.splice(at, 0, entry);
    ranking.bytes += entry.bytes;
    if (rows.length > n) ranking.bytes -= rows.pop()!.bytes;
    return true;
  }

  #update(k: Ranking): Row {
    const out: Row = {};
    writeGroup(out, this.#c.group.columns, k.group);
    out[this.#c.alias] = k.rows.map((x) => x.row);
    return out;
  }

  #setTimer(k: Ranking): void {
    if (k.start !== null) this.#timers.push({ at: k.start + this.#c.windowMs!, seq: k.seq, ranking: k });
    else if (this.#c.expireAfterMs !== undefined) this.#timers.push({ at: k.latest + this.#c.expireAfterMs, seq: k.seq, ranking: k });
  }

  #decode(r: StateReader, value: unknown): Ranking {
    const o = r.object(value, "a ranking");
    const windowed = this.#c.windowMs !== undefined;
    const start = windowed ? r.number(o.start, "start") : o.start === null ? null : r.fail("a running topN has no window start: was windowMs added?");
    if (start !== null && tumblingStart(start, this.#c.windowMs!) !== start) r.fail(`window start ${start} is not a multiple of windowMs: was windowMs changed?`);
    const group = readGroup(r, o.group, this.#c.group);
    const gk = this.#c.group.textOf(group);
    const rows = r.list(o.rows, "rows").map((raw): Ranked => {
      const x = r.object(raw, "a ranked row");
      const row = r.row(x.row, "row");
      return { value: r.number(x.value, "value"), seq: r.integer(x.seq, "row seq"), row, bytes: 48 + approxBytes(row) };
    });
    if (rows.length > this.#c.n) r.fail(`holds ${rows.length} rows, more than n = ${this.#c.n}`);
    return {
      key: start === null ? `g:${gk}` : `w:${start}:${gk}`,
      seq: r.integer(o.seq, "seq"),
      persisted: true, dirty: false, removed: false,
      group,
      start,
      rows,
      latest: r.number(o.latest, "latest"),
      bytes: 96 + 2 * (gk.length + 16) + rows.reduce((sum, x) => sum + x.bytes, 0),
    };
  }
}
