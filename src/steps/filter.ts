import * as v from "valibot";
import { FvError } from "../errors.ts";
import { compileExpression, type FunctionRegistry, type Row } from "../expr/index.ts";
import { RegoFilter } from "./rego-filter.ts";
import type { InlineStep } from "./step.ts";

export const languageSchema = v.optional(v.picklist(["fv", "cel"], 'use language = "fv" (default) or "cel" (or "rego", with policy and query instead of expression)'));

export const filterSchema = v.strictObject({
  op: v.literal("filter"),
  expression: v.pipe(v.string(), v.minLength(1, "write the condition, e.g. expression = \"price > 100\"")),
  language: languageSchema,
});

/** `{ op = "filter", language = "rego", policy = "...", query = "data.<package>.<rule>" }` */
export const regoFilterSchema = v.strictObject({
  op: v.literal("filter"),
  language: v.literal("rego"),
  /** The policy: Rego text, or in a pipeline file a path to a .rego file next to it. */
  policy: v.pipe(v.string("policy is Rego text, or a path to a .rego file"), v.minLength(1, "policy is Rego text, or a path to a .rego file")),
  query: v.pipe(v.string('query names the rule, e.g. query = "data.trades.allow"'), v.minLength(1, 'query names the rule, e.g. query = "data.trades.allow"')),
});

/** The schema a filter step is checked with: Rego's when it says language = "rego". */
export const filterSchemaFor = (raw: { language?: unknown }) => (raw.language === "rego" ? regoFilterSchema : filterSchema);

/**
 * `{ op = "filter", expression = "..." }`: keeps the row when the value is true; null or false
 * drops it. With `language = "rego"`, `policy` and `query` instead (see rego-filter.ts).
 */
export function compileFilter(def: v.InferOutput<typeof filterSchema> | v.InferOutput<typeof regoFilterSchema>, functions?: FunctionRegistry): InlineStep {
  if (def.language === "rego") return new RegoFilter(def.policy, def.query);
  const expression = def.expression;
  const expr = compileExpression(expression, { language: def.language ?? "fv", functions });
  return {
    op: "filter",
    reads: expr.columns,
    apply(row: Row): Row | null {
      const keep = expr.evaluate(row);
      if (keep === true) return row;
      if (keep === false || keep === null) return null;
      throw new FvError("EXPRESSION_EVAL", `filter "${expression}" must give a boolean, got ${describe(keep)}`, {
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
