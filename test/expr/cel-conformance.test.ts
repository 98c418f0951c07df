/**
 * A sample of the CEL conformance suite (cel-spec, via @bufbuild/cel-spec) run through our CEL
 * wiring: compileExpression(expr, { language: "cel" }).evaluate(bindings), with the expected
 * result converted to a Value the way our wiring converts CEL results. It checks the boundary
 * (bindings in, values and errors out), not @bufbuild/cel itself.
 */
import { describe, expect, test } from "bun:test";
import { celUint } from "@bufbuild/cel";
import { tests as conformance } from "@bufbuild/cel-spec/testdata/conformance.js";
import { compileExpression, ExpressionCompileError, ExpressionEvalError, type Value } from "../../src/expr/index.ts";

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
interface SuiteJson {
  name: string;
  suites?: SuiteJson[];
  tests?: { original: { [key: string]: Json } }[];
}

/**
 * The sections sampled: plain values, operators, strings, lists, maps, macros, conversions.
 * Not sampled: anything built on protobuf messages (proto2/3, wrappers, enums, dynamic), time
 * (timestamps come back as epoch ms here), extensions we do not load, and
 * fields/quoted_map_fields (backtick-quoted fields are newer than the @bufbuild/cel 0.6.1 parser).
 */
const SAMPLED = [
  "basic/self_eval_zeroish",
  "basic/self_eval_nonzeroish",
  "basic/variables",
  "basic/functions",
  "basic/reserved_const",
  "comparisons/eq_literal",
  "comparisons/ne_literal",
  "comparisons/lt_literal",
  "comparisons/gt_literal",
  "comparisons/lte_literal",
  "comparisons/gte_literal",
  "comparisons/in_list_literal",
  "comparisons/in_map_literal",
  "comparisons/bound",
  "logic/conditional",
  "logic/AND",
  "logic/OR",
  "logic/NOT",
  "string/size",
  "string/starts_with",
  "string/ends_with",
  "string/matches",
  "string/concatenation",
  "string/contains",
  "lists/concatenation",
  "lists/index",
  "lists/in",
  "lists/size",
  "fields/map_fields",
  "fields/map_has",
  "fields/in",
  "fp_math/fp_math",
  "integer_math/int64_math",
  "macros/exists",
  "macros/all",
  "macros/exists_one",
  "macros/map",
  "macros/filter",
  "macros/nested",
  "conversions/int",
  "conversions/double",
  "conversions/string",
  "conversions/bool",
];

/** Tests left out, with why. Anything needing protobuf messages is left out automatically. */
const SKIPPED: Record<string, string> = {
  "basic/functions/unbound_is_runtime_error":
    "runs unchecked and expects `f_unknown(17) || true` to absorb the error; our wiring rejects unknown functions at compile time, as CEL's checker does",
};

/** Features outside a JSON-row boundary: messages, enums, containers, type-check-only tests. */
function outOfScope(original: { [key: string]: Json }): string | undefined {
  if (original.container !== undefined) return "uses a protobuf container";
  if (original.checkOnly !== undefined || original.typedResult !== undefined) return "type-check only";
  if (original.value === undefined && original.evalError === undefined) return "no expected result";
  const text = JSON.stringify([original.value ?? null, original.bindings ?? null]);
  if (/objectValue|enumValue|typeValue|"@type"/.test(text)) return "needs protobuf messages or type values";
  return undefined;
}

function find(suite: SuiteJson, path: string[]): SuiteJson | undefined {
  if (path.length === 0) return suite;
  const child = (suite.suites ?? []).find((s) => s.name === path[0]);
  return child === undefined ? undefined : find(child, path.slice(1));
}

function number(v: Json): number {
  return typeof v === "string" ? Number(v) : (v as number);
}

/** cel.expr.Value JSON → what our wiring returns for it. */
function expectedValue(v: { [key: string]: Json }): Value {
  if ("nullValue" in v) return null;
  if ("boolValue" in v) return v.boolValue as boolean;
  if ("int64Value" in v) return Number(v.int64Value);
  if ("uint64Value" in v) return Number(v.uint64Value);
  if ("doubleValue" in v) return number(v.doubleValue!);
  if ("stringValue" in v) return v.stringValue as string;
  if ("bytesValue" in v) return v.bytesValue as string;
  if ("listValue" in v) {
    const values = ((v.listValue as { values?: Json[] }).values ?? []) as { [key: string]: Json }[];
    return values.map(expectedValue);
  }
  if ("mapValue" in v) {
    const out: { [key: string]: Value } = {};
    const entries = ((v.mapValue as { entries?: Json[] }).entries ?? []) as { key: { [key: string]: Json }; value: { [key: string]: Json } }[];
    for (const { key, value } of entries) out[String(expectedValue(key))] = expectedValue(value);
    return out;
  }
  throw new Error(`unhandled expected value ${JSON.stringify(v)}`);
}

/** cel.expr.Value JSON → a CEL input binding (ints stay ints: bigint). */
function binding(v: { [key: string]: Json }): unknown {
  if ("nullValue" in v) return null;
  if ("boolValue" in v) return v.boolValue;
  if ("int64Value" in v) return BigInt(v.int64Value as string);
  if ("uint64Value" in v) return celUint(BigInt(v.uint64Value as string));
  if ("doubleValue" in v) return number(v.doubleValue!);
  if ("stringValue" in v) return v.stringValue;
  if ("bytesValue" in v) return Uint8Array.from(atob(v.bytesValue as string), (c) => c.charCodeAt(0));
  if ("listValue" in v) return (((v.listValue as { values?: Json[] }).values ?? []) as { [key: string]: Json }[]).map(binding);
  if ("mapValue" in v) {
    const entries = ((v.mapValue as { entries?: Json[] }).entries ?? []) as { key: { [key: string]: Json }; value: { [key: string]: Json } }[];
    return new Map(entries.map(({ key, value }) => [binding(key), binding(value)]));
  }
  throw new Error(`unhandled binding ${JSON.stringify(v)}`);
}

/** Equality for results: NaN matches NaN here, since both sides came from the same double. */
function same(a: Value, b: Value): boolean {
  if (typeof a === "number" && typeof b === "number") return a === b || (Number.isNaN(a) && Number.isNaN(b));
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((x, i) => same(x, b[i]!));
  if (typeof a === "object" && typeof b === "object" && a !== null && b !== null && !Array.isArray(a) && !Array.isArray(b)) {
    const keys = Object.keys(a);
    return keys.length === Object.keys(b).length && keys.every((k) => k in b && same(a[k]!, b[k]!));
  }
  return a === b;
}

interface Case {
  section: string;
  name: string;
  expr: string;
  bindings: Record<string, unknown>;
  expected: { value: Value } | { error: true };
}

function collect(): { cases: Case[]; outOfScope: number } {
  const cases: Case[] = [];
  let skipped = 0;
  for (const section of SAMPLED) {
    const suite = find(conformance as unknown as SuiteJson, section.split("/"));
    if (suite === undefined) throw new Error(`no conformance section ${section}`);
    for (const { original } of suite.tests ?? []) {
      const name = String(original.name);
      if (outOfScope(original) !== undefined || SKIPPED[`${section}/${name}`] !== undefined) {
        skipped++;
        continue;
      }
      const bindings: Record<string, unknown> = {};
      const raw = (original.bindings ?? {}) as { [key: string]: { value: { [key: string]: Json } } };
      for (const [key, { value }] of Object.entries(raw)) bindings[key] = binding(value);
      cases.push({
        section,
        name,
        expr: String(original.expr),
        bindings,
        expected: original.evalError !== undefined ? { error: true } : { value: expectedValue(original.value as { [key: string]: Json }) },
      });
    }
  }
  return { cases, outOfScope: skipped };
}

const { cases, outOfScope: outOfScopeCount } = collect();

describe("the CEL conformance sample", () => {
  test("covers a sizeable sample and says what it left out", () => {
    console.log(`CEL conformance sample: ${cases.length} tests run from ${SAMPLED.length} sections, ${outOfScopeCount} left out`);
    expect(cases.length).toBeGreaterThan(400);
  });

  for (const c of cases) {
    test(`${c.section}/${c.name}: ${c.expr}`, () => {
      let outcome: { value: Value } | { error: unknown };
      try {
        outcome = { value: compileExpression(c.expr, { language: "cel" }).evaluate(c.bindings) };
      } catch (e) {
        outcome = { error: e };
      }
      if ("error" in c.expected) {
        // Our wiring finds unknown functions at compile time, so an expected error may come early.
        expect("error" in outcome).toBe(true);
        const error = (outcome as { error: unknown }).error;
        expect(error instanceof ExpressionEvalError || error instanceof ExpressionCompileError).toBe(true);
        return;
      }
      if ("error" in outcome) throw outcome.error;
      if (!same(outcome.value, c.expected.value)) {
        throw new Error(`expected ${JSON.stringify(c.expected.value)}, got ${JSON.stringify(outcome.value)}`);
      }
    });
  }
});
