import { describe, expect, test } from "bun:test";
import { groupKeyText, planKeying, rowKeyText } from "../../src/topology/keying.ts";
import { compileTopology } from "../../src/topology/compile-topology.ts";

const window = (groupBy: string[], extra: Record<string, unknown> = {}) => ({ op: "windowedAggregate", timeColumn: "ts", windowMs: 60000, groupBy, aggs: [{ op: "count", alias: "n" }], ...extra });
const lastN = (groupBy: string[], extra: Record<string, unknown> = {}) => ({ op: "lastN", timeColumn: "windowEnd", n: 2, groupBy, ...extra });
const plan = (stages: unknown[]) => planKeying(compileTopology({ stages }), "p");

describe("planKeying", () => {
  test("a source topic is keyed by its message key: a groupBy gets a hop named fv-repartition-<name>-<stage>", () => {
    const [stage] = plan([{ inputs: ["trades"], output: "counts", steps: [window(["sym"])] }]);
    expect(stage!.hop).toEqual({ topic: "fv-repartition-p-1", keyColumns: [["sym"]] });
    expect(stage!.reason).toBe('repartition through fv-repartition-p-1 keyed by [sym]: input "trades" is keyed by its message key, not by [sym]');
  });

  test("repartition = false skips the hop and says so; true forces one", () => {
    expect(plan([{ inputs: ["t"], output: "o", steps: [window(["sym"], { repartition: false })] }])[0]).toEqual({
      stage: 0,
      reason: "no repartition: step 1 (windowedAggregate) sets repartition = false (the inputs must already be keyed by [sym])",
    });
    const forced = plan([
      { inputs: ["t"], output: "a", steps: [window(["sym"])] },
      { inputs: ["a"], output: "b", steps: [lastN(["sym"], { repartition: true })] },
    ]);
    expect(forced[1]!.hop?.topic).toBe("fv-repartition-p-2");
    expect(forced[1]!.reason).toContain("step 1 (lastN) sets repartition = true");
  });

  test("a stateful stage keys its output by its group: a later stage grouping by the same columns needs no hop", () => {
    const plans = plan([
      { inputs: ["t"], output: "a", steps: [window(["sym"]), { op: "filter", expression: "n > 1" }] },
      { inputs: ["a"], output: "b", steps: [{ op: "select", columns: ["sym", "n", "windowEnd"] }, lastN(["sym"])] },
      { inputs: ["a"], output: "c", steps: [lastN(["windowStart"])] },
    ]);
    expect(plans[1]).toEqual({ stage: 1, reason: 'no repartition: input "a" is already keyed by [sym]' });
    expect(plans[2]!.hop?.topic).toBe("fv-repartition-p-3");
    expect(plans[2]!.reason).toContain('input "a" (output of stage 1) is keyed by [sym], not by [windowStart]');
  });

  test("a step that renames, drops or overwrites a key column loses the keying", () => {
    for (const step of [{ op: "rename", mapping: { sym: "ticker" } }, { op: "drop", columns: ["sym"] }, { op: "applyExpression", column: "sym", expression: "'x'" }, { op: "select", columns: ["n"] }]) {
      const plans = plan([
        { inputs: ["t"], output: "a", steps: [window(["sym"]), step] },
        { inputs: ["a"], output: "b", steps: [lastN(["sym"])] },
      ]);
      expect(plans[1]!.hop).toBeDefined();
      expect(plans[1]!.reason).toContain("keyed by columns the engine cannot name");
    }
    // Inline stages pass the key through while they leave the key columns alone.
    const through = plan([
      { inputs: ["t"], output: "a", steps: [window(["sym"])] },
      { inputs: ["a"], output: "b", steps: [{ op: "applyExpression", column: "big", expression: "n > 10" }] },
      { inputs: ["b"], output: "c", steps: [lastN(["sym"])] },
    ]);
    expect(through[1]!.hop).toBeUndefined();
  });

  test("a join whose sides are keyed differently sends both through one hop", () => {
    const [stage] = plan([{ inputs: ["orders", "quotes"], output: "j", steps: [{ op: "streamJoin", timeColumn: "ts", leftKey: "orderSym", rightKey: "sym", withinMs: 1000 }] }]);
    expect(stage!.hop).toEqual({ topic: "fv-repartition-p-1", keyColumns: [["orderSym"], ["sym"]] });
    expect(stage!.reason).toContain("both join inputs go through it");
  });

  test("a repartition option that is not a boolean is refused, naming the field", () => {
    expect(() => compileTopology({ stages: [{ inputs: ["t"], output: "o", steps: [window(["sym"], { repartition: "no" })] }] })).toThrow(
      'stage 1, step 1 (op "windowedAggregate"), field "repartition": repartition is true or false',
    );
  });
});

describe("group key text", () => {
  test("one string column is the string; anything else is JSON; a missing column is null", () => {
    expect(groupKeyText(["ACME"])).toBe("ACME");
    expect(groupKeyText([42])).toBe("42");
    expect(groupKeyText([null])).toBe("null");
    expect(groupKeyText(["a", 1])).toBe('["a",1]');
    expect(groupKeyText([])).toBe("[]");
    expect(rowKeyText({ a: "x" }, ["a", "b"])).toBe('["x",null]');
  });
});
