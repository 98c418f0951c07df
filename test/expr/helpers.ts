/** Small helpers the expression tests share: evaluate, or capture the error thrown. */
import {
  compileExpression,
  ExpressionCompileError,
  ExpressionEvalError,
  type CompileOptions,
  type Row,
  type Value,
} from "../../src/expr/index.ts";

/** Compiles and evaluates `source` on `row`. */
export function run(source: string, row: Row = {}, options?: CompileOptions): Value {
  return compileExpression(source, options).evaluate(row);
}

/** The ExpressionEvalError evaluating `source` on `row` throws; fails the test if it throws anything else. */
export function evalError(source: string, row: Row = {}, options?: CompileOptions): ExpressionEvalError {
  const compiled = compileExpression(source, options);
  try {
    const value = compiled.evaluate(row);
    throw new Error(`expected ${JSON.stringify(source)} to fail, got ${JSON.stringify(value)}`);
  } catch (e) {
    if (e instanceof ExpressionEvalError) return e;
    throw e;
  }
}

/** The ExpressionCompileError compiling `source` throws; fails the test if it compiles. */
export function compileError(source: string, options?: CompileOptions): ExpressionCompileError {
  try {
    compileExpression(source, options);
  } catch (e) {
    if (e instanceof ExpressionCompileError) return e;
    throw e;
  }
  throw new Error(`expected ${JSON.stringify(source)} not to compile`);
}
