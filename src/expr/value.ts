/**
 * The values expressions work on: exactly what JSON can carry, with one number kind.
 *
 * Row values coming from `JSON.parse` are used as they are, without copying.
 */
export type Value = null | boolean | number | string | Value[] | { [key: string]: Value };

/** A parsed JSON object: the record an expression reads its columns from. */
export type Row = Record<string, unknown>;

/** The kinds of `Value`, as error messages and `typeOf()` name them. */
export type ValueKind = "null" | "boolean" | "number" | "string" | "list" | "object";

/** The kind of a value. Anything JSON cannot carry (a bigint, a function) is "unsupported". */
export function kindOf(value: unknown): ValueKind | "unsupported" {
  switch (typeof value) {
    case "boolean":
      return "boolean";
    case "number":
      return "number";
    case "string":
      return "string";
    case "object":
      if (value === null) return "null";
      return Array.isArray(value) ? "list" : "object";
    case "undefined":
      return "null";
    default:
      return "unsupported";
  }
}

/** True for a JSON object (not null, not a list). */
export function isObject(value: unknown): value is { [key: string]: Value } {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

const hasOwn = Object.hasOwn;

/** Reads an own property; a missing key (or one only found on the prototype) reads as null. */
export function ownField(object: { [key: string]: Value }, key: string): Value {
  if (!hasOwn(object, key)) return null;
  const value = object[key];
  return value === undefined ? null : value;
}

/**
 * Deep equality with the dialect's rules: different kinds are never equal, NaN equals nothing,
 * lists compare element-wise and objects key-wise. Iterative, so deeply nested rows cannot
 * overflow the stack.
 */
export function valuesEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  const pending: unknown[] = [a, b];
  while (pending.length > 0) {
    const y = pending.pop();
    const x = pending.pop();
    if (x === y) continue;
    if (typeof x !== "object" || typeof y !== "object" || x === null || y === null) return false;
    const xList = Array.isArray(x);
    if (xList !== Array.isArray(y)) return false;
    if (xList) {
      const xs = x as unknown[];
      const ys = y as unknown[];
      if (xs.length !== ys.length) return false;
      for (let i = 0; i < xs.length; i++) pending.push(xs[i], ys[i]);
    } else {
      const xo = x as Record<string, unknown>;
      const yo = y as Record<string, unknown>;
      const keys = Object.keys(xo);
      if (keys.length !== Object.keys(yo).length) return false;
      for (const key of keys) {
        if (!hasOwn(yo, key)) return false;
        pending.push(xo[key], yo[key]);
      }
    }
  }
  return true;
}

/**
 * A frozen copy of a constant list or object, so a shared constant stays constant and freezing
 * it never touches a value someone else owns (a user function's result, folded at compile time).
 */
export function frozenCopy(value: Value): Value {
  if (typeof value !== "object" || value === null) return value;
  if (Array.isArray(value)) return Object.freeze(value.map((item) => frozenCopy(item))) as Value[];
  const copy: { [key: string]: Value } = {};
  for (const key of Object.keys(value)) {
    // defineProperty, not assignment: a "__proto__" key must stay an ordinary own key.
    Object.defineProperty(copy, key, { value: frozenCopy(value[key]!), enumerable: true });
  }
  return Object.freeze(copy);
}
