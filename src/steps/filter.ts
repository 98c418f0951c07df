import * as v from "valibot";
import { FvError } from "../errors.ts";
import { compileExpression, type FunctionRegistry, type Row } from "../expr/index.ts";
import { RegoFilter } from "./rego-filter.ts";
import type { InlineStep } from "./step.ts";

export const languageSchema = v.optional(v.picklist(["fv", "cel"], 'use language = "fv" (default) or "cel"'));

export const filterSchema = v.strictObject({
  op: v.literal("filter"),
  expression: v.optional(v.pipe(v.string(), v.minLength(1, "write the condition, e.g. expression = \"price > 100\""))),
  language: v.optional(v.picklist(["fv", "cel", "rego"], 'use language = "fv" (default), "cel" or "rego"')),
  /** language = "rego": the policy (Rego text, or in a pipeline file a path to a .rego file) and the query. */
  policy: v.optional(v.pipe(v.string(), v.minLength(1, "policy is Rego text, or a path to a .rego file"))),
  query: v.optional(v.pipe(v.string(), v.minLength(1, 'query names the rule, e.g. query = "data.trades.allow"'))),
});

const fieldError = (field: string, message: string) => Object.assign(new Error(message), { field });

/**
 * `{ op = "filter", expression = "..." }`: keeps the row when the value is true; null or false
 * drops it. With `language = "rego"`, `policy` and `query` instead (see rego-filter.ts).
 */
export function compileFilter(def: v.InferOutput<typeof filterSchema>, functions?: FunctionRegistry): InlineStep {
  if (def.language === "rego") {
    if (def.expression !== undefined) throw fieldError("expression", 'a Rego filter has a policy and a query, not an expression: write policy = "..." and query = "data.<package>.<rule>"');
    if (def.policy === undefined) throw fieldError("policy", "missing field \"policy\": the Rego policy (its text, or a path to a .rego file next to the pipeline file)");
    if (def.query === undefined) throw fieldError("query", 'missing field "query": the rule to ask, e.g. query = "data.trades.allow"');
    return new RegoFilter(def.policy, def.query);
  }
  if (def.policy !== undefined || def.query !== undefined) throw fieldError(def.policy !== undefined ? "policy" : "query", 'policy and query go with language = "rego"');
  if (def.expression === undefined) throw fieldError("expression", 'missing field "expression": write the condition, e.g. expression = "price > 100"');
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
