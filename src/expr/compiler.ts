/**
 * Compiles a syntax tree into nested closures, once; evaluating a row then only calls them.
 *
 * Along the way it resolves function names and arities against the registry (compile errors),
 * folds constant subtrees (a fold that would fail is left for run time, so `false && 1/0 > 1`
 * still never divides), and picks specialised closures for common shapes (`col > 100`,
 * `col != 'x'` and `f(col)` read the row directly; `s + '-'`; `x in [...]` as a set lookup;
 * `a && b && c` as one closure).
 */
import type { Node } from "./ast.ts";
import { ExpressionCompileError, ExpressionEvalError } from "./expression-errors.ts";
import { FunctionCallError, type FunctionBody, type FunctionContext } from "./function-def.ts";
import type { FunctionRegistry } from "./function-registry.ts";
import {
  appendConstant,
  arithmetic,
  conditional,
  equality,
  equalityColumnConstant,
  equalityConstant,
  isPlainConstant,
  logical,
  logicalChain,
  membership,
  membershipInSet,
  negate,
  not,
  ordering,
  orderingColumnNumber,
  orderingNumber,
  type Evaluator,
  type Fail,
} from "./operators.ts";
import { frozenCopy, isObject, kindOf, ownField, type Row, type Value } from "./value.ts";

interface Compiled {
  readonly fn: Evaluator;
  /** Set when the subtree is a constant; then `value` holds it. */
  readonly constant: boolean;
  readonly value: Value;
  /** Set when the subtree is a plain column read (`row[column]`), so a parent can inline it. */
  readonly column?: string;
}

const EMPTY_ROW: Row = Object.freeze({});
const NO_ARGS: readonly Value[] = Object.freeze([]);

function constant(value: Value): Compiled {
  const frozen = frozenCopy(value);
  return { fn: () => frozen, constant: true, value: frozen };
}

function dynamic(fn: Evaluator): Compiled {
  return { fn, constant: false, value: null };
}

/** Keys JavaScript objects inherit; reading those needs an own-property check. */
function inherited(key: string): boolean {
  return key in Object.prototype;
}

export function compileTree(root: Node, source: string, functions: FunctionRegistry): Evaluator {
  return new Compiler(source, functions).compile(root).fn;
}

class Compiler {
  readonly #source: string;
  readonly #functions: FunctionRegistry;
  readonly #fail: Fail;

  constructor(source: string, functions: FunctionRegistry) {
    this.#source = source;
    this.#functions = functions;
    this.#fail = (reason, detail, pos) => new ExpressionEvalError(reason, detail, source, pos);
  }

  compile(node: Node): Compiled {
    switch (node.kind) {
      case "literal":
        return constant(node.value);
      case "column":
        return inherited(node.name)
          ? dynamic(this.#column(node.name))
          : { fn: this.#column(node.name), constant: false, value: null, column: node.name };
      case "member": {
        const object = this.compile(node.object);
        return this.#fold(this.#field(object, node.name, node.pos, false), object);
      }
      case "index":
        return this.#index(node.object, node.index, node.pos);
      case "list":
        return this.#list(node.items);
      case "object":
        return this.#object(node.entries);
      case "unary": {
        const operand = this.compile(node.operand);
        const fn = node.op === "-" ? negate(operand.fn, node.pos, this.#fail) : not(operand.fn, node.pos, this.#fail);
        return this.#fold(fn, operand);
      }
      case "binary":
        return this.#binary(node);
      case "ternary": {
        const test = this.compile(node.test);
        const then = this.compile(node.then);
        const otherwise = this.compile(node.otherwise);
        if (test.constant && (test.value === true || test.value === false || test.value === null)) {
          return test.value === true ? then : otherwise;
        }
        return this.#fold(conditional(test.fn, then.fn, otherwise.fn, node.pos, this.#fail), test, then, otherwise);
      }
      case "call":
        return this.#call(node.name, node.args, node.pos);
    }
  }

  /**
   * Evaluates `fn` once now when every input is constant (with no inputs, `fn` must not read
   * the row: only a pure zero-argument call is folded that way). A failing fold is kept as a
   * closure: the error belongs to the rows that reach it, not to the compile.
   */
  #fold(fn: Evaluator, ...inputs: Compiled[]): Compiled {
    if (!inputs.every((input) => input.constant)) return dynamic(fn);
    try {
      return constant(fn(EMPTY_ROW));
    } catch {
      return dynamic(fn);
    }
  }

  #column(name: string): Evaluator {
    if (inherited(name)) return (row) => ownField(row as { [key: string]: Value }, name);
    return (row) => {
      const v = row[name];
      return v === undefined ? null : (v as Value);
    };
  }

  /** `object.name` and `object['name']`: null-safe, missing keys read as null. */
  #field(object: Compiled, name: string, pos: number, bracket: boolean): Evaluator {
    const read = object.fn;
    const fail = this.#fail;
    const wrong = (o: Value): never => {
      const detail = bracket && Array.isArray(o)
        ? "a list index must be a number, got string"
        : bracket ? `cannot index a ${kindOf(o)}` : `cannot read field '${name}' of a ${kindOf(o)}`;
      throw fail("type_error", detail, pos);
    };
    if (inherited(name)) {
      return (row) => {
        const o = read(row);
        if (isObject(o)) return ownField(o, name);
        return o === null ? null : wrong(o);
      };
    }
    return (row) => {
      const o = read(row);
      if (typeof o === "object" && o !== null && !Array.isArray(o)) {
        const v = o[name];
        return v === undefined ? null : v;
      }
      return o === null ? null : wrong(o);
    };
  }

  /** `object[index]`: string keys on objects, whole-number positions on lists. */
  #index(objectNode: Node, indexNode: Node, pos: number): Compiled {
    const object = this.compile(objectNode);
    const index = this.compile(indexNode);
    if (index.constant && typeof index.value === "string") {
      return this.#fold(this.#field(object, index.value, pos, true), object);
    }
    const read = object.fn;
    const key = index.fn;
    const fail = this.#fail;
    const fn: Evaluator = (row) => {
      const o = read(row);
      const k = key(row);
      if (o === null || k === null) return null;
      if (Array.isArray(o)) {
        if (typeof k !== "number") throw fail("type_error", `a list index must be a number, got ${kindOf(k)}`, pos);
        // Negative, fractional and out-of-range positions are missing elements.
        const v = Number.isInteger(k) && k >= 0 ? o[k] : undefined;
        return v === undefined ? null : v;
      }
      if (isObject(o)) {
        if (typeof k !== "string") throw fail("type_error", `an object key must be a string, got ${kindOf(k)}`, pos);
        return ownField(o, k);
      }
      throw fail("type_error", `cannot index a ${kindOf(o)}`, pos);
    };
    return this.#fold(fn, object, index);
  }

  #list(itemNodes: readonly Node[]): Compiled {
    const items = itemNodes.map((n) => this.compile(n));
    if (items.every((item) => item.constant)) return constant(items.map((item) => item.value));
    const fns = items.map((item) => item.fn);
    return dynamic((row) => {
      const out: Value[] = new Array(fns.length);
      for (let i = 0; i < fns.length; i++) out[i] = fns[i]!(row);
      return out;
    });
  }

  /** An object literal: a fresh object per row (a step may change it in place). */
  #object(entries: ReadonlyArray<{ key: string; value: Node }>): Compiled {
    const keys = entries.map((e) => e.key);
    const fns = entries.map((e) => this.compile(e.value).fn);
    return dynamic((row) => {
      const out: Record<string, Value> = {};
      for (let i = 0; i < fns.length; i++) {
        // "__proto__" is an own key like any other (an assignment would set the prototype).
        if (keys[i] === "__proto__") Object.defineProperty(out, "__proto__", { value: fns[i]!(row), enumerable: true, writable: true, configurable: true });
        else out[keys[i]!] = fns[i]!(row);
      }
      return out;
    });
  }

  #binary(node: Extract<Node, { kind: "binary" }>): Compiled {
    if ((node.op === "&&" || node.op === "||") && node.left.kind === "binary" && node.left.op === node.op) {
      return this.#chain(node);
    }
    const left = this.compile(node.left);
    const right = this.compile(node.right);
    const { op, pos } = node;
    const fail = this.#fail;
    let fn: Evaluator;
    switch (op) {
      case "+":
        fn = right.constant && typeof right.value === "string" && !left.constant
          ? appendConstant(left.fn, right.value, pos, fail)
          : arithmetic(op, left.fn, right.fn, pos, fail);
        break;
      case "-": case "*": case "/": case "%":
        fn = arithmetic(op, left.fn, right.fn, pos, fail);
        break;
      case "<": case "<=": case ">": case ">=":
        if (right.constant && typeof right.value === "number") {
          fn = left.column !== undefined
            ? orderingColumnNumber(op, left.column, right.value, pos, fail)
            : orderingNumber(op, left.fn, right.value, pos, fail);
        } else {
          fn = ordering(op, left.fn, right.fn, pos, fail);
        }
        break;
      case "==": case "!=": {
        const [other, c] = right.constant ? [left, right] : [right, left];
        if (c.constant && isPlainConstant(c.value)) {
          fn = other.column !== undefined
            ? equalityColumnConstant(op, other.column, c.value)
            : equalityConstant(op, other.fn, c.value);
        } else {
          fn = equality(op, left.fn, right.fn);
        }
        break;
      }
      case "&&": case "||":
        fn = logical(op, left.fn, right.fn, pos, fail);
        break;
      case "in": {
        const list = right.value;
        fn = right.constant && Array.isArray(list) && list.length > 0 && list.every(isPlainConstant)
          ? membershipInSet(left.fn, new Set(list))
          : membership(left.fn, right.fn, pos, fail);
        break;
      }
    }
    return this.#fold(fn, left, right);
  }

  /** A left-nested run of the same `&&` or `||`, compiled as one closure. */
  #chain(node: Extract<Node, { kind: "binary" }>): Compiled {
    const op = node.op as "&&" | "||";
    const nodes: Node[] = [];
    const positions: number[] = [];
    let at: Node = node;
    while (at.kind === "binary" && at.op === op) {
      nodes.push(at.right);
      positions.push(at.pos);
      at = at.left;
    }
    nodes.push(at);
    positions.push(positions[positions.length - 1]!);
    nodes.reverse();
    positions.reverse();
    const operands = nodes.map((n) => this.compile(n));
    return this.#fold(logicalChain(op, operands.map((o) => o.fn), positions, this.#fail), ...operands);
  }

  #call(name: string, argNodes: readonly Node[], pos: number): Compiled {
    const source = this.#source;
    const def = this.#functions.get(name);
    if (def === undefined) {
      const alike = this.#functions.names().find((n) => n.toLowerCase() === name.toLowerCase());
      const hint = alike === undefined ? "" : ` (did you mean ${alike}()?)`;
      throw new ExpressionCompileError("unknown_function", `no function named '${name}'${hint}`, source, pos);
    }
    const n = argNodes.length;
    if (n < def.minArgs || n > def.maxArgs) {
      const expected = def.minArgs === def.maxArgs
        ? `${def.minArgs}`
        : def.maxArgs === Infinity ? `at least ${def.minArgs}` : `${def.minArgs} to ${def.maxArgs}`;
      const usage = def.signature === undefined ? "" : `; usage: ${def.signature}`;
      throw new ExpressionCompileError(
        "arity",
        `${name}() takes ${expected} argument${expected === "1" ? "" : "s"}, got ${n}${usage}`,
        source,
        pos,
      );
    }
    const args = argNodes.map((a) => this.compile(a));
    const clock = this.#functions.clock;
    const ctx: FunctionContext = { name, source, position: pos, now: clock };

    let body: FunctionBody = def.fn;
    if (def.specialize !== undefined) {
      try {
        body = def.specialize(args.map((a) => (a.constant ? a.value : undefined)), ctx) ?? def.fn;
      } catch (e) {
        const detail = e instanceof Error ? e.message : String(e);
        throw new ExpressionCompileError("invalid_argument", detail, source, pos, { cause: e });
      }
    }

    const wrap = (e: unknown): ExpressionEvalError => {
      if (e instanceof ExpressionEvalError) return e;
      if (e instanceof FunctionCallError) return new ExpressionEvalError(e.reason, e.message, source, pos, { cause: e });
      const detail = e instanceof Error ? e.message : String(e);
      return new ExpressionEvalError("function_error", `${name}() failed: ${detail}`, source, pos, { cause: e });
    };

    const propagate = def.nullPropagating !== false;
    const fns = args.map((a) => a.fn);
    let fn: Evaluator;
    // One argument buffer per call site, reused on every row (see FunctionBody). The arity
    // cases are spelled out so the common ones make no loop and no extra call.
    if (n === 0) {
      fn = () => {
        try {
          return body(NO_ARGS, ctx) ?? null;
        } catch (e) {
          throw wrap(e);
        }
      };
    } else if (n === 1 && args[0]!.column !== undefined) {
      // `f(column)`, the most common call: read the row directly.
      const name = args[0]!.column;
      const buffer: Value[] = [null];
      fn = (row) => {
        const v = row[name] as Value | undefined;
        if (v === undefined || v === null) {
          if (propagate) return null;
          buffer[0] = null;
        } else {
          buffer[0] = v;
        }
        try {
          return body(buffer, ctx) ?? null;
        } catch (e) {
          throw wrap(e);
        }
      };
    } else if (n === 1) {
      const a0 = fns[0]!;
      const buffer: Value[] = [null];
      fn = (row) => {
        const v = a0(row);
        if (v === null && propagate) return null;
        buffer[0] = v;
        try {
          return body(buffer, ctx) ?? null;
        } catch (e) {
          throw wrap(e);
        }
      };
    } else if (n === 2) {
      const a0 = fns[0]!;
      const a1 = fns[1]!;
      const buffer: Value[] = [null, null];
      fn = (row) => {
        const v0 = a0(row);
        const v1 = a1(row);
        if ((v0 === null || v1 === null) && propagate) return null;
        buffer[0] = v0;
        buffer[1] = v1;
        try {
          return body(buffer, ctx) ?? null;
        } catch (e) {
          throw wrap(e);
        }
      };
    } else {
      const buffer: Value[] = new Array(n).fill(null);
      fn = (row) => {
        let sawNull = false;
        for (let i = 0; i < n; i++) {
          const v = fns[i]!(row);
          if (v === null) sawNull = true;
          buffer[i] = v;
        }
        if (sawNull && propagate) return null;
        try {
          return body(buffer, ctx) ?? null;
        } catch (e) {
          throw wrap(e);
        }
      };
    }
    return def.pure === false ? dynamic(fn) : this.#fold(fn, ...args);
  }
}
