/**
 * Functions over lists (and, where it makes sense, strings and objects): length, contains,
 * join, first, last. `length` and `contains` dispatch on the kind of their first argument.
 */
import type { FunctionDef } from "../function-def.ts";
import { isObject, valuesEqual, type Value } from "../value.ts";
import { listArg, render, stringArg, wrongKind } from "./args.ts";

/** `contains(h, x)` is `x in h`: list membership by deep equality, substring, object key. */
export function containsValue(haystack: Value, needle: Value): boolean | null | "type_error" {
  if (Array.isArray(haystack)) {
    for (let i = 0; i < haystack.length; i++) if (valuesEqual(needle, haystack[i])) return true;
    return false;
  }
  if (haystack === null) return null;
  if (typeof haystack === "string" || isObject(haystack)) {
    if (needle === null) return null;
    if (typeof needle !== "string") return "type_error";
    return typeof haystack === "string" ? haystack.includes(needle) : Object.hasOwn(haystack, needle);
  }
  return "type_error";
}

export const collectionFunctions: Record<string, FunctionDef> = {
  length: {
    minArgs: 1,
    maxArgs: 1,
    signature: "length(string | list | object)",
    fn: (args, ctx) => {
      const v = args[0]!;
      if (typeof v === "string" || Array.isArray(v)) return v.length;
      if (isObject(v)) return Object.keys(v).length;
      throw wrongKind(ctx, 0, "a string, a list or an object", v);
    },
  },
  contains: {
    minArgs: 2,
    maxArgs: 2,
    nullPropagating: false,
    signature: "contains(string | list | object, x)",
    fn: (args, ctx) => {
      const haystack = args[0]!;
      const result = containsValue(haystack, args[1]!);
      if (result !== "type_error") return result;
      if (typeof haystack === "string" || isObject(haystack)) throw wrongKind(ctx, 1, "a string", args[1]);
      throw wrongKind(ctx, 0, "a string, a list or an object", haystack);
    },
  },
  join: {
    minArgs: 1,
    maxArgs: 2,
    signature: "join(list[, separator])",
    fn: (args, ctx) => {
      const list = listArg(args, 0, ctx);
      const separator = args.length > 1 ? stringArg(args, 1, ctx) : ",";
      let out = "";
      for (let i = 0; i < list.length; i++) {
        if (i > 0) out += separator;
        const item = list[i]!;
        if (item !== null) out += render(item);
      }
      return out;
    },
  },
  first: {
    minArgs: 1,
    maxArgs: 1,
    signature: "first(list)",
    fn: (args, ctx) => {
      const list = listArg(args, 0, ctx);
      return list.length > 0 ? list[0]! : null;
    },
  },
  last: {
    minArgs: 1,
    maxArgs: 1,
    signature: "last(list)",
    fn: (args, ctx) => {
      const list = listArg(args, 0, ctx);
      return list.length > 0 ? list[list.length - 1]! : null;
    },
  },
};
