import type { Row } from "../expr/index.ts";

const decoder = new TextDecoder("utf-8", { fatal: true });

export type Decoded = { row: Row; text: string } | { poison: "invalid_json" | "not_object" | "number_out_of_range"; detail: string };

/**
 * Whether a parsed value holds ±Infinity anywhere: what JSON.parse makes of a number beyond the
 * double range. A walk over the parsed row costs half of scanning its text for such numbers.
 */
function holdsInfinity(value: unknown): boolean {
  if (typeof value === "number") return value === Infinity || value === -Infinity;
  if (value === null || typeof value !== "object") return false;
  if (Array.isArray(value)) {
    for (const item of value) if (holdsInfinity(item)) return true;
    return false;
  }
  for (const key in value) if (holdsInfinity((value as Record<string, unknown>)[key])) return true;
  return false;
}

/** The path of the first number JSON.parse read as ±Infinity, or undefined. */
function infiniteNumber(text: string): string | undefined {
  let found: string | undefined;
  JSON.parse(text, function (key, value) {
    if (found === undefined && typeof value === "number" && !Number.isFinite(value)) found = key;
    return value;
  });
  return found;
}

/**
 * A message value as a row: it must be a JSON object. Anything else is a poison row, and so is
 * a number outside the double range (`1e400`): JSON.parse reads it as Infinity, which would be
 * written back as null, silently changing the value.
 */
export function decodeRow(value: Uint8Array | null): Decoded {
  if (value === null) return { poison: "not_object", detail: "the value is null (a tombstone), not a JSON object" };
  let parsed: unknown;
  let text: string;
  try {
    text = decoder.decode(value);
    parsed = JSON.parse(text);
  } catch (error) {
    return { poison: "invalid_json", detail: `the value is not JSON: ${(error as Error).message}` };
  }
  if (holdsInfinity(parsed)) {
    // Rare: parse again with a reviver, for the name of the field.
    const key = infiniteNumber(text);
    return { poison: "number_out_of_range", detail: `the number in "${key}" is outside the range of a double (about ±1.8e308); send it as a string` };
  }
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
    return { poison: "not_object", detail: `the value is JSON but not an object: ${Array.isArray(parsed) ? "a list" : JSON.stringify(parsed)?.slice(0, 40)}` };
  }
  return { row: parsed as Row, text };
}

/**
 * Whether a decoded row can be written as its source text with `columns` appended
 * (appendColumns): the text ends with the object's closing brace, the object has a field, and
 * none of the columns (so nothing a step sets replaces a field of the source).
 */
export function appendable(decoded: { row: Row; text: string }, columns: readonly string[]): boolean {
  const { row, text } = decoded;
  if (text.charCodeAt(text.length - 1) !== 125 /* } */) return false;
  for (const column of columns) if (Object.hasOwn(row, column)) return false;
  for (const _ in row) return true;
  return false;
}

/**
 * The source text of an appendable row with its new columns after its fields, as JSON.stringify
 * writes them (a column whose value JSON leaves out, undefined, is left out): `{"a":1}` with
 * c = 2 is `{"a":1,"c":2}`. The source's fields stay as they were written.
 */
export function appendColumns(text: string, row: Row, columns: readonly string[]): string {
  let out = text.slice(0, -1);
  for (const column of columns) {
    const value = Object.hasOwn(row, column) ? JSON.stringify(row[column]) : undefined;
    if (value !== undefined) out += `,${JSON.stringify(column)}:${value}`;
  }
  return `${out}}`;
}

const KEY_DECODER = new TextDecoder();
/** A record's message key as text (UTF-8), or null (a tableJoin's table is keyed by it). */
export function keyText(key: Uint8Array | null): string | null {
  return key === null ? null : KEY_DECODER.decode(key);
}
