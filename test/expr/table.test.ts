/**
 * One table of expression / row / expected result, errors included (by reason). It reads as
 * a reference of the dialect's behaviour; the other files test each rule in depth.
 */
import { describe, expect, test } from "bun:test";
import { compileExpression, ExpressionCompileError, ExpressionEvalError, type Row, type Value } from "../../src/expr/index.ts";

const order: Row = {
  id: "ord-1",
  sym: "AAPL",
  price: 187.5,
  qty: 20,
  side: "buy",
  venue: "xnas",
  ts: 1709296205123,
  filled: false,
  tags: ["lit", "algo"],
  meta: { desk: "eq-1", "trader id": 7, limits: [100, 200], parent: null },
  note: null,
  when: "2024-03-01T12:30:05.123Z",
};

type Expected = { value: Value } | { evalError: string } | { compileError: string };
type Case = [source: string, expected: Expected, row?: Row];

const v = (value: Value): Expected => ({ value });
const fails = (reason: string): Expected => ({ evalError: reason });
const rejects = (reason: string): Expected => ({ compileError: reason });

const cases: Case[] = [
  // literals and columns
  ["1", v(1)],
  ["-1.5e1", v(-15)],
  ["'a' + \"b\"", v("ab")],
  ["null", v(null)],
  ["[1, 'two', null, [true]]", v([1, "two", null, [true]])],
  ["sym", v("AAPL")],
  ["absent", v(null)],
  ["`trader id`", v(3), { "trader id": 3 }],
  // nested access
  ["meta.desk", v("eq-1")],
  ["meta['trader id']", v(7)],
  ["meta.limits[1]", v(200)],
  ["meta.limits[2]", v(null)],
  ["meta.parent.name", v(null)],
  ["tags[0] + '/' + tags[1]", v("lit/algo")],
  ["meta.nope.deeper[0]", v(null)],
  ["tags.x", fails("type_error")],
  ["price.x", fails("type_error")],
  ["tags['0']", fails("type_error")],
  ["meta[0]", fails("type_error")],
  // arithmetic
  ["price * qty", v(3750)],
  ["price / 2", v(93.75)],
  ["qty % 7", v(6)],
  ["qty - price", v(-167.5)],
  ["-qty", v(-20)],
  ["price + qty * 2", v(227.5)],
  ["(price + qty) * 2", v(415)],
  ["note + 1", v(null)],
  ["1 - note", v(null)],
  ["note * note", v(null)],
  ["-note", v(null)],
  ["sym * 2", fails("type_error")],
  ["sym + 1", fails("type_error")],
  ["filled + 1", fails("type_error")],
  ["-sym", fails("type_error")],
  ["tags + tags", fails("type_error")],
  ["qty / 0", fails("division_by_zero")],
  ["qty % (qty - 20)", fails("division_by_zero")],
  ["note / 0", v(null)],
  // strings
  ["sym + '-' + side", v("AAPL-buy")],
  ["upper(venue) + '-' + side", v("XNAS-buy")],
  // ordering
  ["price > 100", v(true)],
  ["price >= 187.5", v(true)],
  ["qty < 20", v(false)],
  ["qty <= 20", v(true)],
  ["sym < 'MSFT'", v(true)],
  ["'b' > 'a'", v(true)],
  ["note > 1", v(null)],
  ["1 <= note", v(null)],
  ["sym > 1", fails("type_error")],
  ["filled < true", fails("type_error")],
  ["tags > 1", fails("type_error")],
  // equality
  ["qty == 20.0", v(true)],
  ["sym == 'AAPL'", v(true)],
  ["sym != 'XYZ'", v(true)],
  ["note == null", v(true)],
  ["absent == null", v(true)],
  ["note != null", v(false)],
  ["filled == 0", v(false)],
  ["'20' == qty", v(false)],
  ["tags == ['lit', 'algo']", v(true)],
  ["tags == ['algo', 'lit']", v(false)],
  ["meta == meta", v(true)],
  ["meta.limits != [100, 200]", v(false)],
  // in
  ["sym in ['AAPL', 'MSFT']", v(true)],
  ["side in ['sell']", v(false)],
  ["'algo' in tags", v(true)],
  ["'PL' in sym", v(true)],
  ["'desk' in meta", v(true)],
  ["'nope' in meta", v(false)],
  ["note in [1, null]", v(true)],
  ["1 in note", v(null)],
  ["note in 'abc'", v(null)],
  ["1 in sym", fails("type_error")],
  ["1 in meta", fails("type_error")],
  ["'a' in qty", fails("type_error")],
  // logic
  ["price > 100 && sym != 'XYZ' && qty >= 10", v(true)],
  ["price > 100 && side == 'sell'", v(false)],
  ["filled || qty > 10", v(true)],
  ["!filled", v(true)],
  ["!note", v(null)],
  ["note && false", v(false)],
  ["note && true", v(null)],
  ["note || true", v(true)],
  ["note || false", v(null)],
  ["false && note", v(false)],
  ["true || sym * 2 > 1", v(true)],
  ["false && qty / 0 > 1", v(false)],
  ["qty && true", fails("type_error")],
  ["true && sym", fails("type_error")],
  ["!qty", fails("type_error")],
  ["note || 1", fails("type_error")],
  // conditional
  ["side == 'buy' ? qty : -qty", v(20)],
  ["side == 'sell' ? qty : -qty", v(-20)],
  ["note ? 'yes' : 'no'", v("no")],
  ["note > 1 ? 'yes' : 'no'", v("no")],
  ["qty ? 1 : 2", fails("type_error")],
  ["qty > 100 ? 'L' : qty > 10 ? 'M' : 'S'", v("M")],
  ["true ? 1 : 1 / 0", v(1)],
  // functions
  ["abs(qty - price)", v(167.5)],
  ["round(price)", v(188)],
  ["roundTo(price / 7, 3)", v(26.786)],
  ["floor(price)", v(187)],
  ["ceil(price)", v(188)],
  ["min(price, qty)", v(20)],
  ["max(meta.limits)", v(200)],
  ["pow(qty, 2)", v(400)],
  ["sqrt(qty * 5)", v(10)],
  ["sqrt(-qty)", fails("function_error")],
  ["lower(sym)", v("aapl")],
  ["trim('  x ')", v("x")],
  ["length(sym)", v(4)],
  ["length(tags)", v(2)],
  ["length(meta)", v(4)],
  ["length(qty)", fails("type_error")],
  ["substring(id, 4)", v("1")],
  ["substring(sym, 1, 2)", v("AP")],
  ["contains(sym, 'AP')", v(true)],
  ["contains(tags, 'lit')", v(true)],
  ["startsWith(id, 'ord-')", v(true)],
  ["endsWith(id, '-2')", v(false)],
  ["split(meta.desk, '-')", v(["eq", "1"])],
  ["replace(id, 'ord', 'order')", v("order-1")],
  ["matches(id, '^ord-[0-9]+$')", v(true)],
  ["matches(sym, note)", v(null)],
  ["join(tags, '+')", v("lit+algo")],
  ["first(tags)", v("lit")],
  ["last(meta.limits)", v(200)],
  ["coalesce(note, meta.parent, 'none')", v("none")],
  ["isNull(note)", v(true)],
  ["toNumber('12.5') * 2", v(25)],
  ["toNumber('n/a')", v(null)],
  ["toString(qty) + 'x'", v("20x")],
  ["typeOf(meta)", v("object")],
  ["parseTime(when) == ts", v(true)],
  ["toIso(ts)", v("2024-03-01T12:30:05.123Z")],
  ["formatTime(ts, 'yyyyMMdd')", v("20240301")],
  ["parseTime('not a time')", v(null)],
  ["toIso(sym)", fails("type_error")],
  ["lower(qty)", fails("type_error")],
  ["upper(note)", v(null)],
  // compile-time rejections
  ["price >", rejects("syntax")],
  ["nosuch(price)", rejects("unknown_function")],
  ["round(price, 2)", rejects("arity")],
  ["matches(sym, '[')", rejects("invalid_argument")],
];

function outcome(source: string, row: Row): Expected {
  let compiled;
  try {
    compiled = compileExpression(source);
  } catch (e) {
    if (e instanceof ExpressionCompileError) return { compileError: e.reason };
    throw e;
  }
  try {
    return { value: compiled.evaluate(row) };
  } catch (e) {
    if (e instanceof ExpressionEvalError) return { evalError: e.reason };
    throw e;
  }
}

describe("the expression table", () => {
  test("has more than a hundred cases", () => {
    expect(cases.length).toBeGreaterThanOrEqual(100);
  });

  for (const [source, expected, row] of cases) {
    const label = "value" in expected
      ? `gives ${JSON.stringify(expected.value)}`
      : "evalError" in expected ? `fails with ${expected.evalError}` : `does not compile (${expected.compileError})`;
    test(`${source} ${label}`, () => {
      expect(outcome(source, row ?? order)).toEqual(expected);
    });
  }
});
