/**
 * Declared columns of a transform, and the cast of a row to them: each declared column by name,
 * a missing column or a value that does not fit the type becomes null, undeclared columns are
 * left out. No value is converted (the string "12" does not fit `number`).
 */
import type { Row } from "../expr/index.ts";

/** The column types a manifest may declare. `any` keeps any JSON value. */
export const columnTypes = ["string", "number", "integer", "boolean", "object", "list", "any"] as const;
export type ColumnType = (typeof columnTypes)[number];

export interface ColumnDef {
  readonly name: string;
  readonly type: ColumnType;
}

function fits(value: unknown, type: ColumnType): boolean {
  switch (type) {
    case "string":
      return typeof value === "string";
    case "number":
      return typeof value === "number" && Number.isFinite(value);
    case "integer":
      return typeof value === "number" && Number.isSafeInteger(value);
    case "boolean":
      return typeof value === "boolean";
    case "object":
      return typeof value === "object" && value !== null && !Array.isArray(value);
    case "list":
      return Array.isArray(value);
    case "any":
      return value !== undefined;
  }
}

/**
 * A function that casts rows to the columns, or null when no columns are declared (rows pass as
 * they are).
 *
 * @example
 * const cast = rowCaster([{ name: "price", type: "number" }, { name: "sku", type: "string" }]);
 * cast!({ price: "12", sku: "A", extra: 1 }); // { price: null, sku: "A" }
 */
export function rowCaster(columns: readonly ColumnDef[] | undefined): ((row: Row) => Row) | null {
  if (!columns || columns.length === 0) return null;
  const list = columns.map((c) => ({ name: c.name, type: c.type }));
  return (row: Row): Row => {
    const out: Row = {};
    for (const { name, type } of list) {
      const value = Object.hasOwn(row, name) ? row[name] : undefined;
      out[name] = value !== undefined && value !== null && fits(value, type) ? value : null;
    }
    return out;
  };
}
