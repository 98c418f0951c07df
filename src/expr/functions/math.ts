/** Math functions: abs, round, roundTo, floor, ceil, min, max, pow, sqrt. */
import type { FunctionContext, FunctionDef } from "../function-def.ts";
import type { Value } from "../value.ts";
import { badValue, integerArg, numberArg, wrongKind } from "./args.ts";

function unary(signature: string, f: (x: number) => number): FunctionDef {
  return {
    minArgs: 1,
    maxArgs: 1,
    signature,
    fn: (args, ctx) => finite(f(numberArg(args, 0, ctx)), ctx),
  };
}

/** Math functions never turn numbers into NaN; they fail instead (sqrt(-1), pow(-8, 0.5)). */
function finite(result: number, ctx: FunctionContext): number {
  if (Number.isNaN(result)) throw badValue(ctx, "the result is not a number");
  return result;
}

/** Rounds half away from zero; decimal-looking halves (1.005 to 2 digits) round up too. */
export function roundHalfAway(x: number, digits: number): number {
  if (!Number.isFinite(x)) return x;
  const sign = x < 0 ? -1 : 1;
  const a = Math.abs(x);
  if (digits === 0) return sign * Math.round(a) + 0;
  if (digits < 0) {
    const f = 10 ** -digits;
    return sign * Math.round(a / f) * f + 0;
  }
  const f = 10 ** digits;
  const scaled = a * f;
  if (scaled >= Number.MAX_SAFE_INTEGER) return x;
  return (sign * Math.round(scaled * (1 + Number.EPSILON))) / f + 0;
}

/** min/max over numbers or over strings, given either as arguments or as one list. */
function extreme(signature: string, pick: (a: number | string, b: number | string) => boolean): FunctionDef {
  return {
    minArgs: 1,
    maxArgs: Infinity,
    signature,
    fn: (args, ctx) => {
      const first = args[0];
      const items: readonly Value[] = args.length === 1 && Array.isArray(first) ? first : args;
      if (items.length === 0) return null;
      let best: number | string | undefined;
      for (let i = 0; i < items.length; i++) {
        const v = items[i]!;
        if (v === null) return null;
        if (typeof v !== "number" && typeof v !== "string") throw wrongKind(ctx, i, "a number or a string", v);
        if (best === undefined) best = v;
        else if (typeof v !== typeof best) throw wrongKind(ctx, i, `a ${typeof best} like the others`, v);
        else if (pick(v, best)) best = v;
      }
      return best ?? null;
    },
  };
}

export const mathFunctions: Record<string, FunctionDef> = {
  abs: unary("abs(x)", Math.abs),
  floor: unary("floor(x)", Math.floor),
  ceil: unary("ceil(x)", Math.ceil),
  sqrt: unary("sqrt(x)", Math.sqrt),
  round: unary("round(x)", (x) => roundHalfAway(x, 0)),
  roundTo: {
    minArgs: 2,
    maxArgs: 2,
    signature: "roundTo(x, digits)",
    fn: (args, ctx) => {
      const x = numberArg(args, 0, ctx);
      const digits = integerArg(args, 1, ctx);
      if (digits < -15 || digits > 15) throw badValue(ctx, `digits must be between -15 and 15, got ${digits}`);
      return roundHalfAway(x, digits);
    },
  },
  pow: {
    minArgs: 2,
    maxArgs: 2,
    signature: "pow(x, y)",
    fn: (args, ctx) => finite(numberArg(args, 0, ctx) ** numberArg(args, 1, ctx), ctx),
  },
  min: extreme("min(x, ...) | min(list)", (a, b) => a < b),
  max: extreme("max(x, ...) | max(list)", (a, b) => a > b),
};
