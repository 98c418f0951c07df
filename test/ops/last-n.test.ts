import { describe, expect, test } from "bun:test";
import { compileOp, row, run, thrown } from "./helpers.ts";

function lastN(fields: Record<string, unknown>) {
  return compileOp({ op: "lastN", timeColumn: "ts", n: 3, ...fields });
}

describe("lastN", () => {
  test("emits the last n values, oldest first, on every row, wrapping around its ring", () => {
    const op = lastN({ column: "px" }).create();
    const out = run(op, "ts", [1, 2, 3, 4, 5, 6, 7].map((px, i) => row({ ts: i, px })));
    expect(out.rows.map((r) => r.last)).toEqual([[1], [1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 5], [4, 5, 6], [5, 6, 7]]);
  });

  test("keeps whole rows when no column is given, per group, under the alias", () => {
    const op = lastN({ n: 2, groupBy: ["sym"], alias: "recent" }).create();
    const out = run(op, "ts", [row({ ts: 0, sym: "A" }), row({ ts: 1, sym: "B" }), row({ ts: 2, sym: "A" }), row({ ts: 3, sym: "A" })]);
    expect(out.rows).toEqual([
      { sym: "A", recent: [{ ts: 0, sym: "A" }] },
      { sym: "B", recent: [{ ts: 1, sym: "B" }] },
      { sym: "A", recent: [{ ts: 0, sym: "A" }, { ts: 2, sym: "A" }] },
      { sym: "A", recent: [{ ts: 2, sym: "A" }, { ts: 3, sym: "A" }] },
    ]);
  });

  test("a missing value is kept as null: lastN is a buffer of what came, not an aggregate", () => {
    const op = lastN({ column: "px", n: 2 }).create();
    expect(run(op, "ts", [row({ ts: 0, px: 1 }), row({ ts: 1 })]).rows.at(-1)).toEqual({ last: [1, null] });
  });

  test("the lists it emits are its own: changing one does not change the state", () => {
    const op = lastN({ column: "px" }).create();
    const first = op.process({ ts: 0, px: 1 }, 0, 0).rows[0]!.last as unknown[];
    first.push("x");
    expect(op.process({ ts: 1, px: 2 }, 1, 0).rows[0]!.last).toEqual([1, 2]);
  });

  test("arrival order decides, not event time, and a row is never late", () => {
    const op = lastN({ column: "px" }).create();
    const out = run(op, "ts", [row({ ts: 5, px: "a" }), row({ ts: 1, px: "b" })]);
    expect(out.rows.at(-1)).toEqual({ last: ["a", "b"] });
    op.advance(1_000);
    expect(op.process({ ts: 0, px: "c" }, 0, 0)).toEqual({ rows: [{ last: ["a", "b", "c"] }], late: [] });
  });

  test("expireAfterMs forgets a group once the watermark is that far past its latest row", () => {
    const op = lastN({ column: "px", groupBy: ["g"], expireAfterMs: 10 }).create();
    run(op, "ts", [row({ ts: 0, g: "a", px: 1 }), row({ ts: 5, g: "b", px: 1 }), row({ ts: 8, g: "a", px: 2 })]);
    op.advance(14);
    expect(op.stateSize().keys).toBe(2);
    op.advance(15);
    expect(op.stateSize().keys).toBe(1);
    op.advance(18);
    expect(op.stateSize()).toEqual({ keys: 0, bytes: 0 });
    expect(op.process({ ts: 20, g: "a", px: 3 }, 20, 0).rows).toEqual([{ g: "a", last: [3] }]);
  });

  test("refuses an alias that is also a group column", () => {
    expect(thrown(() => lastN({ groupBy: ["last"] })).context?.field).toBe("alias");
  });
});
