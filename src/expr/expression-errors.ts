/**
 * The two errors an expression can raise: one at compile time, one per row at run time.
 *
 * Both carry the source, the 0-based offset and the 1-based line and column of the place
 * they point at, and a message of the form
 * `syntax error at 1:9 in "price > > 1": unexpected '>'`.
 */
import { type ErrorCode, ErrorCodes, FvError, type ErrorContext } from "../errors.ts";

/**
 * Why an expression did not compile.
 * - `syntax`: the text is not a valid expression.
 * - `unknown_function`: a call names a function the registry does not have.
 * - `arity`: a call passes too few or too many arguments.
 * - `invalid_argument`: a constant argument is rejected when compiling (a bad regex literal).
 * - `cel`: the CEL parser or planner rejected the expression.
 */
export type CompileErrorReason = "syntax" | "unknown_function" | "arity" | "invalid_argument" | "cel";

/**
 * Why an expression failed on one row.
 * - `type_error`: an operator or function got a kind of value it does not take.
 * - `division_by_zero`: the right side of `/` or `%` was 0.
 * - `function_error`: a function call failed (bad argument value, user function threw).
 * - `cel_error`: any other CEL runtime error (unbound variable, missing key, overflow ...).
 */
export type EvalErrorReason = "type_error" | "division_by_zero" | "function_error" | "cel_error";

const compileLabels: Record<CompileErrorReason, string> = {
  syntax: "syntax error",
  unknown_function: "unknown function",
  arity: "wrong number of arguments",
  invalid_argument: "invalid argument",
  cel: "CEL error",
};

const evalLabels: Record<EvalErrorReason, string> = {
  type_error: "type error",
  division_by_zero: "division by zero",
  function_error: "function error",
  cel_error: "CEL error",
};

/** A point in a source: 1-based line and column (columns count UTF-16 code units). */
export interface SourcePoint {
  line: number;
  column: number;
}

/** Turns a 0-based offset into a 1-based line and column; `\r\n`, `\n` and `\r` end lines. */
export function locate(source: string, position: number): SourcePoint {
  let line = 1;
  let lineStart = 0;
  const end = Math.min(Math.max(position, 0), source.length);
  for (let i = 0; i < end; i++) {
    const c = source.charCodeAt(i);
    if (c === 10 || (c === 13 && source.charCodeAt(i + 1) !== 10)) {
      line++;
      lineStart = i + 1;
    }
  }
  return { line, column: end - lineStart + 1 };
}

/** The source line an offset falls on, with a caret under the offset. */
export function pointAt(source: string, position: number): string {
  const { line, column } = locate(source, position);
  const text = source.split(/\r\n|\n|\r/)[line - 1] ?? "";
  return `${text}\n${" ".repeat(column - 1)}^`;
}

function describe(label: string, source: string, point: SourcePoint, detail: string): string {
  return `${label} at ${point.line}:${point.column} in ${JSON.stringify(source)}: ${detail}`;
}

/**
 * What the two errors share: the source, the offset and the line and column it falls on, the
 * reason, the detail and a message of the form `<label> at <line>:<column> in "<source>": <detail>`.
 */
abstract class ExpressionError<Reason extends string> extends FvError {
  readonly source: string;
  readonly position: number;
  readonly line: number;
  readonly column: number;
  readonly reason: Reason;
  /** What is wrong, without the location prefix. */
  readonly detail: string;

  protected constructor(
    code: ErrorCode,
    label: string,
    reason: Reason,
    detail: string,
    source: string,
    position: number,
    options: { cause?: unknown; context?: ErrorContext },
  ) {
    const point = locate(source, position);
    super(code, describe(label, source, point, detail), options);
    this.source = source;
    this.position = position;
    this.line = point.line;
    this.column = point.column;
    this.reason = reason;
    this.detail = detail;
  }

  /** The offending source line with a caret under the error, for multi-line displays. */
  get pointer(): string {
    return pointAt(this.source, this.position);
  }
}

/**
 * An expression did not compile. Thrown by `compileExpression` only. Its `detail` reads e.g.
 * `unexpected '>'`.
 *
 * @example
 * try { compileExpression("price > > 1"); }
 * catch (e) { if (e instanceof ExpressionCompileError) console.log(e.line, e.column, e.reason); } // 1 9 "syntax"
 */
export class ExpressionCompileError extends ExpressionError<CompileErrorReason> {
  constructor(reason: CompileErrorReason, detail: string, source: string, position: number, options: { cause?: unknown; context?: ErrorContext } = {}) {
    super(ErrorCodes.EXPRESSION_COMPILE, compileLabels[reason], reason, detail, source, position, options);
    this.name = "ExpressionCompileError";
  }
}

/**
 * An expression failed on one row. `evaluate` throws this and nothing else; the loop treats the
 * row as poison (isolate, count, dead-letter). Its `detail` reads e.g.
 * `cannot apply '*' to string and number`; its `pointer` puts the caret under the failing
 * operator or call.
 */
export class ExpressionEvalError extends ExpressionError<EvalErrorReason> {
  constructor(reason: EvalErrorReason, detail: string, source: string, position: number, options: { cause?: unknown; context?: ErrorContext } = {}) {
    super(ErrorCodes.EXPRESSION_EVAL, evalLabels[reason], reason, detail, source, position, options);
    this.name = "ExpressionEvalError";
  }
}
