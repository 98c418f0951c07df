/**
 * Property tests: random expression trees printed as source, evaluated on random rows, and
 * random text thrown at the compiler. Whatever comes in, the only errors out are ours.
 */
import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import {
  compileExpression,
  defaultFunctions,
  ExpressionCompileError,
  ExpressionEvalError,
  type Row,
} from "../../src/expr/index.ts";

const COLUMNS = ["a", "b", "n", "s", "l", "o", "price", "sym", "constructor", "toString"];
const functions = defaultFunctions.clone({ clock: () => 1_700_000_000_000 });
const callable = functions.names().map((name) => ({ name, def: functions.get(name)! }));

/** A string literal in the dialect's syntax, escaping what must be escaped. */
function quote(s: string): string {
  let out = "";
  for (const c of s) {
    const code = c.codePointAt(0)!;
    if (c === "\\") out += "\\\\";
    else if (c === "'") out += "\\'";
    else if (c === "\n") out += "\\n";
    else if (c === "\t") out += "\\t";
    else if (c === "\r") out += "\\r";
    else if (code < 0x20) out += `\\u${code.toString(16).padStart(4, "0")}`;
    else out += c;
  }
  return `'${out}'`;
}

const paren = (s: string): string => `(${s})`;

/** Random expressions, printed to source. Operands are sometimes parenthesised, sometimes not. */
const expression = fc.letrec<{ expr: string; leaf: string }>((tie) => ({
  leaf: fc.oneof(
    fc.nat({ max: 1000 }).map(String),
    fc.double({ min: 0, max: 1e9, noNaN: true, noDefaultInfinity: true }).map(String),
    fc.string({ maxLength: 8 }).map(quote),
    fc.constantFrom("true", "false", "null"),
    fc.constantFrom(...COLUMNS),
  ),
  expr: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    tie("leaf"),
    fc.tuple(fc.constantFrom("-", "!"), tie("expr")).map(([op, x]) => `${op}${paren(x)}`),
    fc.tuple(
      tie("expr"),
      fc.constantFrom("*", "/", "%", "+", "-", "<", "<=", ">", ">=", "==", "!=", "in", "&&", "||"),
      tie("expr"),
      fc.boolean(),
    ).map(([l, op, r, bare]) => (bare ? `${l} ${op} ${r}` : `${paren(l)} ${op} ${paren(r)}`)),
    fc.tuple(tie("expr"), tie("expr"), tie("expr")).map(([t, a, b]) => `${paren(t)} ? ${paren(a)} : ${paren(b)}`),
    fc.tuple(tie("expr"), fc.constantFrom("x", "desk", "in", "k", "constructor", "__proto__", "length")).map(([o, f]) => `${paren(o)}.${f}`),
    fc.tuple(tie("expr"), tie("expr")).map(([o, i]) => `${paren(o)}[${i}]`),
    fc.array(tie("expr"), { maxLength: 3 }).map((items) => `[${items.join(", ")}]`),
    fc.constantFrom(...callable).chain(({ name, def }) =>
      fc.array(tie("expr"), { minLength: def.minArgs, maxLength: Math.min(def.maxArgs, def.minArgs + 2) })
        .map((args) => `${name}(${args.join(", ")})`),
    ),
  ),
})).expr;

const row: fc.Arbitrary<Row> = fc.record(
  Object.fromEntries(COLUMNS.map((c) => [c, fc.jsonValue({ maxDepth: 2 })])),
  { requiredKeys: [] },
) as fc.Arbitrary<Row>;

function isValue(v: unknown, depth = 0): boolean {
  if (depth > 50) return false;
  if (v === null || typeof v === "boolean" || typeof v === "number" || typeof v === "string") return true;
  if (Array.isArray(v)) return v.every((x) => isValue(x, depth + 1));
  if (typeof v === "object" && Object.getPrototypeOf(v) === Object.prototype) {
    return Object.values(v as object).every((x) => isValue(x, depth + 1));
  }
  return false;
}

/** Compiles; an invalid constant regex or flags is the one compile error a printed tree may hit. */
function compiles(source: string) {
  try {
    return compileExpression(source, { functions });
  } catch (e) {
    if (e instanceof ExpressionCompileError && e.reason === "invalid_argument") return undefined;
    throw e;
  }
}

describe("random expressions on random rows", () => {
  test("evaluation returns a Value or throws ExpressionEvalError, and nothing else", () => {
    let values = 0;
    let errors = 0;
    fc.assert(
      fc.property(expression, fc.array(row, { minLength: 1, maxLength: 4 }), (source, rows) => {
        const compiled = compiles(source);
        if (compiled === undefined) return;
        for (const r of rows) {
          let first: unknown;
          try {
            first = compiled.evaluate(r);
          } catch (e) {
            if (!(e instanceof ExpressionEvalError)) throw e;
            expect(e.position).toBeGreaterThanOrEqual(0);
            expect(e.position).toBeLessThanOrEqual(source.length);
            errors++;
            continue;
          }
          values++;
          expect(isValue(first)).toBe(true);
          // Same row, same answer: no state leaks between evaluations.
          expect(compiled.evaluate(r)).toEqual(first as never);
        }
      }),
      { numRuns: 1500 },
    );
    console.log(`random expressions: ${values} values, ${errors} eval errors`);
    expect(values).toBeGreaterThan(0);
    expect(errors).toBeGreaterThan(0);
  });

  test("printed trees always parse: the only compile error is an invalid constant argument", () => {
    fc.assert(
      fc.property(expression, (source) => {
        compiles(source);
      }),
      { numRuns: 1500 },
    );
  });

  test("columns lists only names the source mentions, each once", () => {
    fc.assert(
      fc.property(expression, (source) => {
        const compiled = compiles(source);
        if (compiled === undefined) return;
        expect(new Set(compiled.columns).size).toBe(compiled.columns.length);
        for (const c of compiled.columns) expect(COLUMNS).toContain(c);
      }),
      { numRuns: 500 },
    );
  });
});

describe("random text", () => {
  /** Text built from the dialect's own tokens reaches deeper into the parser than noise does. */
  const tokens = fc.array(
    fc.constantFrom(
      "a", "b.c", "1", "2.5", "1e3", "'x'", '"y"', "true", "null", "in", "(", ")", "[", "]", ",", ".", "?", ":",
      "+", "-", "*", "/", "%", "!", "<", "<=", "==", "!=", "&&", "||", "=", "&", "lower(", "substring(", "coalesce(",
      "matches(", "'('", "`q`", "\\", "'", "\n",
    ),
    { maxLength: 25 },
  ).map((parts) => parts.join(" "));

  for (const [name, text] of [["noise", fc.string({ maxLength: 40, unit: "binary" })], ["token soup", tokens]] as const) {
    test(`compiling ${name} either succeeds or throws ExpressionCompileError`, () => {
      fc.assert(
        fc.property(text, fc.constantFrom<"fv" | "cel">("fv", "cel"), (source, language) => {
          let compiled;
          try {
            compiled = compileExpression(source, { language, functions });
          } catch (e) {
            if (!(e instanceof ExpressionCompileError)) throw e;
            expect(e.line).toBeGreaterThanOrEqual(1);
            expect(e.column).toBeGreaterThanOrEqual(1);
            return;
          }
          try {
            expect(isValue(compiled.evaluate({ a: 1, b: { c: [2] } }))).toBe(true);
          } catch (e) {
            if (!(e instanceof ExpressionEvalError)) throw e;
          }
        }),
        { numRuns: 3000 },
      );
    });
  }
});
