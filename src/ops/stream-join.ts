import * as v from "valibot";
import type { Row } from "../expr/index.ts";
import { checkEventTime } from "./event-time.ts";
import { type GroupKey, groupKey } from "./group-key.ts";
import { MinHeap } from "./min-heap.ts";
import { type CompiledOperator, NO_OUTPUT, type OperatorContext, type OperatorOutput } from "./operator.ts";
import { type Entity, OperatorState, StatefulOperator } from "./operator-state.ts";
import { approxBytes, type StateReader } from "./state-values.ts";
import { allowedLatenessMs, checkInputs, columnName, invalidStep, milliseconds, timeColumn } from "./step-fields.ts";

const keyColumns = v.union(
  [columnName, v.pipe(v.array(columnName), v.minLength(1, "list at least one key column"))],
  "a join key is a column name or a list of them",
);

export const streamJoinSchema = v.strictObject({
  op: v.literal("streamJoin"),
  timeColumn,
  /** "inner" (default): matched pairs only. "left": also each left row that found no match, with null right columns. */
  type: v.optional(v.picklist(["inner", "left"], 'type is "inner" or "left"'), "inner"),
  /** Key column(s) with the same name on both sides. Or give leftKey and rightKey. */
  on: v.optional(keyColumns),
  leftKey: v.optional(keyColumns),
  rightKey: v.optional(keyColumns),
  /** A left and a right row match when their event times differ by at most withinMs. */
  withinMs: milliseconds("withinMs", 0),
  allowedLatenessMs,
  /** Columns kept from each side (default: all); a left join must list rightColumns. */
  leftColumns: v.optional(v.array(columnName, "leftColumns is a list of columns")),
  rightColumns: v.optional(v.array(columnName, "rightColumns is a list of columns")),
  leftPrefix: v.optional(v.string("leftPrefix is a string"), ""),
  rightPrefix: v.optional(v.string("rightPrefix is a string"), "right_"),
});

export type StreamJoinDef = v.InferOutput<typeof streamJoinSchema>;

const OP = "streamJoin";
const LEFT = 0;
const RIGHT = 1;

function asList(key: string | string[]): string[] {
  return typeof key === "string" ? [key] : [...key];
}

/**
 * `{ op = "streamJoin", timeColumn = "ts", on = "orderId", withinMs = 5000 }` on a stage with two
 * inputs (left, right): an interval join. Each pair of rows with equal keys and event times at
 * most withinMs apart is emitted once, as soon as the later of the two arrives.
 *
 * @example
 * const op = compileStreamJoin({ op: "streamJoin", timeColumn: "ts", on: "id", withinMs: 10, type: "inner", allowedLatenessMs: 0, leftPrefix: "", rightPrefix: "right_" }, { stage: 0, step: 0, inputs: 2 }).create();
 * op.process({ id: 1, ts: 100, qty: 5 }, 100, 0);
 * op.process({ id: 1, ts: 104, px: 9 }, 104, 1).rows; // [{ id: 1, ts: 100, qty: 5, right_id: 1, right_ts: 104, right_px: 9 }]
 */
export function compileStreamJoin(def: StreamJoinDef, ctx: OperatorContext): CompiledOperator {
  checkInputs(OP, ctx, 2);
  let left: string[];
  let right: string[];
  if (def.on !== undefined) {
    if (def.leftKey !== undefined || def.rightKey !== undefined) throw invalidStep(OP, ctx, "on", "give either on, or leftKey and rightKey, not both");
    left = right = asList(def.on);
  } else {
    if (def.leftKey === undefined || def.rightKey === undefined) {
      throw invalidStep(OP, ctx, def.leftKey === undefined ? "leftKey" : "rightKey", 'name the join key: on = "id" (same column on both sides), or leftKey and rightKey');
    }
    left = asList(def.leftKey);
    right = asList(def.rightKey);
    if (left.length !== right.length) throw invalidStep(OP, ctx, "rightKey", `leftKey has ${left.length} columns and rightKey ${right.length}; they pair up one to one`);
  }
  if (def.type === "left" && def.rightColumns === undefined) {
    throw invalidStep(OP, ctx, "rightColumns", 'a left join fills the right columns with null when a left row finds no match: list them, e.g. rightColumns = ["price"]');
  }
  if (def.leftColumns !== undefined && def.rightColumns !== undefined) {
    const names = new Set(def.leftColumns.map((c) => def.leftPrefix + c));
    def.rightColumns.forEach((c, i) => {
      if (names.has(def.rightPrefix + c)) {
        throw invalidStep(OP, ctx, `rightColumns.${i}`, `"${def.rightPrefix + c}" is also a left output column; set rightPrefix or leave it out`);
      }
    });
  }
  const config: JoinConfig = {
    withinMs: def.withinMs,
    leftJoin: def.type === "left",
    keys: [groupKey(left), groupKey(right)],
    columns: [def.leftColumns, def.rightColumns],
    prefixes: [def.leftPrefix, def.rightPrefix],
  };
  return {
    op: OP,
    timeColumn: def.timeColumn,
    allowedLatenessMs: def.allowedLatenessMs,
    keyColumns: left,
    inputKeyColumns: [left, right],
    create: () => new StreamJoin(config),
  };
}

interface JoinConfig {
  withinMs: number;
  leftJoin: boolean;
  keys: [GroupKey, GroupKey];
  /** Projection per side; undefined keeps every column. */
  columns: [string[] | undefined, string[] | undefined];
  prefixes: [string, string];
}

/** One buffered row. Key: `L:<seq>` or `R:<seq>`. */
interface Buffered extends Entity {
  readonly side: 0 | 1;
  readonly time: number;
  /** The join key's values, and their in-memory identity (see GroupKey.idOf). */
  readonly keyValues: unknown[];
  readonly id: unknown;
  /** The row, already projected to the side's columns. */
  readonly row: Row;
  /** Left rows: has it matched a right row yet (decides the null row of a left join). */
  matched: boolean;
  readonly bytes: number;
}

class StreamJoin extends StatefulOperator<Buffered> {
  readonly #c: JoinConfig;
  protected readonly state: OperatorState<Buffered>;
  /** Per side: buffered rows by join key, each list in arrival order. */
  readonly #buffers: [Map<unknown, Buffered[]>, Map<unknown, Buffered[]>] = [new Map(), new Map()];
  /** Every buffered row, earliest event time first (ties: arrival order); a row leaves once watermark > time + withinMs. */
  readonly #expiry = new MinHeap<Buffered>((a, b) => a.time < b.time || (a.time === b.time && a.seq < b.seq));
  #bytes = 0;

  constructor(config: JoinConfig) {
    super();
    this.#c = config;
    this.state = new OperatorState<Buffered>(OP, {
      decode: (r, value) => this.#decode(r, value),
      encode: (b) => (b.side === LEFT && this.#c.leftJoin
        ? { time: b.time, seq: b.seq, key: b.keyValues, row: b.row, matched: b.matched }
        : { time: b.time, seq: b.seq, key: b.keyValues, row: b.row }),
      clear: () => {
        this.#buffers[0].clear();
        this.#buffers[1].clear();
        this.#expiry.clear();
        this.#bytes = 0;
      },
      load: (rows) => {
        for (const b of rows) this.#insert(b);
      },
      live: () => this.#live(),
    });
  }

  process(row: Row, eventTime: number, input: number): OperatorOutput {
    this.state.begin();
    checkEventTime(eventTime);
    if (input !== LEFT && input !== RIGHT) throw new Error(`${OP}: input ${input} does not exist; a join has inputs 0 (left) and 1 (right)`);
    const side = input as 0 | 1;
    // 1. A row earlier than the watermark may have lost partners already evicted: late.
    if (eventTime < this.state.watermark) return { rows: [], late: [row] };
    const { keys, withinMs } = this.#c;
    const values = keys[side].values(row);
    const out: Row[] = [];
    // 2. A null key equals nothing: no match, nothing buffered; a left join emits the left row with nulls now.
    if (values.some((value) => value === null)) {
      if (side === LEFT && this.#c.leftJoin) out.push(this.#joined(this.#project(row, LEFT), undefined));
      return out.length === 0 ? NO_OUTPUT : { rows: out, late: [] };
    }
    const id = keys[side].idOf(values);
    const projected = this.#project(row, side);
    // 3. Match the other side's buffered rows with the same key, in their arrival order.
    let matched = false;
    const partners = this.#buffers[1 - side]!.get(id);
    if (partners !== undefined) {
      for (const p of partners) {
        if (Math.abs(p.time - eventTime) > withinMs) continue;
        matched = true;
        if (side === LEFT) out.push(this.#joined(projected, p.row));
        else {
          out.push(this.#joined(p.row, projected));
          if (this.#c.leftJoin && !p.matched) {
            p.matched = true;
            this.state.touched(p);
          }
        }
      }
    }
    // 4. Buffer the row for partners still to come.
    const seq = this.state.nextSeq();
    const b: Buffered = {
      key: `${side === LEFT ? "L" : "R"}:${seq}`,
      seq,
      persisted: false, dirty: false, removed: false,
      side,
      time: eventTime,
      keyValues: values,
      id,
      row: projected,
      matched,
      bytes: 96 + approxBytes(projected) + approxBytes(values),
    };
    this.#insert(b);
    this.state.created(b);
    return out.length === 0 ? NO_OUTPUT : { rows: out, late: [] };
  }

  advance(watermark: number): Row[] {
    this.state.begin();
    if (!this.state.advanceTo(watermark)) return [];
    const out: Row[] = [];
    const withinMs = this.#c.withinMs;
    for (let b = this.#expiry.peek(); b !== undefined && b.time + withinMs < watermark; b = this.#expiry.peek()) {
      this.#expiry.pop();
      const bucket = this.#buffers[b.side].get(b.id)!;
      bucket.splice(bucket.indexOf(b), 1);
      if (bucket.length === 0) this.#buffers[b.side].delete(b.id);
      this.#bytes -= b.bytes;
      this.state.removed(b);
      if (b.side === LEFT && this.#c.leftJoin && !b.matched) out.push(this.#joined(b.row, undefined));
    }
    return out;
  }

  stateSize(): { keys: number; bytes: number } {
    this.state.ready();
    return { keys: this.#expiry.size, bytes: this.#bytes };
  }

  #insert(b: Buffered): void {
    const buffers = this.#buffers[b.side];
    const bucket = buffers.get(b.id);
    if (bucket === undefined) buffers.set(b.id, [b]);
    else bucket.push(b);
    this.#expiry.push(b);
    this.#bytes += b.bytes;
  }

  *#live(): Iterable<Buffered> {
    for (const buffers of this.#buffers) for (const bucket of buffers.values()) yield* bucket;
  }

  /** The side's kept columns, copied (the caller may reuse its row). */
  #project(row: Row, side: 0 | 1): Row {
    const columns = this.#c.columns[side];
    if (columns === undefined) return { ...row };
    const out: Row = {};
    for (const c of columns) {
      const value = row[c];
      out[c] = value === undefined ? null : value;
    }
    return out;
  }

  /** Left columns (with leftPrefix), then right columns (with rightPrefix); on a name clash the left value stays. */
  #joined(left: Row, right: Row | undefined): Row {
    const [leftPrefix, rightPrefix] = this.#c.prefixes;
    const out: Row = {};
    for (const c in left) out[leftPrefix + c] = left[c];
    if (right === undefined) {
      for (const c of this.#c.columns[RIGHT]!) {
        const name = rightPrefix + c;
        if (!Object.hasOwn(out, name)) out[name] = null;
      }
    } else {
      for (const c in right) {
        const name = rightPrefix + c;
        if (!Object.hasOwn(out, name)) out[name] = right[c];
      }
    }
    return out;
  }

  #decode(r: StateReader, value: unknown): Buffered {
    const side = r.key.startsWith("L:") ? LEFT : r.key.startsWith("R:") ? RIGHT : r.fail("a streamJoin key starts with L: or R:");
    const o = r.object(value, "a buffered row");
    const row = r.row(o.row, "row");
    const keyValues = r.list(o.key, "key");
    if (keyValues.length !== this.#c.keys[side].columns.length) r.fail(`the key has ${keyValues.length} values, the join ${this.#c.keys[side].columns.length} key columns`);
    if (keyValues.some((value) => value === null)) r.fail("a buffered row has a null key");
    const seq = r.integer(o.seq, "seq");
    const matched = side === LEFT && this.#c.leftJoin ? r.boolean(o.matched, "matched") : false;
    return {
      key: `${side === LEFT ? "L" : "R"}:${seq}`,
      seq,
      persisted: true, dirty: false, removed: false,
      side,
      time: r.number(o.time, "time"),
      keyValues,
      id: this.#c.keys[side].idOf(keyValues),
      row,
      matched,
      bytes: 96 + approxBytes(row) + approxBytes(keyValues),
    };
  }
}
