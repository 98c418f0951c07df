/**
 * Rego filters through the CLI and the real broker: a policy file next to the pipeline file,
 * compiled by OPA at start; exact output, a row whose evaluation fails dead-lettered as
 * policy_error, and a policy that does not compile refused by `validate`.
 */
import { describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import type { InboundRecord } from "../../src/kafka/port.ts";
import { runCli, writePipeline } from "../helpers/cli.ts";
import { createTopic, header, json, produce, uniqueName } from "../helpers/kafka.ts";
import { pipelineToml } from "../helpers/pipelines.ts";
import { readUntil, runUntilOutput } from "../helpers/streams.ts";

const POLICY = `package spectrum

default allow := false

allow := true if {
  input.snr > 10.0
  input.freq_mhz > 100.0
}

# A band listed as blocked gives allow a second value: an evaluation error for that row.
allow := false if input.band == "blocked"
`;

function pipelineWithPolicy(name: string, input: string, output: string, dlq: string, policy: string): string {
  const file = writePipeline(
    pipelineToml({
      name,
      datasets: { detections: { topic: input, deadLetter: dlq }, allowed: { topic: output } },
      transforms: [{ inputs: ["detections"], output: "allowed", steps: [{ op: "filter", language: "rego", policy: "spectrum.rego", query: "data.spectrum.allow" }, { op: "select", columns: ["id", "snr"] }] }],
    }),
  );
  writeFileSync(join(dirname(file), "spectrum.rego"), policy);
  return file;
}

describe("Rego filters through the real broker", () => {
  test("the document's policy keeps exactly the rows it allows; a row that fails evaluation is dead-lettered as policy_error", async () => {
    const name = uniqueName("rego");
    const [input, output, dlq] = ["in", "out", "dlq"].map((t) => `${name}-${t}`) as [string, string, string];
    await createTopic(input, 2);
    const rows = Array.from({ length: 200 }, (_, i) => ({ id: i, snr: i % 25, freq_mhz: 50 + (i % 7) * 20, band: i === 39 ? "blocked" : "vhf" }));
    await produce(rows.map((r) => ({ topic: input, key: `k${r.id}`, value: JSON.stringify(r) })));
    const allowed = rows.filter((r) => r.snr > 10 && r.freq_mhz > 100 && r.band !== "blocked");
    const failing = rows.filter((r) => r.band === "blocked" && r.snr > 10 && r.freq_mhz > 100);
    expect(failing.map((r) => r.id)).toEqual([39]);
    const { run, records } = await runUntilOutput(pipelineWithPolicy(name, input, output, dlq, POLICY), output, (got) => got.length >= allowed.length, "the allowed rows", { settleMs: 1000 });
    expect(records.map(json).sort((a, b) => a.id - b.id)).toEqual(allowed.map((r) => ({ id: r.id, snr: r.snr })));
    const dead = (await readUntil(dlq, (got) => got.length >= 1, "the dead letter", { settleMs: 500 })) as InboundRecord[];
    expect(dead.map((r) => json(r).id)).toEqual([39]);
    expect(header(dead[0]!, "fv.error.reason")).toBe("policy_error");
    expect(header(dead[0]!, "fv.error.message")).toContain("data.spectrum.allow failed for this row");
    const final = run.records.at(-1)!.metrics!;
    expect(final.poisonByReason.policy_error).toBe(1);
    expect(final.dropped).toBe(200 - allowed.length - 1);
  });

  test("a policy that does not compile: validate names the stage, the step and OPA's message with its line, and exits 1", async () => {
    const name = uniqueName("rego-bad");
    const file = pipelineWithPolicy(name, `${name}-in`, `${name}-out`, `${name}-dlq`, "package spectrum\n\nallow if {\n  input.snr >\n}\n");
    const { code, output } = await runCli(["validate", "--offline", file]);
    expect(code).toBe(1);
    expect(output).toContain('invalid topology: stage 1, step 1 (op "filter"), field "policy"');
    expect(output).toContain("policy.rego:5: rego_parse_error");
  });
});
