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

describe("sink datasets in a pipeline file", () => {
  const withDataset = (lines: string) => `name = "s"\n[datasets.out]\n${lines}\n[[transforms]]\ninputs = ["events"]\noutput = "out"\n[[transforms.steps]]\nop = "select"\ncolumns = ["id"]\n`;
  const refusal = (lines: string) => {
    try {
      parsePipelineFile(withDataset(lines), "s.toml");
    } catch (error) {
      return (error as Error).message;
    }
    throw new Error("accepted");
  };

  test("postgres and http sinks resolve to their fields, with the defaults", async () => {
    const host = (lines: string) => new TomlHost(parsePipelineFile(withDataset(lines), "s.toml"), { brokers: "b:9092", writeRecord: () => {} });
    expect(await host('sink = "postgres"\nurl = "postgres://u@db:5432/app"\ntable = "app.totals"\nkey = "id"').resolveTopic("out")).toEqual({
      apiName: "out", topic: "out", brokers: "b:9092", policy: { deadLetter: undefined }, source: "kafka", sink: "postgres",
      sinkConfig: { kind: "postgres", url: "postgres://u@db:5432/app", table: "app.totals", key: ["id"] },
    });
    expect((await host('sink = "http"\nurl = "http://hooks:8080/in"\nheaders = { authorization = "Bearer ${TOKEN}" }').resolveTopic("out")).sinkConfig).toEqual({
      kind: "http", url: "http://hooks:8080/in", method: "POST", headers: { authorization: "Bearer ${TOKEN}" }, batch: 100, timeoutMs: 10_000, id: "id", window: 65_536,
    });
  });

  test("a wrong or missing sink field is named", () => {
    expect(refusal('sink = "mysql"')).toContain('sink must be "kafka", "postgres" or "http"');
    expect(refusal('sink = "postgres"\nurl = "postgres://x/y"\nkey = ["id"]')).toContain('field "datasets.out.table"');
    expect(refusal('sink = "postgres"\nurl = "mysql://x/y"\ntable = "t"\nkey = ["id"]')).toContain("must be a postgres:// URL");
    expect(refusal('sink = "postgres"\nurl = "postgres://x/y"\ntable = "t"\nkey = []')).toContain("name at least one key column");
    expect(refusal('sink = "http"\nurl = "http://x"\nbatch = 0')).toContain('field "datasets.out.batch"');
    expect(refusal('sink = "http"\nurl = "http://x"\nbatchSize = 10')).toContain("batchSize");
    expect(refusal('sink = "http"\nurl = "http://x"\nwindow = 0.5')).toContain('field "datasets.out.window": must be a whole number');
  });
});
