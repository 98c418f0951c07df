/**
 * Turns expression text into tokens. Errors are `ExpressionCompileError`s with reason
 * `syntax`, pointing at the offending character.
 */
import { ExpressionCompileError } from "./expression-errors.ts";

export type TokenKind = "number" | "string" | "identifier" | "keyword" | "punctuation" | "end";

export interface Token {
  readonly kind: TokenKind;
  /** The token's text: the decoded value for strings and quoted identifiers. */
  readonly text: string;
  /** For numbers, the parsed value. */
  readonly number: number;
  /** 0-based offset of the token's first character. */
  readonly pos: number;
}

export const keywords: ReadonlySet<string> = new Set(["true", "false", "null", "in"]);

const punctuation = [
  "==", "!=", "<=", ">=", "&&", "||",
  "(", ")", "[", "]", "{", "}", ",", ".", "?", ":", "+", "-", "*", "/", "%", "!", "<", ">",
];

const isDigit = (c: string | undefined): boolean => c !== undefined && c >= "0" && c <= "9";
const isIdentStart = (c: string | undefined): boolean =>
  c !== undefined && ((c >= "a" && c <= "z") || (c >= "A" && c <= "Z") || c === "_");
const isIdentPart = (c: string | undefined): boolean => isIdentStart(c) || isDigit(c);

/** A printable rendering of a character for messages. */
export function showChar(c: string): string {
  return /^[\x21-\x7e]$/.test(c) ? `'${c}'` : JSON.stringify(c);
}

export function tokenize(source: string): Token[] {
  const tokens: Token[] = [];
  const fail = (detail: string, pos: number): never => {
    throw new ExpressionCompileError("syntax", detail, source, pos);
  };
  let i = 0;
  while (i < source.length) {
    const c = source[i]!;
    if (c === " " || c === "\t" || c === "\n" || c === "\r") {
      i++;
      continue;
    }
    const start = i;
    if (isDigit(c)) {
      while (isDigit(source[i])) i++;
      if (source[i] === "." && isDigit(source[i + 1])) {
        i++;
        while (isDigit(source[i])) i++;
      }
      if (source[i] === "e" || source[i] === "E") {
        let j = i + 1;
        if (source[j] === "+" || source[j] === "-") j++;
        if (!isDigit(source[j])) fail(`invalid number '${source.slice(start, j)}': the exponent needs digits`, start);
        while (isDigit(source[j])) j++;
        i = j;
      }
      if (isIdentPart(source[i]) || source[i] === ".") {
        let j = i;
        while (isIdentPart(source[j]) || source[j] === ".") j++;
        fail(`invalid number '${source.slice(start, j)}'`, start);
      }
      const text = source.slice(start, i);
      tokens.push({ kind: "number", text, number: Number(text), pos: start });
      continue;
    }
    if (isIdentStart(c)) {
      while (isIdentPart(source[i])) i++;
      const text = source.slice(start, i);
      tokens.push({ kind: keywords.has(text) ? "keyword" : "identifier", text, number: 0, pos: start });
      continue;
    }
    if (c === "'" || c === '"' || c === "`") {
      const text = readQuoted(source, start, fail);
      i = text.end;
      tokens.push({ kind: c === "`" ? "identifier" : "string", text: text.value, number: 0, pos: start });
      continue;
    }
    const two = source.slice(i, i + 2);
    const op = punctuation.find((p) => p === two) ?? punctuation.find((p) => p === c);
    if (op !== undefined) {
      tokens.push({ kind: "punctuation", text: op, number: 0, pos: start });
      i += op.length;
      continue;
    }
    if (c === "=") fail("unexpected '=' (compare with '==')", start);
    if (c === "&") fail("unexpected '&' (write '&&')", start);
    if (c === "|") fail("unexpected '|' (write '||')", start);
    fail(`unexpected character ${showChar(String.fromCodePoint(source.codePointAt(i)!))}`, start);
  }
  tokens.push({ kind: "end", text: "", number: 0, pos: source.length });
  return tokens;
}

const simpleEscapes: Record<string, string> = {
  n: "\n",
  t: "\t",
  r: "\r",
  "\\": "\\",
  "'": "'",
  '"': '"',
  "`": "`",
};

/** Reads a '…', "…" or `…` literal starting at `start`; backticks quote a column name. */
function readQuoted(
  source: string,
  start: number,
  fail: (detail: string, pos: number) => never,
): { value: string; end: number } {
  const quote = source[start]!;
  let value = "";
  let i = start + 1;
  let chunk = i;
  for (;;) {
    if (i >= source.length) {
      fail(quote === "`" ? "unterminated quoted column name" : "unterminated string", start);
    }
    const c = source[i]!;
    if (c === quote) {
      value += source.slice(chunk, i);
      return { value, end: i + 1 };
    }
    if (c !== "\\") {
      i++;
      continue;
    }
    value += source.slice(chunk, i);
    const e = source[i + 1];
    if (e === undefined) fail("unterminated string", start);
    const simple = simpleEscapes[e!];
    if (simple !== undefined) {
      value += simple;
      i += 2;
    } else if (e === "u") {
      const hex = source.slice(i + 2, i + 6);
      if (!/^[0-9a-fA-F]{4}$/.test(hex)) fail("invalid escape '\\u': it needs 4 hex digits", i);
      value += String.fromCharCode(parseInt(hex, 16));
      i += 6;
    } else {
      fail(`invalid escape '\\${e}'`, i);
    }
    chunk = i;
  }
}
