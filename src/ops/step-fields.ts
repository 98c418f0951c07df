/** Schema pieces and compile-time checks the operator steps share. */
import * as v from "valibot";
import { FvError } from "../errors.ts";
import type { CompiledOperator, Operator, OperatorContext } from "./operator.ts";

export const columnName = v.pipe(v.string("a column name is a string"), v.minLength(1, "a column name cannot be empty"));

export const timeColumn = v.pipe(
  v.string('name the event time column, e.g. timeColumn = "ts"'),
  v.minLength(1, 'name the event time column, e.g. timeColumn = "ts"'),
);

/** A whole number of milliseconds, at least `min`. */
export function milliseconds(field: string, min: number) {
  return v.pipe(
    v.number(`${field} is a number of milliseconds`),
    v.safeInteger(`${field} is a whole number of milliseconds`),
    v.minValue(min, `${field} must be at least ${min}`),
  );
}

/** How far behind the highest event time the watermark trails (default 0). */
export const allowedLatenessMs = v.optional(milliseconds("allowedLatenessMs", 0), 0);

/** Group columns; absent or empty: one global group per partition. */
export const groupBy = v.optional(v.array(columnName, 'groupBy is a list of columns, e.g. groupBy = ["symbol"]'), []);

export const rowCount = v.pipe(v.number("n is a number"), v.safeInteger("n is a whole number"), v.minValue(1, "n must be at least 1"));

/** The groupBy columns as `checkDistinctColumns` entries. */
export function groupByColumns(groupBy: readonly string[]): Array<{ name: string; field: string }> {
  return groupBy.map((name, i) => ({ name, field: `groupBy.${i}` }));
}

/** A compiled step keyed by its groupBy columns on every stage input. */
export function groupedOperator(
  op: string,
  def: { timeColumn: string; allowedLatenessMs: number; groupBy: string[] },
  ctx: OperatorContext,
  create: () => Operator,
): CompiledOperator {
  return {
    op,
    timeColumn: def.timeColumn,
    allowedLatenessMs: def.allowedLatenessMs,
    keyColumns: def.groupBy,
    inputKeyColumns: Array.from({ length: ctx.inputs }, () => def.groupBy),
    create,
  };
}

/** The INVALID_TOPOLOGY error for a definition that parses but cannot run. */
export function invalidStep(op: string, ctx: OperatorContext, field: string, message: string): FvError {
  return new FvError("INVALID_TOPOLOGY", `${op}: field "${field}": ${message}`, {
    context: { stage: ctx.stage + 1, step: ctx.step + 1, field, op },
  });
}

/** Refuses duplicate output columns (aliases, group columns, the operator's own columns). */
export function checkDistinctColumns(op: string, ctx: OperatorContext, columns: Array<{ name: string; field: string }>): void {
  const seen = new Map<string, string>();
  for (const { name, field } of columns) {
    const first = seen.get(name);
    if (first !== undefined) {
      throw invalidStep(op, ctx, field, `output column "${name}" is already produced by ${first}; give it another name`);
    }
    seen.set(name, field);
  }
}

/** Refuses a stage whose input count does not fit the operator. */
export function checkInputs(op: string, ctx: OperatorContext, expected: "one or more" | 2): void {
  if (expected === 2 ? ctx.inputs !== 2 : ctx.inputs < 1) {
    throw invalidStep(op, ctx, "inputs", `${op} needs ${expected === 2 ? "exactly 2 inputs (left, right)" : "at least one input"}, the stage has ${ctx.inputs}`);
  }
}

/**
 * `emit`: `"final"` (default): one row per window or session once the watermark closes it;
 * `"update"`: a row with the current aggregates each time a row changes them (Kafka Streams
 * without suppress), and nothing when it closes.
 */
export const emitMode = v.optional(v.picklist(["final", "update"], 'emit is "final" (a row when the window closes) or "update" (a row at every change)'), "final");
