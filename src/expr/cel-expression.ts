/**
 * The CEL option: `compileExpression(source, { language: "cel" })` runs the expression with
 * `@bufbuild/cel`. Row columns become CEL variables; the result is converted to a `Value`.
 *
 * CEL keeps its own semantics (int vs double, errors for missing variables, its function
 * library plus the `strings` extension); only the boundary is ours: errors become
 * `ExpressionCompileError` / `ExpressionEvalError`, and results become JSON-shaped values.
 */
import {
  celEnv,
  isCelError,
  isCelList,
  isCelMap,
  isCelType,
  isCelUint,
  parse,
  plan,
  type CelEnv,
  type CelResult,
  type CelValue,
} from "@bufbuild/cel";
import { strings } from "@bufbuild/cel/ext";
import type { CompiledExpression } from "./compiled-expression.ts";
import { ExpressionCompileError, ExpressionEvalError, type EvalErrorReason } from "./expression-errors.ts";
import type { Row, Value } from "./value.ts";

type CelExpr = ReturnType<typeof parse>["expr"];

/** One environment for every CEL expression: the standard library and the strings extension. */
let sharedEnv: CelEnv | undefined;
function env(): CelEnv {
  sharedEnv ??= celEnv({ funcs: strings });
  return sharedEnv;
}

export function compileCel(source: string): CompiledExpression {
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(source);
  } catch (e) {
    const location = (e as { location?: { start?: { offset?: number } } }).location;
    const detail = (e as { rawMessage?: string }).rawMessage ?? (e instanceof Error ? e.message : String(e));
    throw new ExpressionCompileError("cel", detail, source, location?.start?.offset ?? 0, { cause: e });
  }
  const positions = parsed.sourceInfo?.positions ?? {};
  const at = (id: bigint | undefined): number => (id === undefined ? 0 : positions[String(id)] ?? 0);

  const { columns, calls } = scan(parsed.expr);
  for (const call of calls) {
    if (env().funcs.find(call.name) === undefined) {
      throw new ExpressionCompileError("cel", `undeclared reference to '${call.name}'`, source, at(call.id));
    }
  }

  let program: (bindings: Record<string, unknown>) => CelResult;
  try {
    program = plan(env(), parsed) as (bindings: Record<string, unknown>) => CelResult;
  } catch (e) {
    throw new ExpressionCompileError("cel", e instanceof Error ? e.message : String(e), source, 0, { cause: e });
  }

  const names = columns;
  const evaluate = (row: Row): Value => {
    // Bind only the referenced columns the row has, as own properties: a missing column is an
    // unbound variable (a CEL error), and inherited keys like `constructor` are never visible.
    const bindings: Record<string, unknown> = Object.create(null);
    for (let i = 0; i < names.length; i++) {
      const name = names[i]!;
      if (Object.hasOwn(row, name) && row[name] !== undefined) bindings[name] = row[name];
    }
    let result: CelResult;
    try {
      result = program(bindings);
    } catch (e) {
      throw new ExpressionEvalError("cel_error", e instanceof Error ? e.message : String(e), source, 0, { cause: e });
    }
    if (isCelError(result)) {
      throw new ExpressionEvalError(celReason(result.message), result.message, source, at(result.exprId), { cause: result });
    }
    try {
      return fromCel(result);
    } catch (e) {
      throw new ExpressionEvalError("type_error", (e as Error).message, source, 0, { cause: e });
    }
  };
  return Object.freeze({ source, language: "cel" as const, columns: Object.freeze(columns), evaluate });
}

function celReason(message: string): EvalErrorReason {
  if (/divide by zero|modulus by zero|modulo by zero/i.test(message)) return "division_by_zero";
  if (/no matching overload|no such overload|unsupported/i.test(message)) return "type_error";
  return "cel_error";
}

/**
 * Walks the parsed expression for the identifiers it reads (best effort: a name bound by a
 * comprehension such as `x` in `list.map(x, ...)` is not a column) and the global functions
 * it calls, in source order.
 */
function scan(root: CelExpr): { columns: string[]; calls: { name: string; id: bigint }[] } {
  const columns = new Set<string>();
  const calls: { name: string; id: bigint }[] = [];
  const visit = (e: CelExpr | undefined, bound: ReadonlySet<string>): void => {
    if (e === undefined) return;
    const k = e.exprKind;
    switch (k.case) {
      case "identExpr":
        if (!bound.has(k.value.name)) columns.add(k.value.name);
        return;
      case "selectExpr":
        return visit(k.value.operand, bound);
      case "callExpr":
        // Operators (`_+_`, `@in`, `!_`) are internal names; plain names are library calls.
        if (k.value.target === undefined && /^[A-Za-z]/.test(k.value.function)) calls.push({ name: k.value.function, id: e.id });
        visit(k.value.target, bound);
        for (const arg of k.value.args) visit(arg, bound);
        return;
      case "listExpr":
        for (const item of k.value.elements) visit(item, bound);
        return;
      case "structExpr":
        for (const entry of k.value.entries) {
          if (entry.keyKind.case === "mapKey") visit(entry.keyKind.value, bound);
          visit(entry.value, bound);
        }
        return;
      case "comprehensionExpr": {
        const c = k.value;
        visit(c.iterRange, bound);
        visit(c.accuInit, bound);
        const inner = new Set([...bound, c.iterVar, c.iterVar2, c.accuVar]);
        visit(c.loopCondition, inner);
        visit(c.loopStep, inner);
        visit(c.result, inner);
        return;
      }
      default:
        return;
    }
  };
  visit(root, new Set());
  return { columns: [...columns], calls };
}

/**
 * A CEL result as a `Value`: int and uint become numbers (precision is lost past 2^53), bytes
 * become base64 text, maps become objects with string keys, a timestamp becomes epoch ms, a
 * duration milliseconds, a type its name.
 */
export function fromCel(v: CelValue): Value {
  switch (typeof v) {
    case "string":
    case "boolean":
    case "number":
      return v;
    case "bigint":
      return Number(v);
  }
  if (v === null) return null;
  if (isCelUint(v)) return Number(v.value);
  if (v instanceof Uint8Array) return toBase64(v);
  if (isCelList(v)) {
    const out: Value[] = [];
    for (const item of v) out.push(fromCel(item));
    return out;
  }
  if (isCelMap(v)) {
    const out: { [key: string]: Value } = {};
    for (const [key, value] of v) out[typeof key === "object" ? String(key.value) : String(key)] = fromCel(value);
    return out;
  }
  if (isCelType(v)) return v.name;
  const message = (v as { message?: { $typeName?: string; seconds?: bigint; nanos?: number } }).message;
  if (message?.$typeName === "google.protobuf.Timestamp" || message?.$typeName === "google.protobuf.Duration") {
    return Number(message.seconds ?? 0n) * 1000 + Math.trunc((message.nanos ?? 0) / 1e6);
  }
  throw new TypeError(`a CEL ${message?.$typeName ?? "value"} has no JSON form here`);
}

function toBase64(bytes: Uint8Array): string {
  let binary = "";
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary);
}
