/**
 * String functions: lower, upper, trim, substring, startsWith, endsWith, split, replace,
 * matches. Lengths and offsets count UTF-16 code units, like JavaScript strings.
 */
import { FunctionCallError, type FunctionBody, type FunctionContext, type FunctionDef } from "../function-def.ts";
import type { Value } from "../value.ts";
import { badValue, integerArg, stringArg } from "./args.ts";

function stringTest(signature: string, f: (s: string, t: string) => boolean): FunctionDef {
  return { minArgs: 2, maxArgs: 2, signature, fn: (args, ctx) => f(stringArg(args, 0, ctx), stringArg(args, 1, ctx)) };
}

/** Flags `matches()` accepts: case-insensitive, multi-line, dot-all, unicode. */
const allowedFlags = /^[imsu]*$/;

function compileRegex(pattern: string, flags: string, ctx: FunctionContext): RegExp {
  if (!allowedFlags.test(flags)) throw badValue(ctx, `unsupported regex flags ${JSON.stringify(flags)} (use i, m, s, u)`);
  try {
    return new RegExp(pattern, flags);
  } catch (e) {
    throw badValue(ctx, `invalid regex ${JSON.stringify(pattern)}: ${(e as Error).message}`);
  }
}

/** How many distinct run-time patterns one call site keeps compiled. */
const REGEX_CACHE_SIZE = 32;

const matches: FunctionDef = {
  minArgs: 2,
  maxArgs: 3,
  signature: "matches(s, pattern[, flags])",
  fn: (args, ctx) => {
    const s = stringArg(args, 0, ctx);
    const flags = args.length > 2 ? stringArg(args, 2, ctx) : "";
    return compileRegex(stringArg(args, 1, ctx), flags, ctx).test(s);
  },
  specialize: (constants, ctx): FunctionBody => {
    const pattern = constants[1];
    const flags = constants.length > 2 ? constants[2] : "";
    if (typeof pattern === "string" && typeof flags === "string") {
      // A literal pattern is compiled once, here; a bad one fails the compile.
      const regex = compileRegex(pattern, flags, ctx);
      return (args, c) => regex.test(stringArg(args, 0, c));
    }
    if (pattern !== undefined && pattern !== null && typeof pattern !== "string") {
      throw new FunctionCallError(`matches() expects its second argument to be a string`, "type_error");
    }
    // Patterns computed per row: keep the recent ones compiled, per call site.
    const cache = new Map<string, RegExp>();
    return (args, c) => {
      const s = stringArg(args, 0, c);
      const p = stringArg(args, 1, c);
      const f = args.length > 2 ? stringArg(args, 2, c) : "";
      const key = `${f}/${p}`;
      let regex = cache.get(key);
      if (regex === undefined) {
        regex = compileRegex(p, f, c);
        if (cache.size >= REGEX_CACHE_SIZE) cache.delete(cache.keys().next().value!);
        cache.set(key, regex);
      }
      return regex.test(s);
    };
  },
};

export const textFunctions: Record<string, FunctionDef> = {
  // Spelled out rather than built by a helper, so each body is its own code for the JIT.
  lower: { minArgs: 1, maxArgs: 1, signature: "lower(s)", fn: (args, ctx) => stringArg(args, 0, ctx).toLowerCase() },
  upper: { minArgs: 1, maxArgs: 1, signature: "upper(s)", fn: (args, ctx) => stringArg(args, 0, ctx).toUpperCase() },
  trim: { minArgs: 1, maxArgs: 1, signature: "trim(s)", fn: (args, ctx) => stringArg(args, 0, ctx).trim() },
  startsWith: stringTest("startsWith(s, prefix)", (s, t) => s.startsWith(t)),
  endsWith: stringTest("endsWith(s, suffix)", (s, t) => s.endsWith(t)),
  substring: {
    minArgs: 2,
    maxArgs: 3,
    signature: "substring(s, start[, length])",
    fn: (args, ctx): Value => {
      const s = stringArg(args, 0, ctx);
      let start = integerArg(args, 1, ctx);
      if (start < 0) start = Math.max(s.length + start, 0);
      if (args.length < 3) return s.slice(start);
      const length = integerArg(args, 2, ctx);
      if (length < 0) throw badValue(ctx, `length must not be negative, got ${length}`);
      return s.slice(start, start + length);
    },
  },
  split: {
    minArgs: 2,
    maxArgs: 2,
    signature: "split(s, separator)",
    fn: (args, ctx) => stringArg(args, 0, ctx).split(stringArg(args, 1, ctx)),
  },
  replace: {
    minArgs: 3,
    maxArgs: 3,
    signature: "replace(s, search, replacement)",
    fn: (args, ctx) => {
      const s = stringArg(args, 0, ctx);
      const search = stringArg(args, 1, ctx);
      const replacement = stringArg(args, 2, ctx);
      return search === "" ? s : s.split(search).join(replacement);
    },
  },
  matches,
};
