import { describe, expect, test } from "bun:test";
import { FvError } from "../../../src/index.ts";
import { parsePipelineFile, TomlHost } from "../../../runtime/hosts/toml-host.ts";

const FILE = `
name = "demo"
[brokers]
default = "127.0.0.1:9092"
[datasets.events]
topic = "events-v2"
[datasets.events.policy]
deadLetter = "events-dlq"
[[transforms]]
inputs = ["events"]
output = "out"
[[transforms.steps]]
op = "filter"
expression = "price > 100"
`;

describe("the TOML host", () => {
  test("answers topology and topics from the original runner's file format", async () => {
    const lines: string[] = [];
    const host = new TomlHost(parsePipelineFile(FILE, "demo.toml"), { brokers: "b:9092", writeRecord: (l) => lines.push(l) });
    expect(await host.topology("demo")).toEqual({
      stages: [{ inputs: ["events"], output: "out", steps: [{ op: "filter", expression: "price > 100" }] }],
    });
    expect(await host.resolveTopic("events")).toEqual({
      apiName: "events", topic: "events-v2", brokers: "b:9092", policy: { deadLetter: "events-dlq" }, source: "kafka", sink: "kafka",
    });
    // A dataset not listed maps to a topic of the same name.
    expect((await host.resolveTopic("out")).topic).toBe("out");
    expect(await host.heartbeat("b1")).toBe("Continue");
    host.requestStop();
    expect(await host.heartbeat("b1")).toBe("Stop");
    await host.putRecord("b1", { id: "b1", pipeline: "demo", kind: "stream", status: "RUNNING" });
    expect(JSON.parse(lines[0]!)).toEqual({ id: "b1", pipeline: "demo", kind: "stream", status: "RUNNING" });
  });

  test("a file that is not TOML is refused with its path", () => {
    expect(() => parsePipelineFile("name = ", "bad.toml")).toThrow(/bad.toml: not valid TOML/);
  });

  test("a missing name is refused naming the field", () => {
    try {
      parsePipelineFile(`[[transforms]]\ninputs=["a"]\noutput="b"\nsteps=[]`, "x.toml");
      throw new Error("expected an error");
    } catch (error) {
      expect(error).toBeInstanceOf(FvError);
      expect((error as Error).message).toContain('x.toml: field "name"');
    }
  });

  test("a misspelt top-level key is named with the key it was meant to be, and an unknown one is refused", () => {
    const stageText = `[[transforms]]\ninputs=["a"]\noutput="b"\nsteps=[]`;
    expect(() => parsePipelineFile(`name = "p"\n[[transform]]\ninputs=["a"]\noutput="b"\nsteps=[]`, "x.toml")).toThrow(
      'x.toml: field "transforms": missing field "transforms"; unknown field "transform" (did you mean "transforms"?)',
    );
    expect(() => parsePipelineFile(`name = "p"\n[dataset.a]\ntopic = "t"\n${stageText}`, "x.toml")).toThrow(
      'x.toml: field "dataset": unknown field "dataset" (did you mean "datasets"?)',
    );
    expect(() => parsePipelineFile(`name = "p"\nowner = "me"\n${stageText}`, "x.toml")).toThrow(
      'x.toml: field "owner": unknown field "owner"; known fields: "name", "brokers", "datasets", "transforms"',
    );
  });
});
