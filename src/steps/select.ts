import * as v from "valibot";
import type { Row } from "../expr/index.ts";
import type { InlineStep } from "./step.ts";

export const selectSchema = v.strictObject({
  op: v.literal("select"),
  columns: v.pipe(v.array(v.pipe(v.string(), v.minLength(1))), v.minLength(1, "list at least one column")),
});

/** `{ op = "select", columns = [...] }`: exactly these columns, in this order; a missing one is null. */
export function compileSelect(def: v.InferOutput<typeof selectSchema>): InlineStep {
  const columns = [...def.columns];
  return {
    op: "select",
    reads: columns,
    apply(row: Row): Row {
      const out: Row = {};
      for (const column of columns) {
        const value = row[column];
        out[column] = value === undefined ? null : value;
      }
      return out;
    },
  };
}
