/**
 * Where a dataset's rows go when it is not a Kafka topic: the fields of `sink = "postgres"` and
 * `sink = "http"`, checked once here for every host (the pipeline file's `[datasets.x]`, a
 * platform's binding answer). docs/sinks.md has every field.
 */
import * as v from "valibot";

export type SinkKind = "kafka" | "postgres" | "http";

/** `sink = "postgres"`: upserts on `key` into `table`, one SQL transaction per checkpoint. */
export interface PostgresSinkConfig {
  kind: "postgres";
  /** postgres://user[:password]@host[:port]/database; `${VAR}` is read from the environment at start. */
  url: string;
  /** The table, optionally schema-qualified (`public.trades`); created from the first rows when missing. */
  table: string;
  /** The columns of its primary key: a row replaces the row with the same key. */
  key: string[];
}

/** `sink = "http"`: rows POSTed (or PUT) as JSON arrays of up to `batch`, each id delivered once. */
export interface HttpSinkConfig {
  kind: "http";
  url: string;
  /**
   * The URL as logs, errors, dead letters and /readyz show it: as written in the pipeline file
   * (`${VAR}` not expanded, a password hidden); set by withEnvironment.
   */
  shownUrl?: string;
  method: "POST" | "PUT";
  /** `${VAR}` in a value is read from the environment at start. */
  headers: Record<string, string>;
  /** Rows per request. */
  batch: number;
  /** Most time one request may take. */
  timeoutMs: number;
  /** The column whose value identifies a row: the Deduplicator delivers each value once. */
  id: string;
  /** Ids remembered per input partition: more than a partition sends between two Kafka commits. */
  window: number;
}

export type SinkConfig = PostgresSinkConfig | HttpSinkConfig;

const nonEmpty = v.pipe(v.string(), v.minLength(1, "must not be empty"));
const identifier = v.pipe(v.string(), v.regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "must be a plain SQL name (letters, digits, _)"));
const policy = v.optional(v.object({ deadLetter: v.optional(nonEmpty) }));

/** A dataset's sink fields (less `topic` and `policy`, which every dataset has). */
export const sinkFieldsSchema = v.variant("sink", [
  v.object({ sink: v.optional(v.literal("kafka")), topic: v.optional(nonEmpty), policy }),
  v.strictObject({
    sink: v.literal("postgres"),
    url: v.pipe(v.string(), v.regex(/^postgres(ql)?:\/\/\S+$/, "must be a postgres:// URL, e.g. postgres://postgres@127.0.0.1:5432/postgres")),
    table: v.pipe(v.string(), v.regex(/^([A-Za-z_][A-Za-z0-9_]*\.)?[A-Za-z_][A-Za-z0-9_]*$/, "must be a table name, optionally schema.table (letters, digits, _)")),
    key: v.union([identifier, v.pipe(v.array(identifier), v.minLength(1, "name at least one key column"))], 'must be a column name or a list of them, e.g. ["id"]'),
    topic: v.optional(nonEmpty),
    policy,
  }),
  v.strictObject({
    sink: v.literal("http"),
    url: v.pipe(v.string(), v.regex(/^https?:\/\/\S+$/, "must be an http(s) URL")),
    method: v.optional(v.picklist(["POST", "PUT"], 'must be "POST" or "PUT"'), "POST"),
    headers: v.optional(v.record(v.string(), v.string()), {}),
    batch: v.optional(v.pipe(v.number(), v.integer("must be a whole number"), v.minValue(1), v.maxValue(10_000)), 100),
    timeoutMs: v.optional(v.pipe(v.number(), v.integer("must be a whole number"), v.minValue(1)), 10_000),
    id: v.optional(nonEmpty, "id"),
    window: v.optional(v.pipe(v.number(), v.integer("must be a whole number"), v.minValue(1), v.maxValue(10_000_000)), 65_536),
    topic: v.optional(nonEmpty),
    policy,
  }),
], 'sink must be "kafka", "postgres" or "http"');

export type SinkFields = v.InferOutput<typeof sinkFieldsSchema>;

/** The sink a checked dataset entry describes, or undefined for a Kafka topic. */
export function sinkConfigOf(fields: SinkFields): SinkConfig | undefined {
  if (fields.sink === "postgres") return { kind: "postgres", url: fields.url, table: fields.table, key: typeof fields.key === "string" ? [fields.key] : fields.key };
  if (fields.sink === "http") return { kind: "http", url: fields.url, method: fields.method, headers: fields.headers, batch: fields.batch, timeoutMs: fields.timeoutMs, id: fields.id, window: fields.window };
  return undefined;
}

/**
 * `${VAR}` in a sink's URL and headers, from the environment; a variable that is not set is an
 * error naming the dataset and the field, at start (never a request with an empty secret).
 */
export function withEnvironment<T extends SinkConfig>(config: T, dataset: string, env: Record<string, string | undefined>): T {
  const expand = (text: string, field: string) =>
    text.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g, (_, name: string) => {
      const value = env[name];
      if (value === undefined) throw new Error(`dataset "${dataset}" (sink "${config.kind}"), field "${field}": environment variable ${name} is not set; set it, or write the value in the field`);
      return value;
    });
  const url = expand(config.url, "url");
  if (config.kind === "postgres") return { ...config, url };
  const headers = Object.fromEntries(Object.entries((config as HttpSinkConfig).headers).map(([name, value]) => [name, expand(value, `headers.${name}`)]));
  return { ...config, url, headers, shownUrl: redactedUrl(config.url) };
}

/** The URL with its password hidden, for logs and errors. */
export function redactedUrl(url: string): string {
  return url.replace(/\/\/([^:@/]+):[^@/]*@/, "//$1:***@");
}
