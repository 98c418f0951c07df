import { describe, expect, test } from "bun:test";
import { decodeRow } from "../../src/loop/record-codec.ts";

const bytes = (text: string) => new TextEncoder().encode(text);

describe("decodeRow", () => {
  test("a JSON object is a row, numbers kept exactly as JSON.parse reads them", () => {
    expect(decodeRow(bytes('{"price": 1.5e300, "qty": 3, "id": "1e999"}'))).toEqual({ row: { price: 1.5e300, qty: 3, id: "1e999" } });
  });

  test("a number outside the double range is poison of its own reason, not Infinity written back as null", () => {
    for (const text of ['{"price": 1e400}', '{"a": {"price": -2E+999}}', `{"price": ${"9".repeat(400)}}`, '{"xs": [1, 1e309]}']) {
      const decoded = decodeRow(bytes(text));
      expect(decoded).toMatchObject({ poison: "number_out_of_range" });
    }
    expect(decodeRow(bytes('{"price": 1e400}'))).toEqual({
      poison: "number_out_of_range",
      detail: 'the number in "price" is outside the range of a double (about ±1.8e308); send it as a string',
    });
  });

  test("a tiny number rounds to zero as in every JSON reader, and is kept", () => {
    expect(decodeRow(bytes('{"x": 1e-400}'))).toEqual({ row: { x: 0 } });
  });

  test("text that is not JSON, and JSON that is not an object, are poison", () => {
    expect(decodeRow(bytes("{nope"))).toMatchObject({ poison: "invalid_json" });
    expect(decodeRow(bytes("[1]"))).toMatchObject({ poison: "not_object" });
    expect(decodeRow(null)).toMatchObject({ poison: "not_object" });
  });
});
