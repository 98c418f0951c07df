import { describe, expect, test } from "bun:test";
import { rowCaster } from "./imports.ts";

describe("input casting to the declared columns", () => {
  const cast = rowCaster([
    { name: "sku", type: "string" },
    { name: "price", type: "number" },
    { name: "qty", type: "integer" },
    { name: "ok", type: "boolean" },
    { name: "tags", type: "list" },
    { name: "meta", type: "object" },
    { name: "raw", type: "any" },
  ])!;

  test("keeps values that fit, by name, in the declared order, and leaves undeclared columns out", () => {
    expect(cast({ extra: 1, raw: [1], meta: { a: 1 }, tags: ["x"], ok: true, qty: 3, price: 1.5, sku: "A" })).toEqual({
      sku: "A",
      price: 1.5,
      qty: 3,
      ok: true,
      tags: ["x"],
      meta: { a: 1 },
      raw: [1],
    });
    expect(Object.keys(cast({ sku: "A" }))).toEqual(["sku", "price", "qty", "ok", "tags", "meta", "raw"]);
  });

  test("a missing column or a value that does not fit becomes null; nothing is converted", () => {
    expect(cast({ sku: 12, price: "1.5", qty: 2.5, ok: "true", tags: { 0: "x" }, meta: [1] })).toEqual({
      sku: null,
      price: null,
      qty: null,
      ok: null,
      tags: null,
      meta: null,
      raw: null,
    });
    expect(cast({ price: Number.NaN, qty: 2 ** 60 })).toMatchObject({ price: null, qty: null });
  });

  test("an inherited property is not a column", () => {
    const row = Object.create({ sku: "inherited" }) as Record<string, unknown>;
    expect(cast(row).sku).toBeNull();
  });

  test("no declared columns: rows pass as they are", () => {
    expect(rowCaster(undefined)).toBeNull();
    expect(rowCaster([])).toBeNull();
  });
});
