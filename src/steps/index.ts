import * as v from "valibot";
import type { FunctionRegistry } from "../expr/index.ts";
import { applyExpressionSchema, compileApplyExpression } from "./apply-expression.ts";
import { compileDrop, dropSchema } from "./drop.ts";
import { compileFilter, filterSchema, filterSchemaFor } from "./filter.ts";
import { compileRename, renameSchema } from "./rename.ts";
import { compileSelect, selectSchema } from "./select.ts";
import type { InlineStep } from "./step.ts";

export type { InlineStep } from "./step.ts";

interface InlineStepKind {
  // deno-lint-ignore no-explicit-any
  schema: v.GenericSchema<any, any>;
  /** When the fields decide the schema (a Rego filter): the one to check this step with. */
  // deno-lint-ignore no-explicit-any
  schemaFor?: (raw: { language?: unknown }) => v.GenericSchema<any, any>;
  // deno-lint-ignore no-explicit-any
  compile(def: any, functions?: FunctionRegistry): InlineStep;
}

/** The inline steps, by `op`. */
export const inlineSteps: Record<string, InlineStepKind> = {
  select: { schema: selectSchema, compile: compileSelect },
  rename: { schema: renameSchema, compile: compileRename },
  drop: { schema: dropSchema, compile: compileDrop },
  filter: { schema: filterSchema, schemaFor: filterSchemaFor, compile: compileFilter },
  applyExpression: { schema: applyExpressionSchema, compile: compileApplyExpression },
};
