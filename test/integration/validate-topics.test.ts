/** `fv-streams validate` asks the brokers whether the input topics exist; `--offline` skips them. */
import { describe, expect, test } from "bun:test";
import { runCli } from "../helpers/cli.ts";
import { BROKERS, createTopic, uniqueName } from "../helpers/kafka.ts";
import { pipelineFile } from "../helpers/pipelines.ts";

describe("validate and the input topics", () => {
  test("a missing input topic is named and exits 1; a stage's output read by the next stage need not exist; --offline skips the brokers", async () => {
    const name = uniqueName("validate-topics");
    const [present, absent, middle, out] = ["present", "absent", "middle", "out"].map((t) => `${name}-${t}`) as [string, string, string, string];
    await createTopic(present, 1);
    const file = pipelineFile({
      name,
      transforms: [
        { inputs: [present], output: middle, steps: [{ op: "select", columns: ["a"] }] },
        { inputs: [middle], output: out, steps: [{ op: "select", columns: ["a"] }] },
        { inputs: [absent], output: `${name}-other`, steps: [{ op: "select", columns: ["a"] }] },
      ],
    });
    const checked = await runCli(["validate", file]);
    expect(checked.code).toBe(1);
    expect(checked.lines).toContain(`  stage 3: input dataset "${absent}" maps to topic "${absent}", which does not exist on ${BROKERS}: create it before run`);
    expect(checked.lines.join("\n")).not.toContain(`"${middle}" maps to topic`);
    expect(checked.lines.join("\n")).not.toContain(`"${present}" maps to topic`);

    const offline = await runCli(["validate", file, "--offline"]);
    expect(offline.code).toBe(0);
    expect(offline.lines.join("\n")).not.toContain("does not exist");

    const fine = await runCli(["validate", pipelineFile({ name, transforms: [{ inputs: [present], output: out, steps: [{ op: "select", columns: ["a"] }] }] })]);
    expect(fine.code).toBe(0);
    expect(fine.lines).toContain(`  input topics exist on ${BROKERS}: ${present}`);
  }, 60_000);

  test("brokers that do not answer leave the topics unchecked, with a note and exit 0", async () => {
    const file = pipelineFile({ name: uniqueName("validate-nobroker"), transforms: [{ inputs: ["in"], output: "out", steps: [{ op: "select", columns: ["a"] }] }] });
    const result = await runCli(["validate", file], { env: { STREAM_BROKERS: "127.0.0.1:1" } });
    expect(result.code).toBe(0);
    // librdkafka does not say why a connection failed, the pure-JS client does.
    expect(result.lines.filter((l) => /^ {2}input topics not checked: no broker answered at 127\.0\.0\.1:1 \((connection refused|no connection)\)\. --offline skips this check\.$/.test(l))).toHaveLength(1);
  }, 60_000);

  test("--offline goes with validate only", async () => {
    const result = await runCli(["run", "x.toml", "--offline"]);
    expect(result.code).toBe(2);
    expect(result.output).toContain("--offline goes with validate");
  });
});
