import type { Row } from "../expr/index.ts";

/**
 * Reads a row's group (or join) key: the values of the key columns, a missing column read as
 * null, and a string that identifies them (their JSON text). No columns: one global group, "".
 */
export interface GroupKey {
  readonly columns: readonly string[];
  /** The key's values, in column order (missing → null). */
  values(row: Row): unknown[];
  /** The identity of a list of key values, as `values` returns them. */
  keyOf(values: readonly unknown[]): string;
  /** Same as `keyOf(values(row))`, without building the list when there is one column. */
  keyOfRow(row: Row): string;
}

export function groupKey(columns: readonly string[]): GroupKey {
  const cols = [...columns];
  const values = (row: Row): unknown[] => cols.map((c) => {
    const value = row[c];
    return value === undefined ? null : value;
  });
  if (cols.length === 0) {
    return { columns: cols, values: () => [], keyOf: () => "", keyOfRow: () => "" };
  }
  if (cols.length === 1) {
    const only = cols[0]!;
    return {
      columns: cols,
      values,
      keyOf: (vals) => JSON.stringify(vals[0] ?? null),
      keyOfRow: (row) => JSON.stringify(row[only] ?? null),
    };
  }
  return { columns: cols, values, keyOf: (vals) => JSON.stringify(vals), keyOfRow: (row) => JSON.stringify(values(row)) };
}

/** Writes the group columns into an output row. */
export function writeGroup(out: Row, columns: readonly string[], values: readonly unknown[]): void {
  for (let i = 0; i < columns.length; i++) out[columns[i]!] = values[i];
}
