/**
 * Pipeline files for the integration tests, written from data: `pipelineFile` for any pipeline
 * (datasets with a dead-letter topic, several transforms), `transformFile` for one transform from
 * topics to a topic, and `windowedCountPipeline` for the count and sum of qty per group and minute
 * that several suites run.
 */
import { writePipeline } from "./cli.ts";

export const MINUTE = 60_000;

export type TomlValue = string | number | boolean | TomlValue[] | { [key: string]: TomlValue };
/** One step: its op, then its settings in the order they are written. */
export type Step = { op: string } & { [setting: string]: TomlValue };
export interface Transform {
  inputs: string[];
  output: string;
  steps: Step[];
}
/** A named dataset: its topic, and the dead-letter topic of its policy; or a sink (postgres, http) and its fields. */
export type Dataset =
  | { topic: string; deadLetter?: string }
  | ({ sink: "postgres" | "http"; deadLetter?: string } & { [field: string]: TomlValue });
export interface Pipeline {
  name: string;
  datasets?: Record<string, Dataset>;
  transforms: Transform[];
}

const key = (k: string) => (/^[A-Za-z0-9_-]+$/.test(k) ? k : JSON.stringify(k));

function toml(value: TomlValue): string {
  if (typeof value === "string") return JSON.stringify(value);
  if (typeof value === "number" || typeof value === "boolean") return String(value);
  if (Array.isArray(value)) return `[${value.map(toml).join(", ")}]`;
  return `{ ${Object.entries(value).map(([k, v]) => `${key(k)} = ${toml(v)}`).join(", ")} }`;
}

/** The pipeline's TOML text. */
export function pipelineToml({ name, datasets = {}, transforms }: Pipeline): string {
  const lines = [`name = ${toml(name)}`];
  for (const [id, { deadLetter, ...fields }] of Object.entries(datasets)) {
    lines.push(`[datasets.${key(id)}]`, ...Object.entries(fields).map(([k, v]) => `${key(k)} = ${toml(v as TomlValue)}`));
    if (deadLetter !== undefined) lines.push(`[datasets.${key(id)}.policy]`, `deadLetter = ${toml(deadLetter)}`);
  }
  for (const { inputs, output, steps } of transforms) {
    lines.push("", "[[transforms]]", `inputs = ${toml(inputs)}`, `output = ${toml(output)}`);
    for (const { op, ...settings } of steps) {
      lines.push("[[transforms.steps]]", `op = ${toml(op)}`, ...Object.entries(settings).map(([k, v]) => `${key(k)} = ${toml(v)}`));
    }
  }
  return `${lines.join("\n")}\n`;
}

/** Writes the pipeline to a fresh temp folder and returns the file's path. */
export const pipelineFile = (pipeline: Pipeline): string => writePipeline(pipelineToml(pipeline));

/** A pipeline file of one transform: the topics `inputs` through `steps` to the topic `output`. */
export function transformFile(name: string, inputs: string | string[], output: string, ...steps: Step[]): string {
  return pipelineFile({ name, transforms: [{ inputs: typeof inputs === "string" ? [inputs] : inputs, output, steps }] });
}

/**
 * A tumbling 1-minute windowedAggregate over `ts`, grouped by `groupBy`: the row count as `n` and
 * the sum of `qty` as `qty`. `allowedLatenessMs` and `repartition` are written only when given.
 */
export function windowedCount(groupBy: string, options: { allowedLatenessMs?: number; repartition?: boolean } = {}): Step {
  return {
    op: "windowedAggregate",
    timeColumn: "ts",
    windowMs: MINUTE,
    ...(options.allowedLatenessMs === undefined ? {} : { allowedLatenessMs: options.allowedLatenessMs }),
    groupBy: [groupBy],
    aggs: [{ op: "count", alias: "n" }, { op: "sum", column: "qty", alias: "qty" }],
    ...(options.repartition === undefined ? {} : { repartition: options.repartition }),
  };
}

/** A pipeline file that runs `windowedCount` from the topic `input` to the topic `output`. */
export function windowedCountPipeline(name: string, input: string, output: string, groupBy: string, options: Parameters<typeof windowedCount>[1] = {}): string {
  return transformFile(name, input, output, windowedCount(groupBy, options));
}
