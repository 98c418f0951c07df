/** Conversions: toNumber, toString, typeOf. */
import type { FunctionDef } from "../function-def.ts";
import { kindOf, type Value } from "../value.ts";
import { render, wrongKind } from "./args.ts";

/** Decimal numbers as people write them: optional sign, digits, fraction, exponent. */
const numeric = /^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$/;

/** Parses a decimal string; anything else (including "", "NaN", "0x10") gives null. */
export function parseNumber(s: string): number | null {
  const t = s.trim();
  return numeric.test(t) ? Number(t) : null;
}

export const conversionFunctions: Record<string, FunctionDef> = {
  toNumber: {
    minArgs: 1,
    maxArgs: 1,
    signature: "toNumber(x)",
    fn: (args, ctx) => {
      const v = args[0]!;
      if (typeof v === "number") return v;
      if (typeof v === "string") return parseNumber(v);
      if (typeof v === "boolean") return v ? 1 : 0;
      throw wrongKind(ctx, 0, "a number, a string or a boolean", v);
    },
  },
  toString: {
    minArgs: 1,
    maxArgs: 1,
    signature: "toString(x)",
    fn: (args: readonly Value[]) => render(args[0]!),
  },
  typeOf: {
    minArgs: 1,
    maxArgs: 1,
    nullPropagating: false,
    signature: "typeOf(x)",
    fn: (args) => kindOf(args[0]),
  },
};
