import { describe, expect, test } from "bun:test";
import * as v from "valibot";
import { operatorSteps } from "../../src/ops/index.ts";
import { compileOp, row, run, thrown, wm } from "./helpers.ts";

const S = 0;
const T = 1;
const join = (fields: Record<string, unknown> = {}) => compileOp({ op: "tableJoin", on: "sym", timeColumn: "ts", ...fields }, 2);

describe("tableJoin", () => {
  test("each stream row takes the table's current row for its key; the table changing while the stream flows changes later rows only", () => {
    const c = join();
    const op = c.create();
    const out = run(op, c, [
      row({ sym: "ACME", px: 10, venue: "X" }, T),
      row({ ts: 1, sym: "ACME", qty: 1 }, S),
      row({ ts: 2, sym: "GLOBEX", qty: 2 }, S), // no table row yet: an inner join drops it
      row({ sym: "ACME", px: 11, venue: "Y" }, T),
      row({ ts: 3, sym: "ACME", qty: 3 }, S),
      row({ sym: "GLOBEX", px: 7 }, T),
      row({ ts: 4, sym: "GLOBEX", qty: 4 }, S),
    ]);
    expect(out.rows).toEqual([
      { ts: 1, sym: "ACME", qty: 1, px: 10, venue: "X" },
      { ts: 3, sym: "ACME", qty: 3, px: 11, venue: "Y" },
      { ts: 4, sym: "GLOBEX", qty: 4, px: 7 },
    ]);
    expect(op.stateSize().keys).toBe(2);
  });

  test("table rows are keyed by their message key; a tombstone deletes the key", () => {
    const op = join({ type: "left", columns: ["px"], prefix: "t_" }).create();
    op.process({ sym: "ignored", px: 5 }, 0, T, "ACME");
    expect(op.process({ ts: 1, sym: "ACME", qty: 1 }, 1, S).rows).toEqual([{ ts: 1, sym: "ACME", qty: 1, t_px: 5 }]);
    op.tombstone!("ACME", T);
    expect(op.process({ ts: 2, sym: "ACME", qty: 2 }, 2, S).rows).toEqual([{ ts: 2, sym: "ACME", qty: 2, t_px: null }]);
    expect(op.stateSize()).toEqual({ keys: 0, bytes: 0 });
    // A tombstone is written to the changelog: a restore does not bring the key back.
    const restored = join({ type: "left", columns: ["px"], prefix: "t_" }).create();
    restored.restore(op.drainChanges());
    expect(restored.process({ ts: 3, sym: "ACME", qty: 3 }, 3, S).rows).toEqual([{ ts: 3, sym: "ACME", qty: 3, t_px: null }]);
  });

  test("keys of several columns, and non-string keys, match the message-key text the engine writes (JSON)", () => {
    const op = join({ on: ["region", "id"] }).create();
    op.process({ n: 1 }, 0, T, '["eu",7]');
    expect(op.process({ ts: 1, region: "eu", id: 7 }, 1, S).rows).toEqual([{ ts: 1, region: "eu", id: 7, n: 1 }]);
    const byNumber = join({ on: "id" }).create();
    byNumber.process({ n: 2 }, 0, T, "7");
    expect(byNumber.process({ ts: 1, id: 7 }, 1, S).rows).toEqual([{ ts: 1, id: 7, n: 2 }]);
  });

  test("a stream row whose key is null is poison null_key; so is a table record without a key", () => {
    const op = join().create();
    expect(thrown(() => op.process({ ts: 1, qty: 1 }, 1, S)).context?.reason).toBe("null_key");
    expect(thrown(() => op.process({ px: 1 }, 0, T, null)).context?.reason).toBe("null_key");
  });

  test('asOf = "eventTime": the table version in force at the stream row\'s time, history kept historyMs behind the newest', () => {
    const c = join({ asOf: "eventTime", historyMs: 100 });
    const op = c.create();
    const out = run(op, c, [
      row({ ts: 10, sym: "A", px: 1 }, T),
      row({ ts: 20, sym: "A", px: 2 }, T),
      row({ ts: 5, sym: "A", q: "before any version" }, S),
      row({ ts: 15, sym: "A", q: "between" }, S),
      row({ ts: 25, sym: "A", q: "after" }, S),
      row({ ts: 300, sym: "A", px: 3 }, T), // history: 300 − 100 = 200; the version in force at 200 (px 2) stays
      row({ ts: 250, sym: "A", q: "still px 2" }, S),
      row({ ts: 15, sym: "A", q: "px 1 is gone" }, S),
      wm(1000),
    ]);
    expect(out.rows.map((r) => [r.q, r.px])).toEqual([["between", 1], ["after", 2], ["still px 2", 2]]);
  });

  test("as of event time, a tombstone deletes from its own time on: earlier stream rows still find the older version", () => {
    const c = join({ asOf: "eventTime", type: "left", columns: ["px"] });
    const op = c.create();
    op.process({ ts: 100, sym: "A", px: 1 }, 100, T, "A");
    op.tombstone!("A", T, 200);
    expect(op.process({ ts: 150, sym: "A" }, 150, S).rows).toEqual([{ ts: 150, sym: "A", px: 1 }]);
    expect(op.process({ ts: 250, sym: "A" }, 250, S).rows).toEqual([{ ts: 250, sym: "A", px: null }]);
    // Through the changelog, the same.
    const restored = c.create();
    restored.restore(op.drainChanges());
    expect(restored.process({ ts: 150, sym: "A" }, 150, S).rows).toEqual([{ ts: 150, sym: "A", px: 1 }]);
    expect(restored.process({ ts: 250, sym: "A" }, 250, S).rows).toEqual([{ ts: 250, sym: "A", px: null }]);
  });

  test("processing time: a table row whose time column is null is still a table row", () => {
    const c = join();
    const op = c.create();
    run(op, c, [row({ sym: "A", px: 3, ts: null }, T)]);
    // (All columns taken: those the stream row has keep its values.)
    expect(op.process({ ts: 1, sym: "A" }, 1, S).rows).toEqual([{ ts: 1, sym: "A", px: 3 }]);
  });

  test("compile checks name the field", () => {
    const kind = operatorSteps.tableJoin!;
    const compile = (def: Record<string, unknown>, inputNames = ["orders", "prices"]) =>
      kind.compile(v.parse(kind.schema, { op: "tableJoin", on: "sym", timeColumn: "ts", ...def }), { stage: 0, step: 0, inputs: inputNames.length, inputNames });
    expect(compile({ table: "orders" }).tableInput).toBe(0);
    expect(compile({}).tableInput).toBe(1);
    expect(() => compile({ table: "quotes" })).toThrow('field "table": "quotes" is not an input of this stage');
    expect(() => compile({ type: "left" })).toThrow('field "columns": a left join fills the table columns with null');
    expect(() => compile({ historyMs: 5 })).toThrow('field "historyMs": historyMs goes with asOf = "eventTime"');
    expect(() => compile({}, ["orders"])).toThrow("a tableJoin stage has two inputs");
  });
});
