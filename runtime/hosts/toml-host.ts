/**
 * The ControlPlane answered from a TOML pipeline file, in the original Rust runner's format:
 *
 *   name = "demo"
 *   [brokers]
 *   default = "127.0.0.1:9092"
 *   [datasets.events]
 *   topic = "events"
 *   [datasets.events.policy]
 *   deadLetter = "events-dlq"
 *   [datasets.trades]          # a sink instead of a topic (docs/sinks.md)
 *   sink = "postgres"
 *   url = "postgres://postgres@127.0.0.1:5432/postgres"
 *   table = "trades"
 *   key = ["id"]
 *   [[transforms]]
 *   inputs = ["events"]
 *   output = "out"
 *   [[transforms.steps]]
 *   op = "filter"
 *   expression = "price > 100"
 */
import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { parse as parseToml } from "smol-toml";
import * as v from "valibot";
import { describeIssues } from "../../src/control/schema-issues.ts";
import { sinkConfigOf, sinkFieldsSchema } from "../../src/sinks/config.ts";
import { type BuildRecord, BuildSignal, type ControlPlane, FvError, type TopicBinding, type Topology } from "../../src/index.ts";

const name = v.pipe(
  v.string(),
  v.regex(/^[A-Za-z0-9._-]+$/, "name may hold letters, digits, '.', '_' and '-' (it becomes the group fv-stream-<name>)"),
);

// Strict at the top, so a misspelt table (`[[transform]]`, `[dataset.x]`) is named, not ignored.
const pipelineFileSchema = v.strictObject({
  name,
  brokers: v.optional(v.object({ default: v.optional(v.pipe(v.string(), v.regex(/^[^\s,:]+:\d+(,[^\s,:]+:\d+)*$/, "use host:port[,host:port]"))) })),
  datasets: v.optional(
    v.record(
      v.string(),
      sinkFieldsSchema,
    ),
  ),
  transforms: v.pipe(v.array(v.unknown(), "transforms is a list of [[transforms]] tables"), v.minLength(1, "add at least one [[transforms]] stage")),
});

export type PipelineFile = v.InferOutput<typeof pipelineFileSchema>;

/**
 * Parses and checks a pipeline file's text. `path` names it in messages, and Rego filters'
 * `policy` paths are read relative to its folder (the step then carries the policy's text).
 */
export function parsePipelineFile(text: string, path: string): PipelineFile {
  let raw: unknown;
  try {
    raw = parseToml(text);
  } catch (error) {
    throw new FvError("INVALID_SETTINGS", `${path}: not valid TOML: ${(error as Error).message}`, { cause: error });
  }
  const result = v.safeParse(pipelineFileSchema, raw);
  if (!result.success) {
    const described = describeIssues(pipelineFileSchema, result.issues);
    const field = described.field || "(file)";
    throw new FvError("INVALID_SETTINGS", `${path}: field "${field}": ${described.message}`, { context: { field } });
  }
  result.output.transforms.forEach((stage, s) => {
    const steps = (stage as { steps?: unknown }).steps;
    if (!Array.isArray(steps)) return;
    steps.forEach((step: Record<string, unknown>, i) => {
      if (step?.op !== "filter" || step.language !== "rego" || typeof step.policy !== "string" || /^\s*package\s/m.test(step.policy)) return;
      const file = resolve(dirname(path), step.policy);
      try {
        step.policy = readFileSync(file, "utf8");
      } catch (error) {
        throw new FvError("INVALID_SETTINGS", `${path}: stage ${s + 1}, step ${i + 1} (op "filter"), field "policy": cannot read the Rego policy file ${file}: ${(error as Error).message}. Give the path of a .rego file next to the pipeline file, or the policy's text`, { cause: error, context: { field: "policy" } });
      }
    });
  });
  return result.output;
}

export interface TomlHostOptions {
  /** Brokers every binding points at (STREAM_BROKERS, else the file's default). */
  brokers: string;
  /** Where build records go, one JSON line each. */
  writeRecord: (line: string) => void;
}

/** The ControlPlane of one pipeline file. `requestStop()` makes the next heartbeat say Stop. */
export class TomlHost implements ControlPlane {
  readonly file: PipelineFile;
  readonly #options: TomlHostOptions;
  #stop = false;

  constructor(file: PipelineFile, options: TomlHostOptions) {
    this.file = file;
    this.#options = options;
  }

  requestStop(): void {
    this.#stop = true;
  }

  topology(_pipeline: string): Promise<Topology> {
    return Promise.resolve({ stages: this.file.transforms as Topology["stages"] });
  }

  resolveTopic(dataset: string): Promise<TopicBinding> {
    const entry = this.file.datasets?.[dataset];
    return Promise.resolve({
      apiName: dataset,
      topic: entry?.topic ?? dataset,
      brokers: this.#options.brokers,
      policy: { deadLetter: entry?.policy?.deadLetter },
      source: "kafka",
      sink: entry?.sink ?? "kafka",
      ...(entry && sinkConfigOf(entry) ? { sinkConfig: sinkConfigOf(entry) } : {}),
    });
  }

  heartbeat(_buildId: string): Promise<BuildSignal> {
    return Promise.resolve(this.#stop ? BuildSignal.Stop : BuildSignal.Continue);
  }

  putRecord(_buildId: string, record: BuildRecord): Promise<void> {
    this.#options.writeRecord(JSON.stringify(record));
    return Promise.resolve();
  }
}
