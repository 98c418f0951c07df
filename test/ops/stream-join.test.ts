import { describe, expect, test } from "bun:test";
import { compileOp, row, run, thrown, wm } from "./helpers.ts";

const LEFT = 0;
const RIGHT = 1;

function join(fields: Record<string, unknown>) {
  return compileOp({ op: "streamJoin", timeColumn: "ts", on: "id", withinMs: 10, ...fields }, 2);
}

describe("streamJoin: bounds", () => {
  test("a right row matches a buffered left row exactly withinMs later or earlier, and not withinMs + 1", () => {
    const op = join({}).create();
    const out = run(op, "ts", [
      row({ id: 1, ts: 100, q: "L" }, LEFT),
      row({ id: 1, ts: 110, p: "late-ok" }, RIGHT),
      row({ id: 1, ts: 111, p: "too-late" }, RIGHT),
      row({ id: 1, ts: 90, p: "early-ok" }, RIGHT),
      row({ id: 1, ts: 89, p: "too-early" }, RIGHT),
    ]);
    expect(out.rows).toEqual([
      { id: 1, ts: 100, q: "L", right_id: 1, right_ts: 110, right_p: "late-ok" },
      { id: 1, ts: 100, q: "L", right_id: 1, right_ts: 90, right_p: "early-ok" },
    ]);
  });

  test("the other way round: a left row matches buffered right rows within withinMs either side, in their arrival order", () => {
    const op = join({}).create();
    const out = run(op, "ts", [
      row({ id: 1, ts: 111, p: "a" }, RIGHT),
      row({ id: 1, ts: 110, p: "b" }, RIGHT),
      row({ id: 2, ts: 100, p: "other key" }, RIGHT),
      row({ id: 1, ts: 89, p: "c" }, RIGHT),
      row({ id: 1, ts: 90, p: "d" }, RIGHT),
      row({ id: 1, ts: 100 }, LEFT),
    ]);
    expect(out.rows.map((r) => r.right_p)).toEqual(["b", "d"]);
  });

  test("withinMs 0 matches equal event times only", () => {
    const op = join({ withinMs: 0 }).create();
    const out = run(op, "ts", [row({ id: 1, ts: 5 }, LEFT), row({ id: 1, ts: 6 }, RIGHT), row({ id: 1, ts: 5 }, RIGHT)]);
    expect(out.rows).toEqual([{ id: 1, ts: 5, right_id: 1, right_ts: 5 }]);
  });

  test("each matching pair is emitted once, when the later of the two arrives", () => {
    const op = join({}).create();
    const out = run(op, "ts", [
      row({ id: 1, ts: 0, l: 1 }, LEFT),
      row({ id: 1, ts: 1, r: 1 }, RIGHT),
      row({ id: 1, ts: 2, l: 2 }, LEFT),
      row({ id: 1, ts: 3, r: 2 }, RIGHT),
    ]);
    expect(out.rows.map((x) => `${x.l}-${x.right_r}`)).toEqual(["1-1", "2-1", "1-2", "2-2"]);
  });
});

describe("streamJoin: eviction, lateness and left joins", () => {
  test("a left join emits an unmatched left row with null right columns once the watermark passes its time + withinMs", () => {
    const op = join({ type: "left", rightColumns: ["px", "venue"] }).create();
    run(op, "ts", [row({ id: 1, ts: 100, q: 5 }, LEFT)]);
    expect(op.advance(110)).toEqual([]);
    expect(op.advance(111)).toEqual([{ id: 1, ts: 100, q: 5, right_px: null, right_venue: null }]);
    expect(op.stateSize().keys).toBe(0);
  });

  test("a left row that matched (when it arrived, or later) is not emitted again with nulls", () => {
    const op = join({ type: "left", rightColumns: ["px"] }).create();
    const out = run(op, "ts", [
      row({ id: 1, ts: 100 }, LEFT),
      row({ id: 2, ts: 100 }, RIGHT),
      row({ id: 2, ts: 101 }, LEFT),
      row({ id: 1, ts: 105, px: 7, extra: "dropped" }, RIGHT),
      wm(200),
    ]);
    expect(out.rows).toEqual([
      { id: 2, ts: 101, right_px: null },
      { id: 1, ts: 100, right_px: 7 },
    ]);
  });

  test("buffered rows leave once the watermark passes their time + withinMs, so later rows no longer match them", () => {
    const op = join({}).create();
    run(op, "ts", [row({ id: 1, ts: 100 }, LEFT), row({ id: 1, ts: 104 }, RIGHT)]);
    expect(op.stateSize().keys).toBe(2);
    op.advance(111);
    expect(op.stateSize().keys).toBe(1);
    op.advance(115);
    expect(op.stateSize()).toEqual({ keys: 0, bytes: 0 });
  });

  test("a row earlier than the watermark is late: a partner it needed may have been evicted", () => {
    const op = join({}).create();
    const out = run(op, "ts", [row({ id: 1, ts: 100 }, LEFT), wm(105), row({ id: 1, ts: 104 }, RIGHT), row({ id: 1, ts: 105 }, RIGHT)]);
    expect(out.late).toEqual([{ id: 1, ts: 104 }]);
    expect(out.rows).toEqual([{ id: 1, ts: 100, right_id: 1, right_ts: 105 }]);
  });

  test("a null key matches nothing: an inner join drops the row, a left join emits it with nulls at once", () => {
    const inner = join({}).create();
    expect(run(inner, "ts", [row({ id: null, ts: 1 }, RIGHT), row({ ts: 1 }, LEFT), row({ id: null, ts: 1 }, LEFT)]).rows).toEqual([]);
    expect(inner.stateSize().keys).toBe(0);
    const left = join({ type: "left", rightColumns: ["px"] }).create();
    expect(left.process({ ts: 1, q: 1 }, 1, LEFT).rows).toEqual([{ ts: 1, q: 1, right_px: null }]);
  });
});

describe("streamJoin: keys and output shape", () => {
  test("leftKey and rightKey join columns with different names, several columns pairing up in order", () => {
    const op = join({ on: undefined, leftKey: ["acct", "sym"], rightKey: ["account", "symbol"] }).create();
    const out = run(op, "ts", [
      row({ acct: 1, sym: "A", ts: 0 }, LEFT),
      row({ account: 1, symbol: "B", ts: 0 }, RIGHT),
      row({ account: 1, symbol: "A", ts: 0 }, RIGHT),
    ]);
    expect(out.rows).toEqual([{ acct: 1, sym: "A", ts: 0, right_account: 1, right_symbol: "A", right_ts: 0 }]);
  });

  test("key values compare by kind: 1 does not match \"1\"", () => {
    const op = join({}).create();
    expect(run(op, "ts", [row({ id: 1, ts: 0 }, LEFT), row({ id: "1", ts: 0 }, RIGHT)]).rows).toEqual([]);
  });

  test("projections and prefixes shape the row: left columns first, then right ones", () => {
    const op = join({ leftColumns: ["id", "qty"], rightColumns: ["px"], leftPrefix: "o_", rightPrefix: "q_" }).create();
    const out = run(op, "ts", [row({ id: 1, ts: 0, qty: 3, note: "x" }, LEFT), row({ id: 1, ts: 2, px: 9, note: "y" }, RIGHT)]);
    expect(out.rows).toEqual([{ o_id: 1, o_qty: 3, q_px: 9 }]);
    expect(Object.keys(out.rows[0]!)).toEqual(["o_id", "o_qty", "q_px"]);
  });

  test("when a right column's output name equals a left one, the left value stays", () => {
    const op = join({ rightPrefix: "" }).create();
    const out = run(op, "ts", [row({ id: 1, ts: 0, v: "left" }, LEFT), row({ id: 1, ts: 3, v: "right", w: 2 }, RIGHT)]);
    expect(out.rows).toEqual([{ id: 1, ts: 0, v: "left", w: 2 }]);
  });

  test("stored rows are copies: changing a row after process() does not change what the join emits", () => {
    const op = join({}).create();
    const left = { id: 1, ts: 0, v: 1 };
    op.process(left, 0, LEFT);
    left.v = 2;
    expect(op.process({ id: 1, ts: 0 }, 0, RIGHT).rows[0]!.v).toBe(1);
  });
});

describe("streamJoin: compile checks", () => {
  test.each([
    [{ type: "left" }, "rightColumns"],
    [{ leftKey: "a", rightKey: "b" }, "on"],
    [{ on: undefined, leftKey: "a" }, "rightKey"],
    [{ on: undefined, leftKey: ["a", "b"], rightKey: ["c"] }, "rightKey"],
    [{ leftColumns: ["v"], rightColumns: ["v"], rightPrefix: "" }, "rightColumns.0"],
  ])("refuses %j naming field %s", (fields, field) => {
    const error = thrown(() => join(fields));
    expect(error.code).toBe("INVALID_TOPOLOGY");
    expect(error.context?.field).toBe(field);
  });

  test("needs a stage with exactly two inputs", () => {
    const error = thrown(() => compileOp({ op: "streamJoin", timeColumn: "ts", on: "id", withinMs: 1 }, 1));
    expect(error.code).toBe("INVALID_TOPOLOGY");
    expect(error.context?.field).toBe("inputs");
  });

  test("reports each input's key columns for repartitioning", () => {
    const compiled = join({ on: undefined, leftKey: "a", rightKey: ["b"] });
    expect(compiled.keyColumns).toEqual(["a"]);
    expect(compiled.inputKeyColumns).toEqual([["a"], ["b"]]);
  });
});
