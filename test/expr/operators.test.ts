import { describe, expect, test } from "bun:test";
import { compileExpression } from "../../src/expr/index.ts";
import { evalError, run } from "./helpers.ts";

const NaNExpr = "(1e308 * 10 - 1e308 * 10)";

describe("literals", () => {
  test("numbers are integers, decimals or exponents, all one kind", () => {
    expect(run("42")).toBe(42);
    expect(run("3.25")).toBe(3.25);
    expect(run("1e3")).toBe(1000);
    expect(run("2.5E-1")).toBe(0.25);
    expect(run("42 == 42.0")).toBe(true);
  });

  test("strings take single or double quotes and the listed escapes", () => {
    expect(run("'it\\'s'")).toBe("it's");
    expect(run(`"say \\"hi\\""`)).toBe('say "hi"');
    expect(run(`'a\\nb\\tc\\rd\\\\e\\'f\\"g'`)).toBe("a\nb\tc\rd\\e'f\"g");
    expect(run(`'\\u00e9\\u20AC'`)).toBe("é€");
  });

  test("true, false and null are keywords", () => {
    expect(run("true")).toBe(true);
    expect(run("false")).toBe(false);
    expect(run("null")).toBe(null);
  });

  test("a list literal mixes constants and columns", () => {
    expect(run("[1, 'a', x]", { x: true })).toEqual([1, "a", true]);
    expect(run("[]")).toEqual([]);
    expect(run("[[1], [2, [3]]]")).toEqual([[1], [2, [3]]]);
  });

  test("an object literal takes quoted or bare keys, any values, and is a new object per row", () => {
    expect(run("{ 'id': id, 'amount': price * qty }", { id: 7, price: 2, qty: 3 })).toEqual({ id: 7, amount: 6 });
    expect(run("{ a: [1, {b: null}], 'c d': missing, }", {})).toEqual({ a: [1, { b: null }], "c d": null });
    expect(run("{}")).toEqual({});
    expect([...compileExpression("{ x: price + tax }").columns].sort()).toEqual(["price", "tax"]);
    const e = compileExpression("{ k: 1 }");
    expect(e.evaluate({})).not.toBe(e.evaluate({}));
    expect(() => compileExpression("{ a: 1, a: 2 }")).toThrow('the key "a" is given twice in the object');
    expect(() => compileExpression("{ 1: 2 }")).toThrow("expected a key ('name' or name) in the object");
    expect(() => compileExpression("{ a 1 }")).toThrow("expected ':' after the key \"a\"");
    expect(() => compileExpression("{ a: 1")).toThrow("expected '}' to close the object");
  });

  test("constant lists are shared and frozen, so a caller cannot change the next result", () => {
    const e = compileExpression("[1, 2]");
    const first = e.evaluate({}) as number[];
    expect(Object.isFrozen(first)).toBe(true);
    expect(e.evaluate({})).toBe(first);
  });
});

describe("column access", () => {
  test("a bare identifier reads a column", () => {
    expect(run("price", { price: 12.5 })).toBe(12.5);
  });

  test("a missing or undefined column reads as null", () => {
    expect(run("nope", {})).toBe(null);
    expect(run("x", { x: undefined })).toBe(null);
  });

  test("values from JSON are returned as they are", () => {
    const nested = { a: [1, { b: 2 }] };
    expect(run("o", { o: nested })).toBe(nested);
  });

  test("a backtick-quoted column may hold any character", () => {
    expect(run("`unit price` * 2", { "unit price": 4 })).toBe(8);
  });

  test("names JavaScript objects inherit are only read as own columns", () => {
    expect(run("constructor", {})).toBe(null);
    expect(run("toString", {})).toBe(null);
    expect(run("__proto__", {})).toBe(null);
    expect(run("constructor", { constructor: 3 })).toBe(3);
    expect(run("o.hasOwnProperty", { o: {} })).toBe(null);
    expect(run("o['valueOf']", { o: {} })).toBe(null);
  });
});

describe("nested access", () => {
  const row = { a: { b: [10, { c: "deep" }], "odd key": 7 }, n: null, list: [1, 2, 3] };

  test("dots and brackets walk objects and lists", () => {
    expect(run("a.b[0]", row)).toBe(10);
    expect(run("a.b[1].c", row)).toBe("deep");
    expect(run("a['odd key']", row)).toBe(7);
    expect(run("a['b'][1]['c']", row)).toBe("deep");
  });

  test("a computed key or index works too", () => {
    expect(run("a[k]", { ...row, k: "odd key" })).toBe(7);
    expect(run("list[i + 1]", { ...row, i: 1 })).toBe(3);
  });

  test("keywords can be field names after a dot", () => {
    expect(run("o.in + o.null", { o: { in: 1, null: 2 } })).toBe(3);
  });

  test("a missing key or position reads as null", () => {
    expect(run("a.zzz", row)).toBe(null);
    expect(run("a.zzz.yyy", row)).toBe(null);
    expect(run("list[3]", row)).toBe(null);
    expect(run("list[-1]", row)).toBe(null);
    expect(run("list[0.5]", row)).toBe(null);
  });

  test("indexing null reads as null, and so does a null index", () => {
    expect(run("n.x", row)).toBe(null);
    expect(run("n[0]", row)).toBe(null);
    expect(run("list[n]", row)).toBe(null);
    expect(run("missing.x[0].y", row)).toBe(null);
  });

  test("reading a field of a list, number, string or boolean is a type error", () => {
    expect(evalError("list.x", row).reason).toBe("type_error");
    expect(evalError("a.b[0].x", row).detail).toBe("cannot read field 'x' of a number");
    expect(evalError("s.x", { s: "str" }).reason).toBe("type_error");
    expect(evalError("t.x", { t: true }).reason).toBe("type_error");
  });

  test("a list index must be a number and an object key a string", () => {
    expect(evalError("list['0']", row).detail).toBe("a list index must be a number, got string");
    expect(evalError("a[0]", row).detail).toBe("an object key must be a string, got number");
    expect(evalError("s[0]", { s: "str" }).detail).toBe("cannot index a string");
  });
});

describe("unary operators", () => {
  test("- negates a number and passes null through", () => {
    expect(run("-x", { x: 3 })).toBe(-3);
    expect(run("--x", { x: 3 })).toBe(3);
    expect(run("-x", {})).toBe(null);
  });

  test("- on anything but a number is a type error", () => {
    const e = evalError("-s", { s: "a" });
    expect(e.reason).toBe("type_error");
    expect(e.detail).toBe("cannot apply unary '-' to string");
  });

  test("! negates a boolean; !null is null", () => {
    expect(run("!x", { x: true })).toBe(false);
    expect(run("!!x", { x: true })).toBe(true);
    expect(run("!x", {})).toBe(null);
  });

  test("! on anything but a boolean is a type error", () => {
    expect(evalError("!x", { x: 1 }).reason).toBe("type_error");
    expect(evalError("!x", { x: "true" }).reason).toBe("type_error");
  });
});

describe("arithmetic", () => {
  test("* / % - + work on numbers", () => {
    expect(run("6 * 7")).toBe(42);
    expect(run("7 / 2")).toBe(3.5);
    expect(run("7 % 3")).toBe(1);
    expect(run("-7 % 3")).toBe(-1);
    expect(run("10 - 4")).toBe(6);
    expect(run("0.1 + 0.2")).toBe(0.1 + 0.2);
  });

  test("+ joins two strings", () => {
    expect(run("a + '-' + b", { a: "x", b: "y" })).toBe("x-y");
    expect(run("'' + ''")).toBe("");
  });

  test("null propagates through every arithmetic operator", () => {
    for (const op of ["*", "/", "%", "+", "-"]) {
      expect(run(`x ${op} 2`, {})).toBe(null);
      expect(run(`2 ${op} x`, {})).toBe(null);
      expect(run(`x ${op} 'a'`, {})).toBe(null);
    }
  });

  test("mixing kinds is a type error naming the operator and the kinds", () => {
    const e = evalError("'a' * 2");
    expect(e.reason).toBe("type_error");
    expect(e.message).toBe(`type error at 1:5 in "'a' * 2": cannot apply '*' to string and number`);
    expect(evalError("'a' + 1").detail).toBe("cannot apply '+' to string and number");
    expect(evalError("1 + true").reason).toBe("type_error");
    expect(evalError("[1] + [2]").reason).toBe("type_error");
    expect(evalError("x - 'b'", { x: "a" }).reason).toBe("type_error");
  });

  test("/ and % by zero are division_by_zero errors", () => {
    const e = evalError("x / y", { x: 1, y: 0 });
    expect(e.reason).toBe("division_by_zero");
    expect(e.column).toBe(3);
    expect(evalError("x % 0", { x: 5 }).reason).toBe("division_by_zero");
    expect(evalError("0 / 0").reason).toBe("division_by_zero");
  });

  test("a null dividend wins over a zero divisor", () => {
    expect(run("x / 0", {})).toBe(null);
  });

  test("overflow gives Infinity, as 64-bit floats do", () => {
    expect(run("1e308 * 10")).toBe(Infinity);
  });
});

describe("ordering", () => {
  test("compares numbers with numbers and strings with strings", () => {
    expect(run("1 < 2")).toBe(true);
    expect(run("2 <= 2")).toBe(true);
    expect(run("3 > 2")).toBe(true);
    expect(run("2 >= 3")).toBe(false);
    expect(run("'apple' < 'banana'")).toBe(true);
    expect(run("'b' >= 'a'")).toBe(true);
    expect(run("a > b", { a: 2, b: 1 })).toBe(true);
    expect(run("a <= b", { a: "x", b: "x" })).toBe(true);
  });

  test("strings order by UTF-16 code units, so uppercase sorts first", () => {
    expect(run("'Z' < 'a'")).toBe(true);
  });

  test("an ordering comparison with null gives null", () => {
    for (const op of ["<", "<=", ">", ">="]) {
      expect(run(`x ${op} 1`, {})).toBe(null);
      expect(run(`1 ${op} x`, {})).toBe(null);
      expect(run(`x ${op} y`, {})).toBe(null);
    }
  });

  test("other mixes are type errors, booleans included", () => {
    expect(evalError("1 < '2'").detail).toBe("cannot apply '<' to number and string");
    expect(evalError("x > 1", { x: "a" }).reason).toBe("type_error");
    expect(evalError("true < false").reason).toBe("type_error");
    expect(evalError("[1] <= [2]").reason).toBe("type_error");
    expect(evalError("x >= 1", { x: { a: 1 } }).reason).toBe("type_error");
  });

  test("NaN orders as false against everything", () => {
    expect(run(`${NaNExpr} < 1`)).toBe(false);
    expect(run(`${NaNExpr} >= 1`)).toBe(false);
  });
});

describe("equality", () => {
  test("null equals null and nothing else", () => {
    expect(run("null == null")).toBe(true);
    expect(run("x == null", {})).toBe(true);
    expect(run("x != null", { x: 0 })).toBe(true);
    expect(run("x == 0", {})).toBe(false);
    expect(run("x == ''", {})).toBe(false);
  });

  test("values of different kinds are unequal, not an error", () => {
    expect(run("true == 1")).toBe(false);
    expect(run("false == 0")).toBe(false);
    expect(run("'1' == 1")).toBe(false);
    expect(run("[1] != 1")).toBe(true);
  });

  test("one number kind: 42 equals 42.0", () => {
    expect(run("x == 42.0", { x: 42 })).toBe(true);
  });

  test("NaN equals nothing, itself included", () => {
    expect(run(`${NaNExpr} == ${NaNExpr}`)).toBe(false);
    expect(run(`${NaNExpr} != ${NaNExpr}`)).toBe(true);
    expect(run(`x == x`, { x: NaN })).toBe(false);
  });

  test("lists and objects compare deeply", () => {
    expect(run("[1, [2, 'a']] == [1, [2, 'a']]")).toBe(true);
    expect(run("[1, 2] == [2, 1]")).toBe(false);
    expect(run("o == p", { o: { a: 1, b: [true] }, p: { b: [true], a: 1 } })).toBe(true);
    expect(run("o == p", { o: { a: 1 }, p: { a: 1, b: null } })).toBe(false);
    expect(run("o != p", { o: { a: [1] }, p: { a: [2] } })).toBe(true);
    expect(run("o == l", { o: {}, l: [] })).toBe(false);
  });

  test("deep equality does not overflow on deeply nested rows", () => {
    let a: unknown = 1;
    let b: unknown = 1;
    for (let i = 0; i < 100_000; i++) {
      a = [a];
      b = [b];
    }
    expect(run("a == b", { a, b })).toBe(true);
  });
});

describe("membership with in", () => {
  test("x in list uses deep equality", () => {
    expect(run("2 in [1, 2, 3]")).toBe(true);
    expect(run("sym in ['A', 'B']", { sym: "C" })).toBe(false);
    expect(run("[1] in [[1], [2]]")).toBe(true);
    expect(run("x in [1, x]", { x: { k: [1] } })).toBe(true);
    expect(run("1 in [true]")).toBe(false);
    expect(run("1 in []")).toBe(false);
  });

  test("null is a member of a list that holds null", () => {
    expect(run("x in [1, null]", {})).toBe(true);
    expect(run("x in [1, 2]", {})).toBe(false);
    expect(run("x in ['a', 'b']", {})).toBe(false);
  });

  test("NaN is a member of no list", () => {
    expect(run("x in [1, 2]", { x: NaN })).toBe(false);
    expect(run(`${NaNExpr} in l`, { l: [NaN] })).toBe(false);
  });

  test("'sub' in 'string' tests for a substring", () => {
    expect(run("'ell' in 'hello'")).toBe(true);
    expect(run("'' in 'hello'")).toBe(true);
    expect(run("'xyz' in s", { s: "hello" })).toBe(false);
  });

  test("k in object tests for an own key", () => {
    expect(run("'a' in o", { o: { a: null } })).toBe(true);
    expect(run("'b' in o", { o: { a: 1 } })).toBe(false);
    expect(run("'toString' in o", { o: {} })).toBe(false);
  });

  test("a null container, or a null needle for strings and objects, gives null", () => {
    expect(run("1 in x", {})).toBe(null);
    expect(run("x in 'abc'", {})).toBe(null);
    expect(run("x in o", { o: { a: 1 } })).toBe(null);
  });

  test("other combinations are type errors", () => {
    expect(evalError("1 in 'abc'").detail).toBe("cannot apply 'in' to number and string");
    expect(evalError("1 in o", { o: {} }).reason).toBe("type_error");
    expect(evalError("1 in 2").reason).toBe("type_error");
    expect(evalError("'a' in true").reason).toBe("type_error");
  });
});

describe("logic with && and ||", () => {
  const truth = [true, false, null] as const;
  const and = (a: boolean | null, b: boolean | null): boolean | null =>
    a === false || b === false ? false : a === null || b === null ? null : true;
  const or = (a: boolean | null, b: boolean | null): boolean | null =>
    a === true || b === true ? true : a === null || b === null ? null : false;

  for (const a of truth) {
    for (const b of truth) {
      test(`${a} && ${b} is ${and(a, b)} and ${a} || ${b} is ${or(a, b)}, as in SQL`, () => {
        expect(run("a && b", { a, b })).toBe(and(a, b));
        expect(run("a || b", { a, b })).toBe(or(a, b));
        expect(run(`${a} && ${b}`)).toBe(and(a, b));
      });
    }
  }

  test("&& does not evaluate its right side after false, nor || after true", () => {
    expect(run("false && 1 / 0 > 1")).toBe(false);
    expect(run("x && 1 / x > 1", { x: false })).toBe(false);
    expect(run("true || 1 / 0 > 1")).toBe(true);
    expect(run("x || y.z", { x: true, y: 5 })).toBe(true);
  });

  test("after null, the right side is evaluated, since it can decide", () => {
    expect(run("x && false", {})).toBe(false);
    expect(run("x || true", {})).toBe(true);
    expect(evalError("x && 1 / 0 > 1", {}).reason).toBe("division_by_zero");
  });

  test("non-boolean operands are type errors, on either side", () => {
    const e = evalError("1 && true");
    expect(e.reason).toBe("type_error");
    expect(e.detail).toBe("'&&' needs booleans, got number on the left");
    expect(evalError("true && 'yes'").detail).toBe("'&&' needs booleans, got string on the right");
    expect(evalError("false || 0").reason).toBe("type_error");
    expect(evalError("x || y", { x: [], y: true }).reason).toBe("type_error");
  });

  test("a chain of && points a type error at the operator before the bad operand", () => {
    const e = evalError("a && b && c", { a: true, b: true, c: 3 });
    expect(e.column).toBe(8);
    expect(evalError("a || b || c", { a: 1 }).column).toBe(3);
    expect(evalError("a || b || c", { a: false, b: "x" }).column).toBe(3);
  });

  test("a chain keeps three-valued logic and short-circuits", () => {
    expect(run("a && b && c", { a: null, b: true, c: true })).toBe(null);
    expect(run("a && b && c", { a: null, b: false, c: 5 })).toBe(false);
    expect(run("a || b || c", { a: null, b: true, c: 5 })).toBe(true);
    expect(run("a || b || c", { a: false, b: false, c: null })).toBe(null);
  });

  test("longer chains follow the same rules", () => {
    const and4 = "a && b && c && d";
    expect(run(and4, { a: true, b: true, c: true, d: true })).toBe(true);
    expect(run(and4, { a: true, b: null, c: true, d: true })).toBe(null);
    expect(run(and4, { a: null, b: true, c: true, d: false })).toBe(false);
    expect(run(and4, { a: true, b: false, c: 5, d: 5 })).toBe(false);
    const or5 = "a || b || c || d || e";
    expect(run(or5, { a: false, b: false, c: false, d: false, e: false })).toBe(false);
    expect(run(or5, { a: null, b: false, c: false, d: false, e: false })).toBe(null);
    expect(run(or5, { a: null, b: false, c: false, d: true, e: 5 })).toBe(true);
    const e = evalError(and4, { a: true, b: true, c: true, d: "x" });
    expect([e.column, e.detail]).toEqual([13, "'&&' needs booleans, got string on the right"]);
    expect(evalError(and4, { a: 1 }).column).toBe(3);
  });
});

describe("the conditional ?:", () => {
  test("picks a branch by a boolean", () => {
    expect(run("x > 1 ? 'big' : 'small'", { x: 2 })).toBe("big");
    expect(run("x > 1 ? 'big' : 'small'", { x: 0 })).toBe("small");
  });

  test("a null condition takes the else branch", () => {
    expect(run("x ? 'yes' : 'no'", {})).toBe("no");
    expect(run("x > 1 ? 'yes' : 'no'", {})).toBe("no");
  });

  test("a non-boolean condition is a type error", () => {
    const e = evalError("x ? 1 : 2", { x: 1 });
    expect(e.reason).toBe("type_error");
    expect(e.detail).toBe("'?' needs a boolean condition, got number");
  });

  test("only the chosen branch is evaluated", () => {
    expect(run("true ? 1 : 1 / 0")).toBe(1);
    expect(run("x == 0 ? 0 : 10 / x", { x: 0 })).toBe(0);
  });

  test("is right-associative", () => {
    const grade = "s >= 90 ? 'A' : s >= 80 ? 'B' : 'C'";
    expect(run(grade, { s: 95 })).toBe("A");
    expect(run(grade, { s: 85 })).toBe("B");
    expect(run(grade, { s: 10 })).toBe("C");
    expect(run("a ? b ? 1 : 2 : 3", { a: true, b: false })).toBe(2);
  });
});

describe("precedence", () => {
  test("* / % bind tighter than + -", () => {
    expect(run("1 + 2 * 3")).toBe(7);
    expect(run("10 - 6 / 2")).toBe(7);
    expect(run("(1 + 2) * 3")).toBe(9);
    expect(run("7 - 2 - 1")).toBe(4);
    expect(run("16 / 4 / 2")).toBe(2);
  });

  test("unary operators bind tighter than binary ones", () => {
    expect(run("-2 * 3")).toBe(-6);
    expect(run("-x.y", { x: { y: 2 } })).toBe(-2);
    expect(run("!a == b", { a: true, b: false })).toBe(true);
  });

  test("arithmetic, then ordering, then equality, then in, then &&, then ||", () => {
    expect(run("1 + 1 < 3")).toBe(true);
    expect(run("1 < 2 == true")).toBe(true);
    expect(run("1 == 1 in [true]")).toBe(true);
    expect(run("true || false && false")).toBe(true);
    expect(run("false && true || true")).toBe(true);
    expect(run("'a' in ['a'] && 2 > 1")).toBe(true);
  });

  test("the conditional binds loosest", () => {
    expect(run("true ? 1 : 0 + 1")).toBe(1);
    expect(run("false || true ? 'y' : 'n'")).toBe("y");
  });
});

describe("columns", () => {
  test("lists each top-level column once, in first-read order", () => {
    expect(compileExpression("b + a.x[0] + b + c['k']").columns).toEqual(["b", "a", "c"]);
    expect(compileExpression("t ? y : z").columns).toEqual(["t", "y", "z"]);
    expect(compileExpression("coalesce(x, 1)").columns).toEqual(["x"]);
    expect(compileExpression("1 + 2").columns).toEqual([]);
  });

  test("describe the compiled expression", () => {
    const e = compileExpression("price > 1");
    expect(e.source).toBe("price > 1");
    expect(e.language).toBe("fv");
  });
});
