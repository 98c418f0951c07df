import type { Row } from "../expr/index.ts";
import type { StateReader } from "./state-values.ts";

/**
 * Reads a row's group (or join) key: the values of the key columns, a missing column read as
 * null. Two forms of identity: `id` for in-memory maps (cheap: with one column of strings it is
 * the string itself, no copy) and `text` (JSON) for changelog keys. No columns: one global group.
 * Values compare by kind and content: 1 and "1" are different keys, lists and objects compare
 * by their JSON text.
 */
export interface GroupKey {
  readonly columns: readonly string[];
  /** The key's values, in column order (missing → null). */
  values(row: Row): unknown[];
  /** A Map key for these values. */
  idOf(values: readonly unknown[]): unknown;
  /** Same as `idOf(values(row))`, without building the list. */
  idOfRow(row: Row): unknown;
  /** The values' JSON text, as changelog keys carry it. */
  textOf(values: readonly unknown[]): string;
}

/**
 * One value as a Map key: strings, numbers, booleans and null as they are (a Map already tells
 * "1" from 1); a list or an object as "\0j" + its JSON; a string that itself starts with "\0"
 * gets "\0s" in front, so the two never meet.
 */
function valueId(value: unknown): unknown {
  if (value === undefined || value === null) return null;
  if (typeof value === "string") return value.charCodeAt(0) === 0 ? "\0s" + value : value;
  if (typeof value === "object") return "\0j" + JSON.stringify(value);
  return value;
}

export function groupKey(columns: readonly string[]): GroupKey {
  const cols = [...columns];
  const values = (row: Row): unknown[] => cols.map((c) => {
    const value = row[c];
    return value === undefined ? null : value;
  });
  if (cols.length === 0) {
    return { columns: cols, values: () => [], idOf: () => "", idOfRow: () => "", textOf: () => "" };
  }
  if (cols.length === 1) {
    const only = cols[0]!;
    return {
      columns: cols,
      values,
      idOf: (vals) => valueId(vals[0]),
      idOfRow: (row) => valueId(row[only]),
      textOf: (vals) => JSON.stringify(vals[0] ?? null),
    };
  }
  const textOf = (vals: readonly unknown[]) => JSON.stringify(vals);
  return { columns: cols, values, idOf: textOf, idOfRow: (row) => JSON.stringify(values(row)), textOf };
}

/**
 * A group key as message-key text: one string column is the string itself (so a topic keyed by
 * `sym` reads naturally); anything else is the JSON of the value, or of the list of values. Hop
 * records, stateful outputs and table lookups use it alike, so equal keys land in equal
 * partitions and find each other.
 */
export function groupKeyText(values: readonly unknown[]): string {
  if (values.length === 1) return typeof values[0] === "string" ? values[0] : JSON.stringify(values[0] ?? null);
  return JSON.stringify(values.map((v) => v ?? null));
}

/** Writes the group columns into an output row. */
export function writeGroup(out: Row, columns: readonly string[], values: readonly unknown[]): void {
  for (let i = 0; i < columns.length; i++) out[columns[i]!] = values[i];
}

/** A restored group's values: a list with one value per group column. */
export function readGroup(r: StateReader, value: unknown, key: GroupKey): unknown[] {
  const group = r.list(value, "group");
  if (group.length !== key.columns.length) r.fail(`group has ${group.length} values, groupBy has ${key.columns.length} columns`);
  return group;
}
