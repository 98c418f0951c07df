import { describe, expect, test } from "bun:test";
import { compileExpression, ExpressionCompileError } from "../../src/expr/index.ts";
import { ErrorCodes, FvError, recoveryOf } from "../../src/errors.ts";
import { compileError, evalError } from "./helpers.ts";

describe("compile errors", () => {
  test("a syntax error names the place in the message, as line:column and a caret", () => {
    const e = compileError("price > > 1");
    expect(e).toBeInstanceOf(FvError);
    expect(e.code).toBe(ErrorCodes.EXPRESSION_COMPILE);
    expect(e.reason).toBe("syntax");
    expect(e.message).toBe(`syntax error at 1:9 in "price > > 1": unexpected '>'`);
    expect([e.source, e.position, e.line, e.column]).toEqual(["price > > 1", 8, 1, 9]);
    expect(e.pointer).toBe("price > > 1\n        ^");
    expect(recoveryOf(e)).toBe("fatal");
  });

  const cases: [source: string, line: number, column: number, detail: string][] = [
    ["", 1, 1, "the expression is empty"],
    ["   ", 1, 4, "the expression is empty"],
    ["1 +", 1, 4, "unexpected end of expression"],
    ["(1 + 2", 1, 7, "unexpected end of expression, expected ')' to close '('"],
    ["[1, 2", 1, 6, "unexpected end of expression, expected ']' to close the list"],
    ["f(1, 2", 1, 7, "unexpected end of expression, expected ')' to close the call to f()"],
    ["a[1", 1, 4, "unexpected end of expression, expected ']' to close the index"],
    ["a ? b", 1, 6, "unexpected end of expression, expected ':' after the true branch of '?'"],
    ["a b", 1, 3, "unexpected 'b'"],
    ["1 2", 1, 3, "unexpected '2'"],
    ["a = 1", 1, 3, "unexpected '=' (compare with '==')"],
    ["a & b", 1, 3, "unexpected '&' (write '&&')"],
    ["a | b", 1, 3, "unexpected '|' (write '||')"],
    ["a # b", 1, 3, "unexpected character '#'"],
    ["'abc", 1, 1, "unterminated string"],
    ['x == "abc', 1, 6, "unterminated string"],
    ["'a\\qb'", 1, 3, "invalid escape '\\q'"],
    ["'\\u12'", 1, 2, "invalid escape '\\u': it needs 4 hex digits"],
    ["1e", 1, 1, "invalid number '1e': the exponent needs digits"],
    ["12abc", 1, 1, "invalid number '12abc'"],
    ["1.2.3", 1, 1, "invalid number '1.2.3'"],
    ["a.", 1, 3, "unexpected end of expression, expected a field name after '.'"],
    ["a.1", 1, 3, "unexpected '1', expected a field name after '.'"],
    ["a.lower()", 1, 3, "'lower' is not a method: call functions as lower(value, ...)"],
    ["``", 1, 1, "a quoted column name cannot be empty"],
    ["`abc", 1, 1, "unterminated quoted column name"],
    ["in", 1, 1, "unexpected 'in'"],
    [")", 1, 1, "unexpected ')'"],
    ["[1,]", 1, 4, "unexpected ']'"],
    ["a ? b : ", 1, 9, "unexpected end of expression"],
  ];
  for (const [source, line, column, detail] of cases) {
    test(`${JSON.stringify(source)} fails at ${line}:${column} with "${detail}"`, () => {
      const e = compileError(source);
      expect(e.reason).toBe("syntax");
      expect(e.detail).toBe(detail);
      expect([e.line, e.column]).toEqual([line, column]);
    });
  }

  test("lines and columns count across \\n, \\r\\n and \\r line ends", () => {
    const lf = compileError("a > 1 &&\n  b >");
    expect([lf.line, lf.column, lf.position]).toEqual([2, 6, 14]);
    const crlf = compileError("a > 1 &&\r\n  b >");
    expect([crlf.line, crlf.column]).toEqual([2, 6]);
    const cr = compileError("a +\r\rfoo(1)");
    expect([cr.line, cr.column, cr.reason]).toEqual([3, 1, "unknown_function"]);
    expect(lf.pointer).toBe("  b >\n     ^");
    expect(lf.message).toBe(`syntax error at 2:6 in "a > 1 &&\\n  b >": unexpected end of expression`);
  });

  test("unknown functions and wrong arities carry their line and column", () => {
    const unknown = compileError("x > 1 &&\n    frobnicate(x)");
    expect([unknown.reason, unknown.line, unknown.column]).toEqual(["unknown_function", 2, 5]);
    expect(unknown.message).toBe(`unknown function at 2:5 in "x > 1 &&\\n    frobnicate(x)": no function named 'frobnicate'`);
    const arity = compileError("[1,\n upper()]");
    expect([arity.reason, arity.line, arity.column]).toEqual(["arity", 2, 2]);
  });

  test("an expression nested too deeply is a syntax error, not a stack overflow", () => {
    expect(compileError("(".repeat(10_000) + "1" + ")".repeat(10_000)).detail).toContain("nests deeper than");
    expect(compileError("-".repeat(10_000) + "1").reason).toBe("syntax");
    expect(compileError("1" + " + 1".repeat(10_000)).reason).toBe("syntax");
    expect(compileError("a" + ".b".repeat(10_000)).reason).toBe("syntax");
    expect(compileError("[".repeat(10_000)).reason).toBe("syntax");
    expect(compileExpression("1" + " + 1".repeat(150)).evaluate({})).toBe(151);
  });

  test("a source that is not a string, or an unknown language, is a compile error", () => {
    expect(() => compileExpression(42 as unknown as string)).toThrow(ExpressionCompileError);
    expect(() => compileExpression("1", { language: "sql" as "fv" })).toThrow(ExpressionCompileError);
  });
});

describe("eval errors", () => {
  test("carry the code, the reason and the place of the failing operator", () => {
    const e = evalError("a +\n  b * c", { a: 1, b: "x", c: 2 });
    expect(e).toBeInstanceOf(FvError);
    expect(e.code).toBe(ErrorCodes.EXPRESSION_EVAL);
    expect(recoveryOf(e)).toBe("poison");
    expect([e.reason, e.line, e.column, e.position]).toEqual(["type_error", 2, 5, 8]);
    expect(e.message).toBe(`type error at 2:5 in "a +\\n  b * c": cannot apply '*' to string and number`);
    expect(e.pointer).toBe("  b * c\n    ^");
  });

  test("an index error points at the bracket", () => {
    const e = evalError("xs['a']", { xs: [1] });
    expect(e.column).toBe(3);
  });
});
