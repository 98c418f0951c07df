import * as v from "valibot";
import type { Row } from "../expr/index.ts";
import type { InlineStep } from "./step.ts";

export const dropSchema = v.strictObject({
  op: v.literal("drop"),
  columns: v.pipe(v.array(v.pipe(v.string(), v.minLength(1))), v.minLength(1, "list at least one column")),
});

/** `{ op = "drop", columns = [...] }`: the row without these columns. */
export function compileDrop(def: v.InferOutput<typeof dropSchema>): InlineStep {
  const dropped = new Set(def.columns);
  return {
    op: "drop",
    reads: [],
    apply(row: Row): Row {
      const out: Row = {};
      for (const key in row) if (!dropped.has(key)) out[key] = row[key];
      return out;
    },
  };
}
