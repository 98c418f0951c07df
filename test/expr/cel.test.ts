import { describe, expect, test } from "bun:test";
import { compileExpression, ExpressionEvalError } from "../../src/expr/index.ts";
import { compileError, evalError, run } from "./helpers.ts";

const cel = { language: "cel" } as const;

describe("CEL expressions", () => {
  test("row columns are CEL variables", () => {
    const row = { price: 150, sym: "ABC", qty: 12, meta: { desk: "eq", limits: [1, 2] } };
    expect(run("price > 100.0 && sym != 'XYZ' && qty >= 10.0", row, cel)).toBe(true);
    expect(run("price * qty", row, cel)).toBe(1800);
    expect(run("meta.desk + '/' + sym", row, cel)).toBe("eq/ABC");
    expect(run("meta.limits[1]", row, cel)).toBe(2);
    expect(run("has(meta.desk) && !has(meta.nope)", row, cel)).toBe(true);
    expect(run("meta.limits.exists(x, x > 1.0)", row, cel)).toBe(true);
  });

  test("the compiled expression says it is CEL and lists the columns it reads", () => {
    const e = compileExpression("a + b.c + size(d.map(x, x)) + a", cel);
    expect(e.language).toBe("cel");
    expect(e.source).toBe("a + b.c + size(d.map(x, x)) + a");
    expect(e.columns).toEqual(["a", "b", "d"]);
  });

  test("results become Values: ints and uints numbers, maps objects, bytes base64", () => {
    expect(run("1 + 2", {}, cel)).toBe(3);
    expect(run("7u", {}, cel)).toBe(7);
    expect(run("2.5", {}, cel)).toBe(2.5);
    expect(run("'s'", {}, cel)).toBe("s");
    expect(run("null", {}, cel)).toBe(null);
    expect(run("[1, 'a', [true]]", {}, cel)).toEqual([1, "a", [true]]);
    expect(run("{'k': 1, 2: 'two', true: [1u]}", {}, cel)).toEqual({ k: 1, "2": "two", true: [1] });
    expect(run("b'ab'", {}, cel)).toBe("YWI=");
  });

  test("timestamps become epoch ms, durations ms and types their names", () => {
    expect(run("timestamp('2024-03-01T12:30:05.123Z')", {}, cel)).toBe(Date.UTC(2024, 2, 1, 12, 30, 5, 123));
    expect(run("duration('1.5s')", {}, cel)).toBe(1500);
    expect(run("type(1)", {}, cel)).toBe("int");
  });

  test("the strings extension is loaded", () => {
    expect(run("s.lowerAscii() + s.replace('B', '-')", { s: "ABC" }, cel)).toBe("abcA-C");
    expect(run("s.split(',')", { s: "a,b" }, cel)).toEqual(["a", "b"]);
  });

  test("JSON numbers are CEL doubles, so mixing them with int literals is a type error", () => {
    const e = evalError("qty + 1", { qty: 2 }, cel);
    expect(e.reason).toBe("type_error");
    expect(e.detail).toContain("no matching overload");
    expect(run("qty + 1.0", { qty: 2 }, cel)).toBe(3);
    expect(run("int(qty) + 1", { qty: 2 }, cel)).toBe(3);
  });

  test("a parse error is a compile error with reason cel and its place", () => {
    const e = compileError("price > > 1", cel);
    expect(e.reason).toBe("cel");
    // CEL's parser points where the rule it could not finish began: the first '>'.
    expect([e.line, e.column]).toEqual([1, 7]);
    expect(e.message).toBe(`CEL error at 1:7 in "price > > 1": found > but expecting end of input`);
    const multi = compileError("a &&\n  b c", cel);
    expect([multi.line, multi.column, multi.position]).toEqual([2, 5, 9]);
  });

  test("an unknown function is a compile error", () => {
    const e = compileError("x + frob(1)", cel);
    expect(e.reason).toBe("cel");
    expect(e.detail).toBe("undeclared reference to 'frob'");
    expect(e.column).toBe(5);
  });

  test("run-time errors are ExpressionEvalErrors with a reason", () => {
    expect(evalError("1 / 0", {}, cel).reason).toBe("division_by_zero");
    expect(evalError("5 % x", { x: 0n }, cel).reason).toBe("division_by_zero");
    expect(evalError("'a' < 1", {}, cel).reason).toBe("type_error");
    expect(evalError("{'a': 1}.b", {}, cel).reason).toBe("cel_error");
    expect(evalError("int('x')", {}, cel).reason).toBe("cel_error");
  });

  test("a column the row lacks is an unbound variable, a CEL error", () => {
    const e = evalError("missing > 1.0", {}, cel);
    expect(e.reason).toBe("cel_error");
    expect(run("missing > 1.0 || true", {}, cel)).toBe(true);
  });

  test("keys the row inherits are never visible", () => {
    expect(evalError("constructor", {}, cel).reason).toBe("cel_error");
    expect(run("constructor", { constructor: 3 }, cel)).toBe(3);
  });

  test("a row value CEL cannot take is an ExpressionEvalError", () => {
    expect(() => compileExpression("d", cel).evaluate({ d: new Date() })).toThrow(ExpressionEvalError);
    expect(() => compileExpression("d", cel).evaluate({ d: () => 1 })).toThrow(ExpressionEvalError);
  });
});
