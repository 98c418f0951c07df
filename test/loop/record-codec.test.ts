import { describe, expect, test } from "bun:test";
import { appendable, appendColumns, decodeRow } from "../../src/loop/record-codec.ts";

const bytes = (text: string) => new TextEncoder().encode(text);

describe("decodeRow", () => {
  test("a JSON object is a row, numbers kept exactly as JSON.parse reads them", () => {
    expect(decodeRow(bytes('{"price": 1.5e300, "qty": 3, "id": "1e999"}'))).toEqual({ row: { price: 1.5e300, qty: 3, id: "1e999" }, text: '{"price": 1.5e300, "qty": 3, "id": "1e999"}' });
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
    expect(decodeRow(bytes('{"x": 1e-400}'))).toEqual({ row: { x: 0 }, text: '{"x": 1e-400}' });
  });

  test("text that is not JSON, and JSON that is not an object, are poison", () => {
    expect(decodeRow(bytes("{nope"))).toMatchObject({ poison: "invalid_json" });
    expect(decodeRow(bytes("[1]"))).toMatchObject({ poison: "not_object" });
    expect(decodeRow(null)).toMatchObject({ poison: "not_object" });
  });
});

describe("a row written as its source text with new columns appended", () => {
  const decoded = (text: string) => decodeRow(bytes(text)) as { row: Record<string, unknown>; text: string };

  test("the new columns follow the source's fields as JSON.stringify writes them; the result parses to the row", () => {
    const d = decoded('{"price":60,"qty":2,"note":"é \\"q\\""}');
    expect(appendable(d, ["notional", "tag"])).toBe(true);
    Object.assign(d.row, { notional: 120, tag: "a\"b", skipped: 1 });
    const text = appendColumns(d.text, d.row, ["notional", "tag"]);
    expect(text).toBe('{"price":60,"qty":2,"note":"é \\"q\\"","notional":120,"tag":"a\\"b"}');
    expect(JSON.parse(text)).toEqual({ price: 60, qty: 2, note: 'é "q"', notional: 120, tag: 'a"b' });
  });

  test("values JSON writes specially: undefined is left out, NaN is null, objects nest; a column name is escaped", () => {
    const d = decoded('{"a":1}');
    Object.assign(d.row, { u: undefined, n: NaN, o: { x: [1, "y"] }, 'q"k': true });
    expect(appendColumns(d.text, d.row, ["u", "n", "o", 'q"k'])).toBe('{"a":1,"n":null,"o":{"x":[1,"y"]},"q\\"k":true}');
  });

  test("not appendable: a column the source has already, an empty object, text after the closing brace", () => {
    expect(appendable(decoded('{"a":1,"notional":5}'), ["notional"])).toBe(false);
    expect(appendable(decoded("{}"), ["notional"])).toBe(false);
    expect(appendable(decoded('{"a":1} '), ["notional"])).toBe(false);
    expect(appendable(decoded('{"a":1}'), [])).toBe(true);
  });
});
