import type { Row } from "../expr/index.ts";

/** A compiled inline step: a row in, the row out, or null when the row is dropped. */
export interface InlineStep {
  readonly op: string;
  /** Columns the step reads (for docs and planning); empty when it reads the whole row. */
  readonly reads: readonly string[];
  /** The column the step sets (applyExpression), if it sets one and changes nothing else. */
  readonly sets?: string;
  /** Returns the new row, or null to drop it. Throws ExpressionEvalError for a poison row. */
  apply(row: Row): Row | null;
}

/** Where a step stands, for error messages. */
export interface StepLocation {
  stage: number;
  step: number;
}
