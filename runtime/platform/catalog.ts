/**
 * Where the reference platform finds pipelines and datasets: a folder of pipeline TOML files
 * (the runner's format, parsed with the TOML host's parser) and/or a JSON store. The folder is
 * read on every request, so an edited file is served at once.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import * as v from "valibot";
import { FvError, type TopicBinding, type Topology } from "../../src/index.ts";
import { parsePipelineFile, type PipelineFile } from "../hosts/toml-host.ts";
import { type SinkConfig, sinkConfigOf, sinkFieldsSchema } from "../../src/sinks/config.ts";

/** Pipelines and datasets, as the platform answers them. */
export interface Catalog {
  /** Undefined when there is no such pipeline; throws FvError when its definition is broken. */
  topology(pipeline: string): Topology | undefined;
  /** The binding of a dataset this catalog defines; undefined for one it does not. */
  binding(dataset: string): TopicBinding | undefined;
  pipelines(): string[];
}

const brokersSchema = v.optional(v.pipe(v.string(), v.regex(/^[^\s,:]+:\d+(,[^\s,:]+:\d+)*$/, "use host:port[,host:port]")));
/** A dataset: a topic (and its brokers), or a sink with its fields (checked by `bindingOf`; docs/sinks.md). */
const datasetSchema = v.looseObject({
  topic: v.optional(v.pipe(v.string(), v.minLength(1))),
  brokers: brokersSchema,
  policy: v.optional(v.object({ deadLetter: v.optional(v.pipe(v.string(), v.minLength(1))) })),
  sink: v.optional(v.string()),
});

const storeSchema = v.object({
  pipelines: v.optional(v.record(v.string(), v.looseObject({ stages: v.array(v.unknown()) })), {}),
  datasets: v.optional(v.record(v.string(), datasetSchema), {}),
});

/** The JSON store: `{ "pipelines": { id: Topology }, "datasets": { name: { topic?, brokers?, policy? } } }`. */
export type PlatformStore = v.InferOutput<typeof storeSchema>;

/** Checks a JSON store's content; `path` is only for messages. */
export function parsePlatformStore(raw: unknown, path: string): PlatformStore {
  const result = v.safeParse(storeSchema, raw);
  if (!result.success) {
    const issue = result.issues[0]!;
    throw new FvError("INVALID_SETTINGS", `${path}: field "${v.getDotPath(issue) ?? "(file)"}": ${issue.message}`);
  }
  return result.output;
}

type Dataset = v.InferOutput<typeof datasetSchema>;

/** A dataset no catalog defines maps to a topic of its own name on the platform's brokers. */
export const bindingOf = (name: string, entry: Dataset | undefined, brokers: string): TopicBinding => {
  let sinkConfig: SinkConfig | undefined;
  if (entry?.sink !== undefined && entry.sink !== "kafka") {
    const { brokers: _brokers, ...fields } = entry;
    const checked = v.safeParse(sinkFieldsSchema, fields);
    if (!checked.success) throw new FvError("INVALID_SETTINGS", `dataset "${name}": field "${v.getDotPath(checked.issues[0]) ?? "sink"}": ${checked.issues[0].message}`);
    sinkConfig = sinkConfigOf(checked.output);
  }
  return {
    apiName: name,
    topic: entry?.topic ?? name,
    brokers: entry?.brokers ?? brokers,
    policy: entry?.policy?.deadLetter ? { deadLetter: entry.policy.deadLetter } : {},
    source: "kafka",
    sink: sinkConfig?.kind ?? "kafka",
    ...(sinkConfig ? { sinkConfig } : {}),
  };
};

/** A binding as the platform answers it: a sink's fields beside the binding's, as in a pipeline file's dataset. */
export function wireBinding({ sinkConfig, ...binding }: TopicBinding): Record<string, unknown> {
  if (!sinkConfig) return binding;
  const { kind: _kind, ...fields } = sinkConfig;
  return { ...binding, ...fields };
}

export function storeCatalog(store: PlatformStore, brokers: string): Catalog {
  return {
    topology: (pipeline) => (Object.hasOwn(store.pipelines, pipeline) ? (store.pipelines[pipeline] as Topology) : undefined),
    binding: (dataset) => (Object.hasOwn(store.datasets, dataset) ? bindingOf(dataset, store.datasets[dataset], brokers) : undefined),
    pipelines: () => Object.keys(store.pipelines),
  };
}

/**
 * Pipeline files in `dir` (`*.toml`), by their `name`. A dataset takes its topic and policy
 * from the first file (by file name) that lists it, and that file's `[brokers] default`
 * (else the platform's brokers).
 */
export function tomlFolderCatalog(dir: string, brokers: string): Catalog {
  const read = (): Array<{ path: string; file?: PipelineFile; error?: FvError }> =>
    readdirSync(dir)
      .filter((f) => f.endsWith(".toml"))
      .sort()
      .map((f) => {
        const path = join(dir, f);
        try {
          return { path, file: parsePipelineFile(readFileSync(path, "utf8"), path) };
        } catch (error) {
          return { path, error: error as FvError };
        }
      });
  return {
    topology(pipeline) {
      const files = read();
      const found = files.find((f) => f.file?.name === pipeline);
      if (found) return { stages: found.file!.transforms as Topology["stages"] };
      // A broken file named after the pipeline is that pipeline: say what is wrong with it.
      const broken = files.find((f) => f.error && f.path.endsWith(`/${pipeline}.toml`));
      if (broken) throw broken.error;
      return undefined;
    },
    binding(dataset) {
      for (const { file } of read()) {
        if (file?.datasets && Object.hasOwn(file.datasets, dataset)) {
          return bindingOf(dataset, { ...file.datasets[dataset], brokers: file.brokers?.default }, brokers);
        }
      }
      return undefined;
    },
    pipelines: () => read().flatMap((f) => (f.file ? [f.file.name] : [])),
  };
}

/** Asks each catalog in turn (the JSON store before the folder); the first that knows, answers. */
export function combinedCatalog(catalogs: Catalog[]): Catalog {
  const first = <T>(ask: (c: Catalog) => T | undefined): T | undefined => {
    for (const c of catalogs) {
      const answer = ask(c);
      if (answer !== undefined) return answer;
    }
    return undefined;
  };
  return {
    topology: (pipeline) => first((c) => c.topology(pipeline)),
    binding: (dataset) => first((c) => c.binding(dataset)),
    pipelines: () => [...new Set(catalogs.flatMap((c) => c.pipelines()))],
  };
}
