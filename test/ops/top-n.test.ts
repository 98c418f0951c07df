import { describe, expect, test } from "bun:test";
import { compileOp, row, run, thrown, wm } from "./helpers.ts";

function topN(fields: Record<string, unknown>) {
  return compileOp({ op: "topN", timeColumn: "ts", n: 2, by: "score", ...fields });
}

describe("topN: emit", () => {
  test('windowed, emit = "update": the window\'s ranking each time a row enters it, nothing at close', () => {
    const op = topN({ windowMs: 10, emit: "update" }).create();
    const out = run(op, "ts", [row({ ts: 1, score: 5 }), row({ ts: 2, score: 1 }), row({ ts: 3, score: 7 }), row({ ts: 4, score: 0 }), wm(20)]);
    expect(out.rows).toEqual([
      { ts: 1, score: 5, windowStart: 0, windowEnd: 10, rank: 1 },
      { ts: 1, score: 5, windowStart: 0, windowEnd: 10, rank: 1 },
      { ts: 2, score: 1, windowStart: 0, windowEnd: 10, rank: 2 },
      { ts: 3, score: 7, windowStart: 0, windowEnd: 10, rank: 1 },
      { ts: 1, score: 5, windowStart: 0, windowEnd: 10, rank: 2 },
    ]);
    expect(op.stateSize().keys).toBe(0);
  });

  test('a running topN emits at every change already: emit = "final" is refused', () => {
    expect(() => topN({ emit: "final" })).toThrow('field "emit": a running topN (no windowMs) has no window to close');
    expect(() => topN({ emit: "update" })).not.toThrow();
  });
});

describe("topN: running ranking", () => {
  test("emits the new ranking as one row each time it changes, and nothing when a row does not make the top n", () => {
    const op = topN({}).create();
    const out = [5, 3, 4, 1].map((score, i) => op.process({ ts: i, score }, i, 0).rows);
    expect(out).toEqual([
      [{ top: [{ ts: 0, score: 5 }] }],
      [{ top: [{ ts: 0, score: 5 }, { ts: 1, score: 3 }] }],
      [{ top: [{ ts: 0, score: 5 }, { ts: 2, score: 4 }] }],
      [],
    ]);
  });

  test("ties: the earlier arrival ranks higher, and an equal value cannot push it out", () => {
    const op = topN({}).create();
    const out = run(op, "ts", [row({ ts: 0, score: 5, id: "a" }), row({ ts: 1, score: 4, id: "b" }), row({ ts: 2, score: 5, id: "c" }), row({ ts: 3, score: 5, id: "d" })]);
    expect(out.rows.map((r) => (r.top as Array<{ id: string }>).map((x) => x.id))).toEqual([["a"], ["a", "b"], ["a", "c"]]);
  });

  test("order asc ranks the lowest first", () => {
    const op = topN({ order: "asc", n: 3 }).create();
    const out = run(op, "ts", [3, 1, 2, 0, 5].map((score, i) => row({ ts: i, score })));
    expect(out.rows.at(-1)).toEqual({ top: [{ ts: 3, score: 0 }, { ts: 1, score: 1 }, { ts: 2, score: 2 }] });
    expect(out.rows).toHaveLength(4);
  });

  test("ranks per group, with the group columns in front of the list, under the alias", () => {
    const op = topN({ n: 1, groupBy: ["game"], alias: "best" }).create();
    const out = run(op, "ts", [row({ ts: 0, game: "x", score: 1 }), row({ ts: 1, game: "y", score: 0 }), row({ ts: 2, game: "x", score: 2 })]);
    expect(out.rows).toEqual([
      { game: "x", best: [{ ts: 0, game: "x", score: 1 }] },
      { game: "y", best: [{ ts: 1, game: "y", score: 0 }] },
      { game: "x", best: [{ ts: 2, game: "x", score: 2 }] },
    ]);
  });

  test("a row without a score is skipped; a non-number score is a poison row", () => {
    const op = topN({}).create();
    expect(op.process({ ts: 0 }, 0, 0)).toEqual({ rows: [], late: [] });
    expect(op.process({ ts: 0, score: null }, 0, 0)).toEqual({ rows: [], late: [] });
    const error = thrown(() => op.process({ ts: 0, score: "9" }, 0, 0));
    expect(error.code).toBe("POISON_ROW");
    expect(error.context?.reason).toBe("type_error");
    expect(op.stateSize().keys).toBe(0);
  });

  test("expireAfterMs forgets a group once the watermark is that far past its latest row", () => {
    const op = topN({ groupBy: ["g"], expireAfterMs: 100 }).create();
    run(op, "ts", [row({ ts: 0, g: "a", score: 1 }), row({ ts: 50, g: "b", score: 1 }), row({ ts: 60, g: "a", score: 0 })]);
    expect(op.stateSize().keys).toBe(2);
    op.advance(149);
    expect(op.stateSize().keys).toBe(2);
    op.advance(150);
    expect(op.stateSize().keys).toBe(1);
    op.advance(160);
    expect(op.stateSize()).toEqual({ keys: 0, bytes: 0 });
    expect(op.process({ ts: 200, g: "a", score: 3 }, 200, 0).rows).toEqual([{ g: "a", top: [{ ts: 200, g: "a", score: 3 }] }]);
  });
});

describe("topN: per tumbling window", () => {
  test("fires n rows per group at the window's close, with windowStart, windowEnd and rank", () => {
    const op = topN({ windowMs: 10, groupBy: ["g"] }).create();
    const out = run(op, "ts", [
      row({ ts: 1, g: "a", score: 1 }),
      row({ ts: 2, g: "a", score: 3 }),
      row({ ts: 3, g: "b", score: 9 }),
      row({ ts: 4, g: "a", score: 2 }),
      row({ ts: 5, g: "a", score: 3 }),
      row({ ts: 10, g: "a", score: 100 }),
    ]);
    expect(out.rows).toEqual([]);
    expect(op.advance(10)).toEqual([
      { ts: 2, g: "a", score: 3, windowStart: 0, windowEnd: 10, rank: 1 },
      { ts: 5, g: "a", score: 3, windowStart: 0, windowEnd: 10, rank: 2 },
      { ts: 3, g: "b", score: 9, windowStart: 0, windowEnd: 10, rank: 1 },
    ]);
    expect(op.advance(20)).toEqual([{ ts: 10, g: "a", score: 100, windowStart: 10, windowEnd: 20, rank: 1 }]);
  });

  test("a row whose window closed is late", () => {
    const op = topN({ windowMs: 10 }).create();
    const out = run(op, "ts", [wm(10), row({ ts: 9, score: 1 }), row({ ts: 10, score: 1 })]);
    expect(out.late).toEqual([{ ts: 9, score: 1 }]);
    expect(op.advance(20)).toHaveLength(1);
  });

  test("alias and expireAfterMs belong to the running ranking only", () => {
    expect(thrown(() => topN({ windowMs: 10, alias: "x" })).context?.field).toBe("alias");
    expect(thrown(() => topN({ windowMs: 10, expireAfterMs: 5 })).context?.field).toBe("expireAfterMs");
  });
});
