import * as v from "valibot";
import { compileExpression, type FunctionRegistry, type Row } from "../expr/index.ts";
import { languageSchema } from "./filter.ts";
import type { InlineStep } from "./step.ts";

export const applyExpressionSchema = v.strictObject({
  op: v.literal("applyExpression"),
  column: v.pipe(v.string(), v.minLength(1, "name the column to set, e.g. column = \"total\"")),
  expression: v.pipe(v.string(), v.minLength(1, "write the value, e.g. expression = \"price * qty\"")),
  language: languageSchema,
});

/** `{ op = "applyExpression", column = "...", expression = "..." }`: sets the column to the value. */
export function compileApplyExpression(def: v.InferOutput<typeof applyExpressionSchema>, functions?: FunctionRegistry): InlineStep {
  const expr = compileExpression(def.expression, { language: def.language ?? "fv", functions });
  const column = def.column;
  return {
    op: "applyExpression",
    reads: expr.columns,
    sets: column,
    apply(row: Row): Row {
      row[column] = expr.evaluate(row);
      return row;
    },
  };
}
