/**
 * What an aggregate is, as a step names it (`aggs = [{ op = "sum", column = "qty" }]`): the
 * valibot schema, the definition type and the default output column. The accumulators that
 * compute them are in aggregates.ts.
 */
import * as v from "valibot";

const column = v.pipe(v.string("column is a column name"), v.minLength(1, "name the column to aggregate, e.g. column = \"price\""));
const alias = v.optional(v.pipe(v.string("alias is a column name"), v.minLength(1, "an alias cannot be empty")));

/** countDistinct, percentile: exact up to this many values per window (or session), then a sketch. */
const exactUpTo = (byDefault: number) => v.optional(v.pipe(v.number("exactUpTo is a number"), v.safeInteger("exactUpTo is a whole number"), v.minValue(1, "exactUpTo must be at least 1")), byDefault);

/** Aggregates that take one column and no parameter. */
const plainOps = ["sum", "avg", "min", "max", "first", "last", "stddev", "stddevPop", "variance", "variancePop", "argmax", "argmin"] as const;

export const aggregateSchema = v.variant("op", [
  v.strictObject({ op: v.literal("count"), column: v.optional(column), alias }),
  v.strictObject({ op: v.picklist(plainOps), column, alias }),
  v.strictObject({
    op: v.literal("countDistinct"),
    column,
    /** Exact up to this many distinct values per window (or session); past it, HyperLogLog. */
    exactUpTo: exactUpTo(100_000),
    alias,
  }),
  v.strictObject({
    op: v.literal("percentile"),
    column,
    q: v.pipe(v.number("q is a number"), v.minValue(0, "q is between 0 and 1, e.g. q = 0.99"), v.maxValue(1, "q is between 0 and 1, e.g. q = 0.99")),
    /** Exact up to this many values per window (or session); past it, a t-digest. */
    exactUpTo: exactUpTo(10_000),
    alias,
  }),
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
], `each aggregate needs op = one of "count", ${plainOps.map((o) => `"${o}"`).join(", ")}, "countDistinct", "percentile", "sma", "ema"`);

/** The `aggs` field of an aggregating step: one aggregate or more. */
export const aggregateList = v.pipe(
  v.array(aggregateSchema, "aggs is a list of aggregates, e.g. aggs = [{ op = \"sum\", column = \"qty\" }]"),
  v.minLength(1, "list at least one aggregate, e.g. aggs = [{ op = \"count\" }]"),
);

export type AggregateDef = v.InferOutput<typeof aggregateSchema>;
export type AggregateOp = AggregateDef["op"];

/** One aggregate as compiled: what the operator needs to know about it. */
export interface AggregateInfo {
  readonly op: AggregateOp;
  /** The output column. */
  readonly alias: string;
  /** The column read, or undefined for count of rows. */
  readonly column: string | undefined;
  /** False for sma and ema: their order-dependent state has no merge. */
  readonly mergeable: boolean;
}

/** The default output column: "count" for count of rows, else `<op>_<column>` (e.g. "avg_price"). */
export function defaultAlias(def: AggregateDef): string {
  return def.column === undefined ? def.op : `${def.op}_${def.column}`;
}
