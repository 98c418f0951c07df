import * as v from "valibot";
import { FvError } from "../errors.ts";
import { compileExpression, type FunctionRegistry, type Row } from "../expr/index.ts";
import type { InlineStep } from "./step.ts";

export const languageSchema = v.optional(v.picklist(["fv", "cel"], 'use language = "fv" (default) or "cel"'));

export const filterSchema = v.strictObject({
  op: v.literal("filter"),
  expression: v.pipe(v.string(), v.minLength(1, "write the condition, e.g. expression = \"price > 100\"")),
  language: languageSchema,
});

/** `{ op = "filter", expression = "..." }`: keeps the row when the value is true; null or false drops it. */
export function compileFilter(def: v.InferOutput<typeof filterSchema>, functions?: FunctionRegistry): InlineStep {
  const expr = compileExpression(def.expression, { language: def.language ?? "fv", functions });
  return {
    op: "filter",
    reads: expr.columns,
    apply(row: Row): Row | null {
      const keep = expr.evaluate(row);
      if (keep === true) return row;
      if (keep === false || keep === null) return null;
      throw new FvError("EXPRESSION_EVAL", `filter "${def.expression}" must give a boolean, got ${describe(keep)}`, {
        context: { reason: "type_error" },
      });
    },
  };
}

function describe(value: unknown): string {
  if (Array.isArray(value)) return "a list";
  if (typeof value === "object") return "an object";
  return `${typeof value} ${JSON.stringify(value)}`;
}
