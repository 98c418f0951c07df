/**
 * The aggregates of windowedAggregate and sessionAggregate: incremental accumulators, O(1) per
 * row (countDistinct: one Set insert), with merge for sessions and a plain JSON encoding for the
 * changelog. Null (and missing) values are skipped; see docs/operators.md for definitions.
 */
import * as v from "valibot";
import { FvError } from "../errors.ts";
import type { Value } from "../expr/index.ts";
import { approxBytes, type StateReader } from "./state-values.ts";

const column = v.pipe(v.string("column is a column name"), v.minLength(1, "name the column to aggregate, e.g. column = \"price\""));
const alias = v.optional(v.pipe(v.string("alias is a column name"), v.minLength(1, "an alias cannot be empty")));

/** Aggregates that take one column and no parameter. */
const plainOps = ["sum", "avg", "min", "max", "first", "last", "countDistinct", "stddev", "stddevPop"] as const;

export const aggregateSchema = v.variant("op", [
  v.strictObject({ op: v.literal("count"), column: v.optional(column), alias }),
  v.strictObject({ op: v.picklist(plainOps), column, alias }),
  v.strictObject({
    op: v.literal("sma"),
    column,
    n: v.pipe(v.number("n is a number"), v.safeInteger("n is a whole number"), v.minValue(1, "n must be at least 1")),
    alias,
  }),
  v.strictObject({
    op: v.literal("ema"),
    column,
    alpha: v.pipe(v.number("alpha is a number"), v.gtValue(0, "alpha must be above 0"), v.maxValue(1, "alpha must be at most 1")),
    alias,
  }),
], `each aggregate needs op = one of "count", ${plainOps.map((o) => `"${o}"`).join(", ")}, "sma", "ema"`);

export type AggregateDef = v.InferOutput<typeof aggregateSchema>;
export type AggregateOp = AggregateDef["op"];

/** One compiled aggregate. States are opaque to the operator; only these methods touch them. */
export interface Aggregator {
  readonly op: AggregateOp;
  readonly alias: string;
  /** The column read, or undefined for count(*) which counts rows. */
  readonly column: string | undefined;
  /** False for sma and ema: their order-dependent state has no merge. */
  readonly mergeable: boolean;
  /** Throws POISON_ROW "type_error" for a (non-null) value this aggregate cannot take. Called once per row, before any state changes. */
  check(value: unknown): void;
  init(): unknown;
  /** Adds a non-null (checked) value seen at event time `time`; returns the new state. */
  add(state: unknown, value: unknown, time: number): unknown;
  /** The state of both inputs together; `earlier` began first. Only when `mergeable`. */
  merge(earlier: unknown, later: unknown): unknown;
  result(state: unknown): Value;
  encode(state: unknown): unknown;
  decode(reader: StateReader, json: unknown): unknown;
  bytes(state: unknown): number;
}

/** The default output column: "count" for count of rows, else `<op>_<column>` (e.g. "avg_price"). */
export function defaultAlias(def: AggregateDef): string {
  return def.column === undefined ? def.op : `${def.op}_${def.column}`;
}

export function compileAggregate(def: AggregateDef): Aggregator {
  const alias = def.alias ?? defaultAlias(def);
  const base = { op: def.op, alias, column: def.column };
  switch (def.op) {
    case "count":
      return { ...base, ...countAggregate };
    case "sum":
      return { ...base, ...sumAggregate(def.column) };
    case "avg":
      return { ...base, ...avgAggregate(def.column) };
    case "min":
      return { ...base, ...extremeAggregate(def.column, "min", (a, b) => a < b) };
    case "max":
      return { ...base, ...extremeAggregate(def.column, "max", (a, b) => a > b) };
    case "first":
      return { ...base, ...pickAggregate("first") };
    case "last":
      return { ...base, ...pickAggregate("last") };
    case "countDistinct":
      return { ...base, ...countDistinctAggregate };
    case "stddev":
      return { ...base, ...stddevAggregate(def.column, "stddev", 1) };
    case "stddevPop":
      return { ...base, ...stddevAggregate(def.column, "stddevPop", 0) };
    case "sma":
      return { ...base, ...smaAggregate(def.column, def.n) };
    case "ema":
      return { ...base, ...emaAggregate(def.column, def.alpha) };
  }
}

type Body = Omit<Aggregator, "op" | "alias" | "column">;

function typeError(op: string, columnName: string, value: unknown): FvError {
  const got = typeof value === "number" ? String(value) : `${Array.isArray(value) ? "list" : typeof value} ${JSON.stringify(value)}`;
  return new FvError("POISON_ROW", `${op} of column "${columnName}" needs a finite number, got ${got}`, {
    context: { reason: "type_error", field: columnName },
  });
}

function numberCheck(op: string, columnName: string): (value: unknown) => void {
  return (value) => {
    if (typeof value !== "number" || !Number.isFinite(value)) throw typeError(op, columnName, value);
  };
}

const noCheck = (): void => {};

const countAggregate: Body = {
  mergeable: true,
  check: noCheck,
  init: () => 0,
  add: (state) => (state as number) + 1,
  merge: (a, b) => (a as number) + (b as number),
  result: (state) => state as number,
  encode: (state) => state,
  decode: (r, json) => r.integer(json, "count"),
  bytes: () => 8,
};

function sumAggregate(columnName: string): Body {
  return {
    mergeable: true,
    check: numberCheck("sum", columnName),
    init: () => null,
    add: (state, value) => state === null ? value : (state as number) + (value as number),
    merge: (a, b) => a === null ? b : b === null ? a : (a as number) + (b as number),
    result: (state) => state as number | null,
    encode: (state) => state,
    decode: (r, json) => r.numberOrNull(json, "sum"),
    bytes: () => 8,
  };
}

interface AvgState {
  n: number;
  sum: number;
}

function avgAggregate(columnName: string): Body {
  return {
    mergeable: true,
    check: numberCheck("avg", columnName),
    init: (): AvgState => ({ n: 0, sum: 0 }),
    add: (state, value) => {
      const s = state as AvgState;
      s.n++;
      s.sum += value as number;
      return s;
    },
    merge: (a, b) => ({ n: (a as AvgState).n + (b as AvgState).n, sum: (a as AvgState).sum + (b as AvgState).sum }),
    result: (state) => (state as AvgState).n === 0 ? null : (state as AvgState).sum / (state as AvgState).n,
    encode: (state) => [(state as AvgState).n, (state as AvgState).sum],
    decode: (r, json) => {
      const [n, sum] = r.list(json, "avg");
      return { n: r.integer(n, "avg count"), sum: r.number(sum, "avg sum") };
    },
    bytes: () => 16,
  };
}

function extremeAggregate(columnName: string, op: "min" | "max", better: (a: number, b: number) => boolean): Body {
  return {
    mergeable: true,
    check: numberCheck(op, columnName),
    init: () => null,
    add: (state, value) => state === null || better(value as number, state as number) ? value : state,
    merge: (a, b) => a === null ? b : b === null ? a : better(b as number, a as number) ? b : a,
    result: (state) => state as number | null,
    encode: (state) => state,
    decode: (r, json) => r.numberOrNull(json, op),
    bytes: () => 8,
  };
}

/** first / last: the value with the earliest / latest event time; ties go to the earlier / later arrival. State: [time, value] or null. */
function pickAggregate(op: "first" | "last"): Body {
  const replaces = op === "first" ? (time: number, held: number) => time < held : (time: number, held: number) => time >= held;
  return {
    mergeable: true,
    check: noCheck,
    init: () => null,
    add: (state, value, time) => state === null || replaces(time, (state as [number, unknown])[0]) ? [time, value] : state,
    merge: (a, b) => {
      if (a === null) return b;
      if (b === null) return a;
      return replaces((b as [number, unknown])[0], (a as [number, unknown])[0]) ? b : a;
    },
    result: (state) => state === null ? null : (state as [number, Value])[1],
    encode: (state) => state,
    decode: (r, json) => {
      if (json === null) return null;
      const pair = r.list(json, op);
      if (pair.length !== 2) r.fail(`${op} must be [time, value]`);
      return [r.number(pair[0], `${op} time`), pair[1]];
    },
    bytes: (state) => state === null ? 8 : 32 + approxBytes((state as [number, unknown])[1]),
  };
}

interface DistinctState {
  seen: Set<string>;
  /** Characters held in `seen`, for `bytes`. */
  chars: number;
}

/** The identity of a value for countDistinct: 1 and "1" differ, 0 and -0 do not. */
function distinctKey(value: unknown): string {
  switch (typeof value) {
    case "string":
      return "s" + value;
    case "number":
      return "n" + String(value);
    case "boolean":
      return value ? "b1" : "b0";
    default:
      return "j" + JSON.stringify(value);
  }
}

const countDistinctAggregate: Body = {
  mergeable: true,
  check: noCheck,
  init: (): DistinctState => ({ seen: new Set(), chars: 0 }),
  add: (state, value) => {
    const s = state as DistinctState;
    const key = distinctKey(value);
    if (!s.seen.has(key)) {
      s.seen.add(key);
      s.chars += key.length;
    }
    return s;
  },
  merge: (a, b) => {
    const [big, small] = (a as DistinctState).seen.size >= (b as DistinctState).seen.size ? [a as DistinctState, b as DistinctState] : [b as DistinctState, a as DistinctState];
    const out: DistinctState = { seen: new Set(big.seen), chars: big.chars };
    for (const key of small.seen) {
      if (!out.seen.has(key)) {
        out.seen.add(key);
        out.chars += key.length;
      }
    }
    return out;
  },
  result: (state) => (state as DistinctState).seen.size,
  encode: (state) => [...(state as DistinctState).seen],
  decode: (r, json) => {
    const s: DistinctState = { seen: new Set(), chars: 0 };
    for (const key of r.list(json, "countDistinct")) {
      const k = r.string(key, "a countDistinct entry");
      s.seen.add(k);
      s.chars += k.length;
    }
    return s;
  },
  bytes: (state) => 64 + 2 * (state as DistinctState).chars + 24 * (state as DistinctState).seen.size,
};

/** Welford's running mean and sum of squared deviations; merged with Chan et al.'s formula. */
interface MomentsState {
  n: number;
  mean: number;
  m2: number;
}

function stddevAggregate(columnName: string, op: "stddev" | "stddevPop", ddof: 0 | 1): Body {
  return {
    mergeable: true,
    check: numberCheck(op, columnName),
    init: (): MomentsState => ({ n: 0, mean: 0, m2: 0 }),
    add: (state, value) => {
      const s = state as MomentsState;
      const x = value as number;
      s.n++;
      const delta = x - s.mean;
      s.mean += delta / s.n;
      s.m2 += delta * (x - s.mean);
      return s;
    },
    merge: (a, b) => {
      const x = a as MomentsState;
      const y = b as MomentsState;
      if (x.n === 0) return { ...y };
      if (y.n === 0) return { ...x };
      const n = x.n + y.n;
      const delta = y.mean - x.mean;
      return { n, mean: x.mean + (delta * y.n) / n, m2: x.m2 + y.m2 + (delta * delta * x.n * y.n) / n };
    },
    result: (state) => {
      const s = state as MomentsState;
      if (s.n <= ddof) return null;
      return Math.sqrt(Math.max(0, s.m2 / (s.n - ddof)));
    },
    encode: (state) => [(state as MomentsState).n, (state as MomentsState).mean, (state as MomentsState).m2],
    decode: (r, json) => {
      const [n, mean, m2] = r.list(json, op);
      return { n: r.integer(n, `${op} count`), mean: r.number(mean, `${op} mean`), m2: r.number(m2, `${op} m2`) };
    },
    bytes: () => 24,
  };
}

/** The last n values in arrival order, as a ring. */
interface RingState {
  values: number[];
  /** Where the next value goes once `values` is full (it is also the oldest). */
  next: number;
}

function smaAggregate(columnName: string, n: number): Body {
  return {
    mergeable: false,
    check: numberCheck("sma", columnName),
    init: (): RingState => ({ values: [], next: 0 }),
    add: (state, value) => {
      const s = state as RingState;
      if (s.values.length < n) s.values.push(value as number);
      else {
        s.values[s.next] = value as number;
        s.next = s.next + 1 === n ? 0 : s.next + 1;
      }
      return s;
    },
    merge: () => {
      throw new Error("sma has no merge");
    },
    result: (state) => {
      const s = state as RingState;
      const count = s.values.length;
      if (count === 0) return null;
      // Oldest to newest, so a restored ring (stored in that order) sums to the same bits.
      let sum = 0;
      for (let i = 0; i < count; i++) sum += s.values[(s.next + i) % count]!;
      return sum / count;
    },
    encode: (state) => {
      const s = state as RingState;
      return [...s.values.slice(s.next), ...s.values.slice(0, s.next)];
    },
    decode: (r, json) => {
      const values = r.list(json, "sma").map((x) => r.number(x, "an sma value"));
      if (values.length > n) r.fail(`sma holds ${values.length} values, more than n = ${n}`);
      return { values, next: 0 };
    },
    bytes: () => 32 + 8 * n,
  };
}

function emaAggregate(columnName: string, alpha: number): Body {
  const keep = 1 - alpha;
  return {
    mergeable: false,
    check: numberCheck("ema", columnName),
    init: () => null,
    add: (state, value) => state === null ? value : alpha * (value as number) + keep * (state as number),
    merge: () => {
      throw new Error("ema has no merge");
    },
    result: (state) => state as number | null,
    encode: (state) => state,
    decode: (r, json) => r.numberOrNull(json, "ema"),
    bytes: () => 8,
  };
}
