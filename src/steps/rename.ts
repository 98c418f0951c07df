import * as v from "valibot";
import type { Row } from "../expr/index.ts";
import type { InlineStep } from "./step.ts";

export const renameSchema = v.strictObject({
  op: v.literal("rename"),
  mapping: v.pipe(
    v.record(v.pipe(v.string(), v.minLength(1)), v.pipe(v.string(), v.minLength(1, "a new column name cannot be empty"))),
    v.check((m) => Object.keys(m).length > 0, "map at least one column: mapping = { old = \"new\" }"),
  ),
});

/** `{ op = "rename", mapping = { from = "to" } }`: renames in place, keeping column order. */
export function compileRename(def: v.InferOutput<typeof renameSchema>): InlineStep {
  const mapping = new Map(Object.entries(def.mapping));
  return {
    op: "rename",
    reads: [...mapping.keys()],
    apply(row: Row): Row {
      const out: Row = {};
      for (const key in row) out[mapping.get(key) ?? key] = row[key];
      return out;
    },
  };
}
