/**
 * What a function is: its arity, its body, and the context a body sees. Built-in and user
 * functions are both described this way and registered in a `FunctionRegistry`.
 */
import type { Value } from "./value.ts";

/** Epoch milliseconds now. Injected so tests and hosts control time. */
export type Clock = () => number;

/** What a function sees besides its arguments. One per call site, created at compile time. */
export interface FunctionContext {
  /** The name the expression called the function by. */
  readonly name: string;
  /** The expression's source and the 0-based offset of this call in it. */
  readonly source: string;
  readonly position: number;
  /** Epoch milliseconds now, from the registry's clock. */
  now(): number;
}

/**
 * A function body. `args` is only valid during the call: the array is reused by the call site
 * on the next row, so copy it if you keep it.
 */
export type FunctionBody = (args: readonly Value[], ctx: FunctionContext) => Value;

export interface FunctionDef {
  /** Fewest and most arguments; `maxArgs: Infinity` makes the function variadic. */
  readonly minArgs: number;
  readonly maxArgs: number;
  /**
   * The body. Throw `FunctionCallError` for a failure with a reason ("type_error" for a wrong
   * kind of argument, "function_error" for a bad value); anything else thrown becomes a
   * "function_error" too. Returning `undefined` is read as null.
   */
  readonly fn: FunctionBody;
  /** When true (the default), a null argument makes the result null without calling `fn`. */
  readonly nullPropagating?: boolean;
  /**
   * When true (the default), a call whose arguments are all constants is evaluated once at
   * compile time. Set false for functions that read the clock or have effects.
   */
  readonly pure?: boolean;
  /**
   * Called once per call site at compile time with the arguments that are constants (the others
   * are `undefined`). It may return a body specialised for those constants (a pre-compiled regex)
   * or throw `FunctionCallError` to reject a constant (a compile error, reason "invalid_argument").
   */
  readonly specialize?: (constants: readonly (Value | undefined)[], ctx: FunctionContext) => FunctionBody | undefined;
  /** One line for docs and error messages, e.g. `substring(s, start[, length])`. */
  readonly signature?: string;
}

/**
 * Thrown by a function body to fail the call with a reason. The call site turns it into an
 * `ExpressionEvalError` pointing at the call.
 */
export class FunctionCallError extends Error {
  readonly reason: "type_error" | "function_error";

  constructor(message: string, reason: "type_error" | "function_error" = "function_error") {
    super(message);
    this.name = "FunctionCallError";
    this.reason = reason;
  }
}
