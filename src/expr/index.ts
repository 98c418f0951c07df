/**
 * The value dialect ("expression language") for filters and computed fields, plus the CEL
 * option. See docs/expressions.md.
 *
 * @example
 * import { compileExpression } from "./expr/index.ts";
 * const notional = compileExpression("price * qty");
 * notional.evaluate({ price: 101.5, qty: 10 }); // 1015
 */
export type { Value, Row, ValueKind } from "./value.ts";
export { kindOf, valuesEqual } from "./value.ts";
export type { CompiledExpression } from "./compiled-expression.ts";
export type { CompileOptions } from "./compile-expression.ts";
export { compileExpression } from "./compile-expression.ts";
export type { CompileErrorReason, EvalErrorReason } from "./expression-errors.ts";
export { ExpressionCompileError, ExpressionEvalError } from "./expression-errors.ts";
export type { Clock, FunctionBody, FunctionContext, FunctionDef } from "./function-def.ts";
export { FunctionCallError } from "./function-def.ts";
export { FunctionRegistry, defaultFunctions } from "./function-registry.ts";
