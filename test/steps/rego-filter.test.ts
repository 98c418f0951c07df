/**
 * Rego filters, compiled by the real OPA that scripts/setup.sh installs (.tools/bin/opa) and
 * evaluated with @open-policy-agent/opa-wasm.
 */
import { describe, expect, test } from "bun:test";
import { startComputeSteps } from "../../src/loop/compute-runtime.ts";
import { compileTopology } from "../../src/topology/compile-topology.ts";
import { computeConfig } from "../../runtime/cli/compute-config.ts";

const DOCUMENT_POLICY = `package spectrum

default allow := false

allow if {
  input.snr > 10.0
  input.freq_mhz > 100.0
}
`;

/** A stage of one Rego filter, compiled and loaded as a stream would at start; its process() runs the filter. */
async function regoStage(policy: string, query: string) {
  const topology = compileTopology({ stages: [{ inputs: ["in"], output: "out", steps: [{ op: "filter", language: "rego", policy, query }] }] });
  await startComputeSteps(topology.stages, computeConfig(), () => {});
  return topology.stages[0]!;
}

describe("filter with language = rego", () => {
  test("the document's policy: snr > 10.0 and freq_mhz > 100.0 keeps the row, anything else drops it", async () => {
    const stage = await regoStage(DOCUMENT_POLICY, "data.spectrum.allow");
    const rows = [
      { snr: 12.5, freq_mhz: 433 },
      { snr: 10.0, freq_mhz: 433 }, // not above 10
      { snr: 30, freq_mhz: 99.9 },
      { snr: 11, freq_mhz: 100.1 },
      { freq_mhz: 500 }, // no snr: the rule is undefined, the default false
    ];
    expect(rows.map((r) => stage.process({ ...r }))).toEqual([{ snr: 12.5, freq_mhz: 433 }, null, null, { snr: 11, freq_mhz: 100.1 }, null]);
  });

  test("a policy with a default and a set membership", async () => {
    const stage = await regoStage(
      `package trades

default allow := false

venues := {"XNAS", "XNYS"}

allow if {
  venues[input.venue]
  input.qty <= 1000
}
`,
      "data.trades.allow",
    );
    expect([{ venue: "XNAS", qty: 10 }, { venue: "XLON", qty: 10 }, { venue: "XNYS", qty: 5000 }, { venue: "XNYS", qty: 1000 }].map((r) => stage.process({ ...r }) !== null)).toEqual([true, false, false, true]);
  });

  test("a row that makes evaluation fail is poison policy_error; the rows around it are not", async () => {
    const stage = await regoStage(
      `package spectrum

allow := true if input.snr > 10
allow := false if input.band == "blocked"
`,
      "data.spectrum.allow",
    );
    expect(stage.process({ snr: 12, band: "vhf" })).toEqual({ snr: 12, band: "vhf" });
    let error: { code?: string; context?: { reason?: string }; message: string } | undefined;
    try {
      stage.process({ snr: 12, band: "blocked" }); // both rules hold: two values for allow
    } catch (e) {
      error = e as never;
    }
    expect(error?.code).toBe("POISON_ROW");
    expect(error?.context?.reason).toBe("policy_error");
    expect(error?.message).toContain("data.spectrum.allow failed for this row");
    expect(stage.process({ snr: 2, band: "blocked" })).toEqual(null);
  });

  test("a policy that does not compile fails the start, naming the stage, the step and OPA's message with its line", async () => {
    const broken = "package x\n\nallow if {\n  input.a >\n}\n";
    await expect(regoStage(broken, "data.x.allow")).rejects.toThrow(/invalid topology: stage 1, step 1 \(op "filter"\), field "policy": .*policy\.rego:5: rego_parse_error/);
  });

  test.each([
    [{ policy: DOCUMENT_POLICY }, 'field "query": missing field "query" for filter'],
    [{ query: "data.spectrum.allow" }, 'field "policy": missing field "policy" for filter'],
    [{ policy: DOCUMENT_POLICY, query: "spectrum.allow" }, 'field "query": query is a Rego reference to a rule, e.g. query = "data.trades.allow"'],
    [{ policy: DOCUMENT_POLICY, query: "data.spectrum.allow", expression: "snr > 10" }, 'field "expression": unknown field "expression"'],
    [{ policy: "allow if true", query: "data.x.allow" }, 'field "policy": policy is Rego text starting with a package line'],
  ])("%j is refused before anything starts", (fields, message) => {
    expect(() => compileTopology({ stages: [{ inputs: ["in"], output: "out", steps: [{ op: "filter", language: "rego", ...fields }] }] })).toThrow(message);
  });

  test("policy and query go with language = rego only", () => {
    expect(() => compileTopology({ stages: [{ inputs: ["in"], output: "out", steps: [{ op: "filter", expression: "x > 1", query: "data.a.b" }] }] })).toThrow('field "query": unknown field "query"');
  });
});
