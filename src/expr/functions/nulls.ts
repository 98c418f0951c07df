/** Null handling: coalesce, isNull. Neither propagates null; that is their point. */
import type { FunctionDef } from "../function-def.ts";

export const nullFunctions: Record<string, FunctionDef> = {
  coalesce: {
    minArgs: 1,
    maxArgs: Infinity,
    nullPropagating: false,
    signature: "coalesce(x, ...)",
    fn: (args) => {
      for (let i = 0; i < args.length; i++) if (args[i] !== null) return args[i]!;
      return null;
    },
  },
  isNull: {
    minArgs: 1,
    maxArgs: 1,
    nullPropagating: false,
    signature: "isNull(x)",
    fn: (args) => args[0] === null,
  },
};
