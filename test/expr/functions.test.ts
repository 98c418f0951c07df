import { describe, expect, test } from "bun:test";
import {
  compileExpression,
  defaultFunctions,
  ExpressionEvalError,
  FunctionCallError,
  FunctionRegistry,
} from "../../src/expr/index.ts";
import { compileError, evalError, run } from "./helpers.ts";

describe("math functions", () => {
  test("abs, floor, ceil and sqrt work on numbers", () => {
    expect(run("abs(-3.5)")).toBe(3.5);
    expect(run("floor(2.7)")).toBe(2);
    expect(run("floor(-2.1)")).toBe(-3);
    expect(run("ceil(2.1)")).toBe(3);
    expect(run("sqrt(16)")).toBe(4);
  });

  test("round rounds half away from zero", () => {
    expect(run("round(2.5)")).toBe(3);
    expect(run("round(-2.5)")).toBe(-3);
    expect(run("round(2.4)")).toBe(2);
    expect(Object.is(run("round(-0.4)"), 0)).toBe(true);
  });

  test("roundTo rounds to decimal digits, decimal-looking halves up", () => {
    expect(run("roundTo(3.14159, 2)")).toBe(3.14);
    expect(run("roundTo(1.005, 2)")).toBe(1.01);
    expect(run("roundTo(-1.005, 2)")).toBe(-1.01);
    expect(run("roundTo(1234.5, -2)")).toBe(1200);
    expect(run("roundTo(2.5, 0)")).toBe(3);
  });

  test("roundTo rejects digits that are not whole or out of range", () => {
    expect(evalError("roundTo(1, 1.5)").reason).toBe("function_error");
    expect(evalError("roundTo(1, 16)").reason).toBe("function_error");
  });

  test("pow raises to a power", () => {
    expect(run("pow(2, 10)")).toBe(1024);
    expect(run("pow(4, 0.5)")).toBe(2);
  });

  test("a math function that would give NaN fails instead", () => {
    const e = evalError("sqrt(-1)");
    expect(e.reason).toBe("function_error");
    expect(e.detail).toBe("sqrt(): the result is not a number");
    expect(evalError("pow(-8, 0.5)").reason).toBe("function_error");
  });

  test("min and max take numbers or strings, as arguments or one list", () => {
    expect(run("min(3, 1, 2)")).toBe(1);
    expect(run("max(3, 1, 2)")).toBe(3);
    expect(run("min([3, 1, 2])")).toBe(1);
    expect(run("max(l)", { l: [4, 9, 2] })).toBe(9);
    expect(run("min('b', 'a')")).toBe("a");
    expect(run("max(7)")).toBe(7);
    expect(run("min([])")).toBe(null);
  });

  test("min and max give null when any value is null", () => {
    expect(run("min(1, x)", {})).toBe(null);
    expect(run("max([1, null])")).toBe(null);
  });

  test("min and max reject mixed or unordered kinds", () => {
    expect(evalError("min(1, 'a')").reason).toBe("type_error");
    expect(evalError("max(true, false)").reason).toBe("type_error");
    expect(evalError("max([[1]])").reason).toBe("type_error");
  });

  test("math functions pass null through and reject non-numbers", () => {
    for (const f of ["abs", "round", "floor", "ceil", "sqrt"]) {
      expect(run(`${f}(x)`, {})).toBe(null);
      const e = evalError(`${f}('1')`);
      expect(e.reason).toBe("type_error");
      expect(e.detail).toBe(`${f}() expects its first argument to be a number, got string`);
    }
    expect(run("pow(x, 2)", {})).toBe(null);
    expect(run("roundTo(1.5, x)", {})).toBe(null);
    expect(evalError("pow(2, '2')").reason).toBe("type_error");
  });
});

describe("string functions", () => {
  test("lower, upper and trim", () => {
    expect(run("lower('AbC')")).toBe("abc");
    expect(run("upper('AbC')")).toBe("ABC");
    expect(run("trim('  a b \\n')")).toBe("a b");
  });

  test("substring takes a start and an optional length", () => {
    expect(run("substring('hello', 1)")).toBe("ello");
    expect(run("substring('hello', 1, 3)")).toBe("ell");
    expect(run("substring('hello', 3, 10)")).toBe("lo");
    expect(run("substring('hello', 10)")).toBe("");
    expect(run("substring('hello', 0, 0)")).toBe("");
  });

  test("a negative start counts from the end", () => {
    expect(run("substring('hello', -3)")).toBe("llo");
    expect(run("substring('hello', -3, 2)")).toBe("ll");
    expect(run("substring('hello', -10, 2)")).toBe("he");
  });

  test("substring rejects a negative length and fractional positions", () => {
    expect(evalError("substring('hello', 1, -1)").reason).toBe("function_error");
    expect(evalError("substring('hello', 1.5)").reason).toBe("function_error");
  });

  test("startsWith and endsWith", () => {
    expect(run("startsWith('hello', 'he')")).toBe(true);
    expect(run("startsWith('hello', 'lo')")).toBe(false);
    expect(run("endsWith('hello', 'lo')")).toBe(true);
    expect(run("endsWith('hello', '')")).toBe(true);
  });

  test("split cuts on a separator", () => {
    expect(run("split('a,b,,c', ',')")).toEqual(["a", "b", "", "c"]);
    expect(run("split('abc', '')")).toEqual(["a", "b", "c"]);
    expect(run("split('', ',')")).toEqual([""]);
  });

  test("replace replaces every literal occurrence", () => {
    expect(run("replace('a.b.c', '.', '-')")).toBe("a-b-c");
    expect(run("replace('aaa', 'a', '$&')")).toBe("$&$&$&");
    expect(run("replace('abc', '', 'x')")).toBe("abc");
  });

  test("matches tests a regular expression anywhere in the string", () => {
    expect(run("matches('order-123', '[0-9]+')")).toBe(true);
    expect(run("matches('order', '^[0-9]+$')")).toBe(false);
    expect(run("matches(s, p)", { s: "abc", p: "^a" })).toBe(true);
  });

  test("matches takes optional flags i, m, s, u", () => {
    expect(run("matches('ABC', '^abc$', 'i')")).toBe(true);
    expect(run("matches('a\\nb', '^b$', 'm')")).toBe(true);
    expect(compileError("matches('a', 'a', 'g')").reason).toBe("invalid_argument");
  });

  test("a literal pattern is compiled once; an invalid one is a compile error", () => {
    const e = compileError("matches(s, '(')");
    expect(e.reason).toBe("invalid_argument");
    expect(e.column).toBe(1);
  });

  test("an invalid pattern computed at run time is a function_error", () => {
    const e = evalError("matches(s, p)", { s: "abc", p: "(" });
    expect(e.reason).toBe("function_error");
    expect(e.detail).toContain("invalid regex");
  });

  test("run-time patterns are cached per call site and still honoured row by row", () => {
    const e = compileExpression("matches(s, p)");
    for (let i = 0; i < 100; i++) {
      expect(e.evaluate({ s: `x${i}`, p: `^x${i}$` })).toBe(true);
      expect(e.evaluate({ s: `x${i}`, p: `^x${i + 1}$` })).toBe(false);
    }
  });

  test("string functions pass null through and reject non-strings", () => {
    for (const call of ["lower(x)", "upper(x)", "trim(x)", "substring(x, 1)", "startsWith(x, 'a')", "endsWith('a', x)", "split(x, ',')", "replace(x, 'a', 'b')", "matches(x, 'a')", "matches('a', x)"]) {
      expect(run(call, {})).toBe(null);
    }
    for (const call of ["lower(1)", "upper(true)", "trim([])", "substring(1, 1)", "startsWith(1, 'a')", "endsWith('a', 1)", "split('a', 1)", "replace('a', 1, 'b')", "matches(1, 'a')"]) {
      expect(evalError(call).reason).toBe("type_error");
    }
  });
});

describe("polymorphic and list functions", () => {
  test("length counts string code units, list items or object keys", () => {
    expect(run("length('héllo')")).toBe(5);
    expect(run("length([1, 2, 3])")).toBe(3);
    expect(run("length(o)", { o: { a: 1, b: 2 } })).toBe(2);
    expect(run("length(x)", {})).toBe(null);
    expect(evalError("length(5)").reason).toBe("type_error");
  });

  test("contains dispatches like in: list item, substring, object key", () => {
    expect(run("contains([1, [2]], [2])")).toBe(true);
    expect(run("contains([1, 2], 3)")).toBe(false);
    expect(run("contains('hello', 'ell')")).toBe(true);
    expect(run("contains(o, 'a')", { o: { a: 1 } })).toBe(true);
    expect(run("contains([1, null], x)", {})).toBe(true);
    expect(run("contains(x, 1)", {})).toBe(null);
    expect(run("contains('abc', x)", {})).toBe(null);
    expect(evalError("contains('abc', 1)").reason).toBe("type_error");
    expect(evalError("contains(5, 1)").reason).toBe("type_error");
  });

  test("join joins items with a separator, ',' by default", () => {
    expect(run("join(['a', 'b'], '-')")).toBe("a-b");
    expect(run("join(['a', 'b'])")).toBe("a,b");
    expect(run("join([1, true, null, [2], 'x'], '|')")).toBe("1|true||[2]|x");
    expect(run("join([], '-')")).toBe("");
    expect(run("join(x, '-')", {})).toBe(null);
    expect(evalError("join('ab', '-')").reason).toBe("type_error");
    expect(evalError("join(['a'], 1)").reason).toBe("type_error");
  });

  test("first and last return an end item, null for an empty list", () => {
    expect(run("first([1, 2, 3])")).toBe(1);
    expect(run("last([1, 2, 3])")).toBe(3);
    expect(run("first([])")).toBe(null);
    expect(run("last(x)", {})).toBe(null);
    expect(evalError("first('abc')").reason).toBe("type_error");
  });
});

describe("null handling functions", () => {
  test("coalesce returns its first non-null argument", () => {
    expect(run("coalesce(a, b, 0)", { b: 2 })).toBe(2);
    expect(run("coalesce(a, b)", {})).toBe(null);
    expect(run("coalesce(false, 1)")).toBe(false);
    expect(run("coalesce(x)", { x: "v" })).toBe("v");
  });

  test("isNull tells null from everything else", () => {
    expect(run("isNull(x)", {})).toBe(true);
    expect(run("isNull(x)", { x: 0 })).toBe(false);
    expect(run("isNull(x.y)", { x: {} })).toBe(true);
  });
});

describe("conversion functions", () => {
  test("toNumber parses decimal text and passes numbers through", () => {
    expect(run("toNumber('42')")).toBe(42);
    expect(run("toNumber(' -1.5e2 ')")).toBe(-150);
    expect(run("toNumber('.5')")).toBe(0.5);
    expect(run("toNumber(7)")).toBe(7);
    expect(run("toNumber(true)")).toBe(1);
    expect(run("toNumber(false)")).toBe(0);
  });

  test("toNumber gives null for text that is not a number", () => {
    expect(run("toNumber('abc')")).toBe(null);
    expect(run("toNumber('')")).toBe(null);
    expect(run("toNumber('NaN')")).toBe(null);
    expect(run("toNumber('0x10')")).toBe(null);
    expect(run("toNumber('12abc')")).toBe(null);
    expect(run("coalesce(toNumber(q), 0)", { q: "n/a" })).toBe(0);
  });

  test("toNumber passes null through and rejects lists and objects", () => {
    expect(run("toNumber(x)", {})).toBe(null);
    expect(evalError("toNumber([1])").reason).toBe("type_error");
  });

  test("toString renders numbers, booleans, and lists and objects as JSON", () => {
    expect(run("toString(42)")).toBe("42");
    expect(run("toString(0.5)")).toBe("0.5");
    expect(run("toString(true)")).toBe("true");
    expect(run("toString('s')")).toBe("s");
    expect(run("toString([1, 'a'])")).toBe('[1,"a"]');
    expect(run("toString(o)", { o: { a: null } })).toBe('{"a":null}');
    expect(run("toString(x)", {})).toBe(null);
  });

  test("typeOf names the kind of a value", () => {
    expect(run("[typeOf(x), typeOf(true), typeOf(1), typeOf('a'), typeOf([]), typeOf(o)]", { o: {} })).toEqual([
      "null", "boolean", "number", "string", "list", "object",
    ]);
  });
});

describe("time functions", () => {
  const fixed = FunctionRegistry.defaults({ clock: () => 1_700_000_000_000 });

  test("now reads the injected clock, on every evaluation", () => {
    let t = 5;
    const functions = defaultFunctions.clone({ clock: () => t });
    const e = compileExpression("now()", { functions });
    expect(e.evaluate({})).toBe(5);
    t = 6;
    expect(e.evaluate({})).toBe(6);
    expect(run("now() - ts", { ts: 1_699_999_999_000 }, { functions: fixed })).toBe(1000);
  });

  test("now defaults to the system clock", () => {
    const before = Date.now();
    const t = run("now()") as number;
    expect(t).toBeGreaterThanOrEqual(before);
    expect(t).toBeLessThanOrEqual(Date.now());
  });

  test("parseTime reads ISO-8601 dates and times to epoch ms", () => {
    expect(run("parseTime('1970-01-01T00:00:00Z')")).toBe(0);
    expect(run("parseTime('2024-03-01T12:30:05.123Z')")).toBe(Date.UTC(2024, 2, 1, 12, 30, 5, 123));
    expect(run("parseTime('2024-03-01T12:30:05+02:00')")).toBe(Date.UTC(2024, 2, 1, 10, 30, 5));
    expect(run("parseTime('2024-03-01T12:30-0130')")).toBe(Date.UTC(2024, 2, 1, 14, 0));
    expect(run("parseTime('2024-02-29')")).toBe(Date.UTC(2024, 1, 29));
    expect(run("parseTime('2024-03-01 12:30:05.123456789')")).toBe(Date.UTC(2024, 2, 1, 12, 30, 5, 123));
    expect(run("parseTime('0001-01-01T00:00:00Z')")).toBe(-62135596800000);
  });

  test("parseTime reads a time without an offset as UTC", () => {
    expect(run("parseTime('2024-03-01T12:00:00')")).toBe(Date.UTC(2024, 2, 1, 12));
  });

  test("parseTime gives null for text that is not a valid ISO-8601 time", () => {
    for (const text of ["yesterday", "2023-02-29", "2024-13-01", "2024-01-01T24:00:00Z", "2024-01-01T12:00:00+25:00", "2024-1-1", ""]) {
      expect(run("parseTime(t)", { t: text })).toBe(null);
    }
  });

  test("parseTime passes numbers and null through and rejects other kinds", () => {
    expect(run("parseTime(5)")).toBe(5);
    expect(run("parseTime(x)", {})).toBe(null);
    expect(evalError("parseTime(true)").reason).toBe("type_error");
  });

  test("toEpochMillis is parseTime by another name", () => {
    expect(run("toEpochMillis('1970-01-02T00:00:00Z')")).toBe(86_400_000);
  });

  test("formatTime and toIso write ISO-8601 in UTC", () => {
    expect(run("toIso(0)")).toBe("1970-01-01T00:00:00.000Z");
    expect(run("formatTime(1709296205123)")).toBe("2024-03-01T12:30:05.123Z");
    expect(run("toIso(-1)")).toBe("1969-12-31T23:59:59.999Z");
    expect(run("toIso(parseTime('2000-02-29T23:59:59.999Z'))")).toBe("2000-02-29T23:59:59.999Z");
  });

  test("formatTime takes a simple pattern: yyyy MM dd HH mm ss SSS, other text as is", () => {
    expect(run("formatTime(1709296205123, 'yyyy/MM/dd HH:mm:ss.SSS')")).toBe("2024/03/01 12:30:05.123");
    expect(run("formatTime(t, p)", { t: 1709296205123, p: "dd.MM.yyyy" })).toBe("01.03.2024");
    expect(run("formatTime(0, 'at HH')")).toBe("at 00");
  });

  test("formatTime fails for times outside years 0000 to 9999, and passes null through", () => {
    expect(evalError("toIso(1e17)").reason).toBe("function_error");
    expect(evalError("formatTime(253402300800000)").reason).toBe("function_error");
    expect(run("toIso(x)", {})).toBe(null);
    expect(evalError("toIso('2024')").reason).toBe("type_error");
  });

  test("formatTime and parseTime round-trip across the calendar", () => {
    for (let ms = -62135596800000; ms < 253402300799999; ms += 7_777_777_777_777 / 7) {
      const t = Math.floor(ms);
      expect(run("parseTime(toIso(t))", { t })).toBe(t);
      expect(run("toIso(t)", { t })).toBe(new Date(t).toISOString());
    }
  });
});

describe("calls", () => {
  test("an unknown function is a compile error at the name, with a hint for a near miss", () => {
    const e = compileError("1 + nope(x)");
    expect(e.reason).toBe("unknown_function");
    expect(e.column).toBe(5);
    expect(e.detail).toBe("no function named 'nope'");
    expect(compileError("LOWER(x)").detail).toBe("no function named 'LOWER' (did you mean lower()?)");
  });

  test("a wrong number of arguments is a compile error", () => {
    const e = compileError("substring('a')");
    expect(e.reason).toBe("arity");
    expect(e.detail).toBe("substring() takes 2 to 3 arguments, got 1; usage: substring(s, start[, length])");
    expect(compileError("lower('a', 'b')").detail).toContain("takes 1 argument, got 2");
    expect(compileError("coalesce()").detail).toContain("takes at least 1 argument");
    expect(compileError("now(1)").reason).toBe("arity");
  });

  test("a function error points at the call", () => {
    const e = evalError("x + sqrt(y)", { x: 1, y: -1 });
    expect(e.column).toBe(5);
    expect(e.message).toBe(`function error at 1:5 in "x + sqrt(y)": sqrt(): the result is not a number`);
  });

  test("calls with constant arguments are folded at compile time", () => {
    let calls = 0;
    const functions = defaultFunctions.extend({
      counted: { minArgs: 1, maxArgs: 1, fn: ([x]) => { calls++; return x!; } },
    });
    const e = compileExpression("counted(2) + x", { functions });
    expect(calls).toBe(1);
    expect(e.evaluate({ x: 1 })).toBe(3);
    expect(e.evaluate({ x: 2 })).toBe(4);
    expect(calls).toBe(1);
  });

  test("a failing constant call is left to fail at run time", () => {
    const e = compileExpression("x ? sqrt(-1) : 0");
    expect(e.evaluate({ x: false })).toBe(0);
    expect(() => e.evaluate({ x: true })).toThrow(ExpressionEvalError);
  });
});

describe("the function registry", () => {
  test("defaultFunctions holds every built-in", () => {
    expect(defaultFunctions.names()).toEqual([
      "abs", "ceil", "coalesce", "contains", "endsWith", "first", "floor", "formatTime", "isNull", "join", "last",
      "length", "lower", "matches", "max", "min", "now", "parseTime", "pow", "replace", "round", "roundTo",
      "split", "sqrt", "startsWith", "substring", "toEpochMillis", "toIso", "toNumber", "toString", "trim",
      "typeOf", "upper",
    ]);
    expect(defaultFunctions.has("lower")).toBe(true);
    expect(defaultFunctions.get("lower")?.minArgs).toBe(1);
    expect(defaultFunctions.get("nope")).toBeUndefined();
  });

  test("defaultFunctions is shared and refuses register", () => {
    expect(defaultFunctions.sealed).toBe(true);
    expect(() => defaultFunctions.register("x", { minArgs: 0, maxArgs: 0, fn: () => 1 })).toThrow(TypeError);
  });

  test("users extend a copy with their own functions", () => {
    const functions = defaultFunctions.extend({
      double: { minArgs: 1, maxArgs: 1, fn: ([x]) => (x as number) * 2 },
    });
    functions.register("greet", { minArgs: 0, maxArgs: 1, fn: (args) => `hi ${args[0] ?? "there"}` });
    expect(run("double(qty) + length(greet('bob'))", { qty: 4 }, { functions })).toBe(14);
    expect(defaultFunctions.has("double")).toBe(false);
    expect(compileError("double(1)").reason).toBe("unknown_function");
  });

  test("a user function may replace a built-in", () => {
    const functions = FunctionRegistry.defaults();
    functions.register("upper", { minArgs: 1, maxArgs: 1, fn: () => "replaced" });
    expect(run("upper('a')", {}, { functions })).toBe("replaced");
  });

  test("a compiled expression keeps the functions it was compiled with", () => {
    const functions = FunctionRegistry.defaults().register("f", { minArgs: 0, maxArgs: 0, pure: false, fn: () => 1 });
    const e = compileExpression("f()", { functions });
    functions.register("f", { minArgs: 0, maxArgs: 0, pure: false, fn: () => 2 });
    expect(e.evaluate({})).toBe(1);
  });

  test("clone copies, so later changes do not leak back", () => {
    const a = FunctionRegistry.defaults();
    const b = a.clone();
    b.register("only_b", { minArgs: 0, maxArgs: 0, fn: () => 1 });
    expect(a.has("only_b")).toBe(false);
    expect(b.has("lower")).toBe(true);
  });

  test("register checks the name and the arity", () => {
    const r = new FunctionRegistry();
    expect(() => r.register("bad name", { minArgs: 0, maxArgs: 0, fn: () => 1 })).toThrow(TypeError);
    expect(() => r.register("in", { minArgs: 0, maxArgs: 0, fn: () => 1 })).toThrow(TypeError);
    expect(() => r.register("f", { minArgs: 2, maxArgs: 1, fn: () => 1 })).toThrow(TypeError);
    expect(() => r.register("f", { minArgs: -1, maxArgs: 1, fn: () => 1 })).toThrow(TypeError);
    expect(r.register("v", { minArgs: 0, maxArgs: Infinity, fn: (args) => args.length }).has("v")).toBe(true);
  });

  test("user functions get null-propagation by default and can opt out", () => {
    let seen = 0;
    const functions = defaultFunctions.extend({
      strict: { minArgs: 1, maxArgs: 1, fn: () => { seen++; return 1; } },
      lenient: { minArgs: 1, maxArgs: 1, nullPropagating: false, fn: ([x]) => (x === null ? "was null" : "not null") },
    });
    expect(run("strict(x)", {}, { functions })).toBe(null);
    expect(seen).toBe(0);
    expect(run("lenient(x)", {}, { functions })).toBe("was null");
  });

  test("whatever a user function throws becomes an ExpressionEvalError pointing at the call", () => {
    const functions = defaultFunctions.extend({
      boom: { minArgs: 0, maxArgs: 1, pure: false, fn: () => { throw new RangeError("kaboom"); } },
      picky: { minArgs: 1, maxArgs: 1, fn: () => { throw new FunctionCallError("picky() wants a fish", "type_error"); } },
      nothing: { minArgs: 0, maxArgs: 0, pure: false, fn: () => undefined as unknown as null },
    });
    const e = evalError("1 + boom()", {}, { functions });
    expect(e.reason).toBe("function_error");
    expect(e.detail).toBe("boom() failed: kaboom");
    expect(e.column).toBe(5);
    expect(e.cause).toBeInstanceOf(RangeError);
    const p = evalError("picky(1)", {}, { functions });
    expect(p.reason).toBe("type_error");
    expect(p.detail).toBe("picky() wants a fish");
    expect(run("nothing()", {}, { functions })).toBe(null);
  });

  test("a specialize hook sees constant arguments at compile time and can reject them", () => {
    const seen: unknown[] = [];
    const functions = defaultFunctions.extend({
      pick: {
        minArgs: 2,
        maxArgs: 2,
        fn: ([a]) => a!,
        specialize: (constants) => {
          seen.push([...constants]);
          if (constants[1] === "bad") throw new FunctionCallError("pick(): 'bad' is not allowed");
          return ([a, b]) => `${a}/${b}`;
        },
      },
    });
    expect(run("pick(x, 'k')", { x: "v" }, { functions })).toBe("v/k");
    expect(seen).toEqual([[undefined, "k"]]);
    const e = compileError("pick(x, 'bad')", { functions });
    expect(e.reason).toBe("invalid_argument");
    expect(e.detail).toBe("pick(): 'bad' is not allowed");
  });

  test("the context tells a function its name and where it was called", () => {
    const functions = defaultFunctions.extend({
      where: { minArgs: 0, maxArgs: 0, fn: (_args, ctx) => `${ctx.name}@${ctx.position} in ${ctx.source}` },
    });
    expect(run("'x' + where()", {}, { functions })).toBe("xwhere@6 in 'x' + where()");
  });
});

describe("constant results", () => {
  test("a folded function result is copied before it is frozen, so the function's own data stays writable", () => {
    const table = { a: [1, 2] };
    const functions = defaultFunctions.extend({ config: { minArgs: 0, maxArgs: 0, fn: () => table } });
    const e = compileExpression("config()", { functions });
    expect(e.evaluate({})).toEqual({ a: [1, 2] });
    expect(Object.isFrozen(e.evaluate({}))).toBe(true);
    expect(Object.isFrozen(table)).toBe(false);
    table.a.push(3);
    expect(e.evaluate({})).toEqual({ a: [1, 2] });
  });
});
