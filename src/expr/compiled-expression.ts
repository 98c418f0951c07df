/** What compiling an expression gives, whichever language it is written in (fv or CEL). */
import type { Row, Value } from "./value.ts";

export interface CompiledExpression {
  readonly source: string;
  readonly language: "fv" | "cel";
  /** Top-level columns the expression reads (deduplicated, in first-read order). For `a.b[0]` it is `a`. */
  readonly columns: readonly string[];
  /** Evaluate on one row. Throws ExpressionEvalError on a runtime error; never anything else. */
  evaluate(row: Row): Value;
}
