/**
 * Closures for the dialect's operators. Each takes its operands' evaluators and returns an
 * evaluator; the fast path (both operands of the expected kind) comes first, null handling and
 * errors after it.
 */
import type { BinaryOperator } from "./ast.ts";
import { containsValue } from "./functions/collections.ts";
import { kindOf, valuesEqual, type Row, type Value } from "./value.ts";

export type Evaluator = (row: Row) => Value;

/** Builds the error an operator throws; created once per compile with the source in it. */
export type Fail = (reason: "type_error" | "division_by_zero", detail: string, pos: number) => Error;

function mismatch(op: string, a: Value, b: Value): string {
  return `cannot apply '${op}' to ${kindOf(a)} and ${kindOf(b)}`;
}

/** Equality with the dialect's rules (see `valuesEqual`), inlined for primitives. */
export function equal(a: Value, b: Value): boolean {
  return a === b || (typeof a === "object" && typeof b === "object" && a !== null && b !== null && valuesEqual(a, b));
}

/** A constant `===` can stand in for `==`: a primitive other than NaN. */
export function isPlainConstant(v: Value): boolean {
  return v === null || typeof v === "boolean" || typeof v === "string" || (typeof v === "number" && !Number.isNaN(v));
}

export function arithmetic(op: "+" | "-" | "*" | "/" | "%", l: Evaluator, r: Evaluator, pos: number, fail: Fail): Evaluator {
  const slow = (a: Value, b: Value): Value => {
    if (a === null || b === null) return null;
    throw fail("type_error", mismatch(op, a, b), pos);
  };
  switch (op) {
    case "+":
      return (row) => {
        const a = l(row);
        const b = r(row);
        if (typeof a === "number" && typeof b === "number") return a + b;
        if (typeof a === "string" && typeof b === "string") return a + b;
        return slow(a, b);
      };
    case "-":
      return (row) => {
        const a = l(row);
        const b = r(row);
        return typeof a === "number" && typeof b === "number" ? a - b : slow(a, b);
      };
    case "*":
      return (row) => {
        const a = l(row);
        const b = r(row);
        return typeof a === "number" && typeof b === "number" ? a * b : slow(a, b);
      };
    case "/":
      return (row) => {
        const a = l(row);
        const b = r(row);
        if (typeof a === "number" && typeof b === "number") {
          if (b === 0) throw fail("division_by_zero", "the right side of '/' is 0", pos);
          return a / b;
        }
        return slow(a, b);
      };
    case "%":
      return (row) => {
        const a = l(row);
        const b = r(row);
        if (typeof a === "number" && typeof b === "number") {
          if (b === 0) throw fail("division_by_zero", "the right side of '%' is 0", pos);
          return a % b;
        }
        return slow(a, b);
      };
  }
}

/** `+` with a constant string on the right, as in `upper(venue) + '-'`. */
export function appendConstant(l: Evaluator, suffix: string, pos: number, fail: Fail): Evaluator {
  return (row) => {
    const a = l(row);
    if (typeof a === "string") return a + suffix;
    if (a === null) return null;
    throw fail("type_error", mismatch("+", a, suffix), pos);
  };
}

export function ordering(op: "<" | "<=" | ">" | ">=", l: Evaluator, r: Evaluator, pos: number, fail: Fail): Evaluator {
  const slow = (a: Value, b: Value): Value => {
    if (a === null || b === null) return null;
    throw fail("type_error", mismatch(op, a, b), pos);
  };
  // One closure per operator keeps each comparison a direct machine compare.
  switch (op) {
    case "<":
      return (row) => {
        const a = l(row);
        const b = r(row);
        return (typeof a === "number" && typeof b === "number") || (typeof a === "string" && typeof b === "string") ? a < b : slow(a, b);
      };
    case "<=":
      return (row) => {
        const a = l(row);
        const b = r(row);
        return (typeof a === "number" && typeof b === "number") || (typeof a === "string" && typeof b === "string") ? a <= b : slow(a, b);
      };
    case ">":
      return (row) => {
        const a = l(row);
        const b = r(row);
        return (typeof a === "number" && typeof b === "number") || (typeof a === "string" && typeof b === "string") ? a > b : slow(a, b);
      };
    case ">=":
      return (row) => {
        const a = l(row);
        const b = r(row);
        return (typeof a === "number" && typeof b === "number") || (typeof a === "string" && typeof b === "string") ? a >= b : slow(a, b);
      };
  }
}

/** Ordering against a constant number, as in `price > 100`. */
export function orderingNumber(op: "<" | "<=" | ">" | ">=", l: Evaluator, c: number, pos: number, fail: Fail): Evaluator {
  const slow = (a: Value): Value => {
    if (a === null) return null;
    throw fail("type_error", mismatch(op, a, c), pos);
  };
  switch (op) {
    case "<":
      return (row) => {
        const a = l(row);
        return typeof a === "number" ? a < c : slow(a);
      };
    case "<=":
      return (row) => {
        const a = l(row);
        return typeof a === "number" ? a <= c : slow(a);
      };
    case ">":
      return (row) => {
        const a = l(row);
        return typeof a === "number" ? a > c : slow(a);
      };
    case ">=":
      return (row) => {
        const a = l(row);
        return typeof a === "number" ? a >= c : slow(a);
      };
  }
}

/**
 * `column < number` and friends reading the row directly: the shape most filters have, and
 * measurably faster than going through the column's own closure.
 */
export function orderingColumnNumber(op: "<" | "<=" | ">" | ">=", name: string, c: number, pos: number, fail: Fail): Evaluator {
  const slow = (v: unknown): Value => {
    if (v === undefined || v === null) return null;
    throw fail("type_error", mismatch(op, v as Value, c), pos);
  };
  switch (op) {
    case "<":
      return (row) => {
        const a = row[name];
        return typeof a === "number" ? a < c : slow(a);
      };
    case "<=":
      return (row) => {
        const a = row[name];
        return typeof a === "number" ? a <= c : slow(a);
      };
    case ">":
      return (row) => {
        const a = row[name];
        return typeof a === "number" ? a > c : slow(a);
      };
    case ">=":
      return (row) => {
        const a = row[name];
        return typeof a === "number" ? a >= c : slow(a);
      };
  }
}

export function equality(op: "==" | "!=", l: Evaluator, r: Evaluator): Evaluator {
  return op === "=="
    ? (row) => equal(l(row), r(row))
    : (row) => !equal(l(row), r(row));
}

/** Equality against a primitive constant: plain `===`, with no deep compare possible. */
export function equalityConstant(op: "==" | "!=", l: Evaluator, c: Value): Evaluator {
  return op === "==" ? (row) => l(row) === c : (row) => l(row) !== c;
}

/** `column == constant` reading the row directly; a missing column is null. */
export function equalityColumnConstant(op: "==" | "!=", name: string, c: Value): Evaluator {
  if (c === null) {
    return op === "=="
      ? (row) => {
        const v = row[name];
        return v === undefined || v === null;
      }
      : (row) => {
        const v = row[name];
        return v !== undefined && v !== null;
      };
  }
  return op === "==" ? (row) => row[name] === c : (row) => row[name] !== c;
}

/**
 * Three-valued `&&` and `||` (SQL's): a null operand means "unknown". Both short-circuit on the
 * deciding value (`false &&`, `true ||`); anything but a boolean or null is a type error.
 */
export function logical(op: "&&" | "||", l: Evaluator, r: Evaluator, pos: number, fail: Fail): Evaluator {
  const check = (v: Value, side: string): never => {
    throw fail("type_error", `'${op}' needs booleans, got ${kindOf(v)} on the ${side}`, pos);
  };
  if (op === "&&") {
    return (row) => {
      const a = l(row);
      if (a === false) return false;
      if (a !== true && a !== null) check(a, "left");
      const b = r(row);
      if (b === true) return a;
      if (b === false) return false;
      if (b !== null) check(b, "right");
      return null;
    };
  }
  return (row) => {
    const a = l(row);
    if (a === true) return true;
    if (a !== false && a !== null) check(a, "left");
    const b = r(row);
    if (b === false) return a;
    if (b === true) return true;
    if (b !== null) check(b, "right");
    return null;
  };
}

/**
 * A chain `a && b && c ...` (or `||`) as one closure: the same three-valued result and
 * short-circuit as the nested pairs, with one call per operand instead of one per pair.
 * `positions[i]` is the operator before operand i (operand 0 uses the first operator).
 */
export function logicalChain(op: "&&" | "||", operands: readonly Evaluator[], positions: readonly number[], fail: Fail): Evaluator {
  const n = operands.length;
  const decisive = op === "||";
  const check = (v: Value, i: number): never => {
    throw fail("type_error", `'${op}' needs booleans, got ${kindOf(v)} on the ${i === 0 ? "left" : "right"}`, positions[i]!);
  };
  if (n === 3) {
    // The common three-clause filter, unrolled: three call sites that each stay monomorphic.
    const [o0, o1, o2] = operands as [Evaluator, Evaluator, Evaluator];
    return (row) => {
      const a = o0(row);
      if (a === decisive) return decisive;
      if (a !== null && a !== !decisive) check(a, 0);
      const b = o1(row);
      if (b === decisive) return decisive;
      if (b !== null && b !== !decisive) check(b, 1);
      const c = o2(row);
      if (c === decisive) return decisive;
      if (c !== null && c !== !decisive) check(c, 2);
      return a === null || b === null || c === null ? null : !decisive;
    };
  }
  return (row) => {
    let unknown = false;
    for (let i = 0; i < n; i++) {
      const v = operands[i]!(row);
      if (v === decisive) return decisive;
      if (v === null) unknown = true;
      else if (v !== !decisive) check(v, i);
    }
    return unknown ? null : !decisive;
  };
}

/** `x in container`: list membership (deep equality), substring, object key. */
export function membership(l: Evaluator, r: Evaluator, pos: number, fail: Fail): Evaluator {
  return (row) => {
    const x = l(row);
    const container = r(row);
    const result = containsValue(container, x);
    if (result !== "type_error") return result;
    throw fail("type_error", `cannot apply 'in' to ${kindOf(x)} and ${kindOf(container)}`, pos);
  };
}

/** `x in [constant primitives]`: a Set lookup. */
export function membershipInSet(l: Evaluator, set: ReadonlySet<Value>): Evaluator {
  return (row) => {
    const x = l(row);
    return set.has(x) && !(typeof x === "number" && Number.isNaN(x));
  };
}

export function negate(operand: Evaluator, pos: number, fail: Fail): Evaluator {
  return (row) => {
    const a = operand(row);
    if (typeof a === "number") return -a;
    if (a === null) return null;
    throw fail("type_error", `cannot apply unary '-' to ${kindOf(a)}`, pos);
  };
}

export function not(operand: Evaluator, pos: number, fail: Fail): Evaluator {
  return (row) => {
    const a = operand(row);
    if (typeof a === "boolean") return !a;
    if (a === null) return null;
    throw fail("type_error", `'!' needs a boolean, got ${kindOf(a)}`, pos);
  };
}

/** `test ? then : otherwise`; a null test takes the `otherwise` branch, as SQL's CASE does. */
export function conditional(test: Evaluator, then: Evaluator, otherwise: Evaluator, pos: number, fail: Fail): Evaluator {
  return (row) => {
    const t = test(row);
    if (t === true) return then(row);
    if (t === false || t === null) return otherwise(row);
    throw fail("type_error", `'?' needs a boolean condition, got ${kindOf(t)}`, pos);
  };
}

export function binaryKind(op: BinaryOperator): "arithmetic" | "ordering" | "equality" | "logical" | "in" {
  switch (op) {
    case "+": case "-": case "*": case "/": case "%":
      return "arithmetic";
    case "<": case "<=": case ">": case ">=":
      return "ordering";
    case "==": case "!=":
      return "equality";
    case "&&": case "||":
      return "logical";
    case "in":
      return "in";
  }
}
