/**
 * Argument checks shared by the built-in functions. Each throws a `FunctionCallError` with
 * reason "type_error" naming the function, the argument and the kind it got.
 */
import { FunctionCallError, type FunctionContext } from "../function-def.ts";
import { kindOf, type Value } from "../value.ts";

function ordinal(i: number): string {
  return ["first", "second", "third", "fourth", "fifth"][i] ?? `#${i + 1}`;
}

export function wrongKind(ctx: FunctionContext, i: number, expected: string, got: unknown): FunctionCallError {
  return new FunctionCallError(`${ctx.name}() expects its ${ordinal(i)} argument to be ${expected}, got ${kindOf(got)}`, "type_error");
}

export function badValue(ctx: FunctionContext, message: string): FunctionCallError {
  return new FunctionCallError(`${ctx.name}(): ${message}`, "function_error");
}

export function stringArg(args: readonly Value[], i: number, ctx: FunctionContext): string {
  const v = args[i];
  if (typeof v !== "string") throw wrongKind(ctx, i, "a string", v);
  return v;
}

export function numberArg(args: readonly Value[], i: number, ctx: FunctionContext): number {
  const v = args[i];
  if (typeof v !== "number") throw wrongKind(ctx, i, "a number", v);
  return v;
}

export function integerArg(args: readonly Value[], i: number, ctx: FunctionContext): number {
  const v = numberArg(args, i, ctx);
  if (!Number.isInteger(v)) throw badValue(ctx, `the ${ordinal(i)} argument must be a whole number, got ${v}`);
  return v;
}

export function listArg(args: readonly Value[], i: number, ctx: FunctionContext): Value[] {
  const v = args[i];
  if (!Array.isArray(v)) throw wrongKind(ctx, i, "a list", v);
  return v;
}

/** `toString()`'s rendering, also used by `join()`: JSON for lists and objects. */
export function render(v: Value): string {
  switch (typeof v) {
    case "string":
      return v;
    case "number":
    case "boolean":
      return String(v);
    default:
      return v === null ? "null" : JSON.stringify(v);
  }
}
