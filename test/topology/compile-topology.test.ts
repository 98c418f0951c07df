import { describe, expect, test } from "bun:test";
import { compileTopology, FvError } from "../../src/index.ts";

const stage = (steps: unknown[], extra: Record<string, unknown> = {}) => ({ inputs: ["events"], output: "out", steps, ...extra });

function errorOf(fn: () => unknown): FvError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(FvError);
    return error as FvError;
  }
  throw new Error("expected an error");
}

describe("compileTopology", () => {
  test("runs select, rename, drop, filter and applyExpression in order", () => {
    const { stages } = compileTopology({
      stages: [
        stage([
          { op: "filter", expression: "price > 100" },
          { op: "applyExpression", column: "notional", expression: "price * qty" },
          { op: "rename", mapping: { sym: "symbol" } },
          { op: "drop", columns: ["note"] },
          { op: "select", columns: ["symbol", "notional", "missing"] },
        ]),
      ],
    });
    const process = stages[0]!.process;
    expect(process({ sym: "A", price: 150, qty: 2, note: "x" })).toEqual({ symbol: "A", notional: 300, missing: null });
    expect(process({ sym: "B", price: 50, qty: 2 })).toBeNull();
  });

  test("select keeps exactly the columns in the given order", () => {
    const { stages } = compileTopology({ stages: [stage([{ op: "select", columns: ["b", "a"] }])] });
    expect(Object.keys(stages[0]!.process({ a: 1, b: 2, c: 3 })!)).toEqual(["b", "a"]);
  });

  test("a filter that gives null drops the row and one that gives a number is poison", () => {
    const { stages } = compileTopology({ stages: [stage([{ op: "filter", expression: "price" }])] });
    expect(stages[0]!.process({ price: null })).toBeNull();
    expect(errorOf(() => stages[0]!.process({ price: 3 })).code).toBe("EXPRESSION_EVAL");
  });

  test("an expression syntax error names the stage, the step and the field", () => {
    const e = errorOf(() => compileTopology({ stages: [stage([]), stage([{ op: "select", columns: ["a"] }, { op: "filter", expression: "price > > 1" }])] }));
    expect(e.code).toBe("INVALID_TOPOLOGY");
    expect(e.message).toContain('stage 2, step 2 (op "filter"), field "expression"');
    expect(e.context).toMatchObject({ stage: 2, step: 2, field: "expression" });
  });

  test("an unknown op is refused with the list of known steps", () => {
    const e = errorOf(() => compileTopology({ stages: [stage([{ op: "frobnicate" }])] }));
    expect(e.message).toContain('stage 1, step 1 (op "frobnicate"), field "op": unknown op "frobnicate"');
    expect(e.message).toContain("select, rename, drop, filter, applyExpression");
  });

  test("a misspelled field is named", () => {
    const e = errorOf(() => compileTopology({ stages: [stage([{ op: "filter", expresion: "a > 1" }])] }));
    expect(e.message).toContain('stage 1, step 1 (op "filter"), field "expression"');
  });

  test("a missing required field says missing, and a misspelt key is named with the field it was meant to be", () => {
    const message = (step: Record<string, unknown>) => errorOf(() => compileTopology({ stages: [stage([step])] })).message;
    expect(message({ op: "select", colums: ["a"] })).toBe(
      'invalid topology: stage 1, step 1 (op "select"), field "columns": missing field "columns" for select; unknown field "colums" (did you mean "columns"?)',
    );
    expect(message({ op: "filter" })).toBe('invalid topology: stage 1, step 1 (op "filter"), field "expression": missing field "expression" for filter');
    expect(message({ op: "filter", expresion: "a > 1" })).toContain('missing field "expression" for filter; unknown field "expresion" (did you mean "expression"?)');
    expect(message({ op: "rename", maping: { a: "b" } })).toContain('field "mapping": missing field "mapping" for rename; unknown field "maping" (did you mean "mapping"?)');
    expect(message({ op: "windowedAggregate", timeColumn: "ts", groupBy: ["k"], aggs: [{ op: "count", alias: "n" }] })).toContain(
      'field "windowMs": missing field "windowMs" for windowedAggregate',
    );
  });

  test("an unknown field close to an optional one suggests it, and one close to none lists the known fields", () => {
    const message = (step: Record<string, unknown>) => errorOf(() => compileTopology({ stages: [stage([step])] })).message;
    const window = { op: "windowedAggregate", timeColumn: "ts", windowMs: 60_000, groupBy: ["k"], aggs: [{ op: "count", alias: "n" }] };
    expect(message({ ...window, slidems: 1000 })).toContain('field "slidems": unknown field "slidems" (did you mean "slideMs"?)');
    expect(message({ op: "select", columns: ["a"], colour: "red" })).toContain('field "colour": unknown field "colour" for select; known fields: "op", "columns"');
    expect(message({ op: "wasm", ref: "x", batch: 3 })).toContain('field "batch": unknown field "batch" for wasm; known fields: "op", "ref"');
  });

  test("a stage without its output says the field is missing", () => {
    const e = errorOf(() => compileTopology({ stages: [{ inputs: ["a"], outpt: "b", steps: [] }] }));
    expect(e.message).toBe('invalid topology: stage 1, field "output": missing field "output"; unknown field "outpt" (did you mean "output"?)');
  });

  test("a stage without inputs is refused", () => {
    const e = errorOf(() => compileTopology({ stages: [{ inputs: [], output: "out", steps: [] }] }));
    expect(e.message).toContain('stage 1, field "inputs"');
  });

  test("an empty topology is refused", () => {
    expect(errorOf(() => compileTopology({ stages: [] })).message).toContain("no stage");
  });
});

describe("stage shape", () => {
  test("a stage with two operator steps is refused, naming the second", () => {
    const e = errorOf(() =>
      compileTopology({ stages: [stage([{ op: "topN", n: 3 }, { op: "filter", expression: "a > 1" }, { op: "lastN", n: 2 }])] }),
    );
    expect(e.message).toContain('stage 1, step 3 (op "lastN"), field "op": a stage holds at most one operator or compute step');
  });
});
