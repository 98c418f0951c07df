/**
 * `transform.toml`: the manifest of one transform folder, checked with valibot.
 *
 * The original engine's fields: `id`, `version`, `impl`, `entry`, `protocol`, `[[inputs]]
 * columns` and `[output] columns`. Ours, all optional: `function`, `batchSize`, `timeoutMs`,
 * `memoryMaxPages`, `[config]`, `allowedHosts`, `allowedPaths`, `wasi`, `isolation` (WASM);
 * `command`, `image`, `engine`, `env` (containers); `steps` (expression transforms).
 * functions/README.md documents each one.
 */
import * as v from "valibot";
import { describeIssues } from "../control/schema-issues.ts";
import type { StepDef } from "../control/types.ts";
import { type ColumnDef, columnTypes } from "./columns.ts";

/** Defaults of the optional fields, with why. */
export const manifestDefaults = {
  function: "transform",
  /** Enough rows per call to amortize the per-call cost, few enough to keep a poison bisection short. */
  batchSize: 64,
  /** A batch of 64 small rows takes well under a millisecond; 5 s only catches runaways. */
  timeoutMs: 5000,
} as const;

const columnSchema = v.strictObject({
  name: v.pipe(v.string("a column name is a string"), v.minLength(1, "a column name cannot be empty")),
  type: v.picklist(columnTypes, `type is one of ${columnTypes.join(", ")}`),
});

const columnsSchema = v.pipe(
  v.array(columnSchema, 'columns is a list of { name = "...", type = "..." }'),
  v.check((cols) => new Set(cols.map((c) => c.name)).size === cols.length, "a column is declared twice"),
);

const commandSchema = v.union(
  [
    v.pipe(v.string(), v.minLength(1, "the command cannot be empty")),
    v.pipe(v.array(v.pipe(v.string(), v.minLength(1))), v.minLength(1, "the command cannot be empty")),
  ],
  'give the command as a string ("python3 -u main.py") or a list (["python3", "-u", "main.py"])',
);

const positiveInt = (max: number, what: string) =>
  v.pipe(v.number(`${what} is a number`), v.integer(`${what} is a whole number`), v.minValue(1, `${what} is at least 1`), v.maxValue(max, `${what} is at most ${max}`));

export const manifestSchema = v.strictObject({
  id: v.pipe(v.string("id is a string"), v.regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/, "id may hold letters, digits, '.', '_' and '-'")),
  version: v.pipe(v.string('version is a string, e.g. version = "1.0.0"'), v.regex(/^[0-9A-Za-z][0-9A-Za-z.+-]*$/, 'version looks like "1.0.0"')),
  impl: v.picklist(["wasm", "container", "expression"], 'impl is "wasm", "container" or "expression"'),
  entry: v.optional(commandSchema),
  protocol: v.optional(v.literal("json", 'protocol is "json" (the only one)'), "json"),
  description: v.optional(v.string()),
  inputs: v.optional(v.array(v.strictObject({ name: v.optional(v.string()), columns: columnsSchema }), "inputs is a list of [[inputs]] tables")),
  output: v.optional(v.strictObject({ name: v.optional(v.string()), columns: columnsSchema })),
  function: v.optional(v.pipe(v.string(), v.minLength(1, "function names the exported function"))),
  batchSize: v.optional(positiveInt(100_000, "batchSize")),
  timeoutMs: v.optional(positiveInt(3_600_000, "timeoutMs")),
  memoryMaxPages: v.optional(positiveInt(65_536, "memoryMaxPages (64 KiB pages)")),
  config: v.optional(v.record(v.string(), v.union([v.string(), v.number(), v.boolean()], "a config value is a string, number or boolean"))),
  allowedHosts: v.optional(v.array(v.pipe(v.string(), v.minLength(1)), "allowedHosts is a list of host names")),
  allowedPaths: v.optional(v.record(v.string(), v.string(), 'allowedPaths maps the path the transform sees to a host folder: { "/data" = "./data" }')),
  wasi: v.optional(v.boolean("wasi is true or false")),
  isolation: v.optional(v.picklist(["worker", "process"], 'isolation is "worker" or "process"')),
  command: v.optional(commandSchema),
  image: v.optional(v.pipe(v.string(), v.minLength(1))),
  engine: v.optional(v.picklist(["docker", "podman"], 'engine is "docker" or "podman"')),
  env: v.optional(v.record(v.string(), v.string("an env value is a string"))),
  steps: v.optional(v.array(v.looseObject({ op: v.string('every step needs op = "..."') }), "steps is a list of { op = ... } tables")),
});

export type ManifestFile = v.InferOutput<typeof manifestSchema>;

/** A checked transform, with paths made absolute and defaults filled in. */
export interface TransformManifest {
  readonly id: string;
  readonly version: string;
  readonly impl: "wasm" | "container" | "expression";
  readonly protocol: "json";
  readonly description?: string;
  /** The folder holding transform.toml. */
  readonly dir: string;
  /** The manifest file. */
  readonly file: string;
  /** The root (an FV_TRANSFORMS_DIR entry) it came from. */
  readonly root: string;
  /** WASM: the module's path. */
  readonly wasmPath?: string;
  /** Container: the local command, run in `dir`. */
  readonly command?: readonly string[];
  /** Container: the image, run with docker or podman. */
  readonly image?: string;
  readonly engine?: "docker" | "podman";
  readonly env: Readonly<Record<string, string>>;
  readonly inputs: ReadonlyArray<{ name?: string; columns: readonly ColumnDef[] }>;
  readonly outputColumns?: readonly ColumnDef[];
  readonly function: string;
  readonly batchSize: number;
  readonly timeoutMs: number;
  readonly memoryMaxPages?: number;
  readonly config: Readonly<Record<string, string>>;
  readonly allowedHosts: readonly string[];
  /** Path the transform sees → absolute host folder. */
  readonly allowedPaths: Readonly<Record<string, string>>;
  readonly wasi: boolean;
  readonly isolation?: "worker" | "process";
  readonly steps?: readonly StepDef[];
}

/** `a/b` + `c` → `a/b/c`; an absolute `c` stays as it is. */
export function joinPath(dir: string, path: string): string {
  if (path.startsWith("/")) return path;
  const rel = path.startsWith("./") ? path.slice(2) : path;
  return dir.endsWith("/") ? dir + rel : `${dir}/${rel}`;
}

function splitCommand(command: string | string[]): string[] {
  return typeof command === "string" ? command.trim().split(/\s+/) : [...command];
}

/**
 * Checks the per-impl rules the schema cannot express; returns the problem, or null.
 */
function implProblem(m: ManifestFile): { field: string; message: string } | null {
  const containerOnly = (["command", "image", "engine", "env"] as const).find((k) => m[k] !== undefined);
  const wasmOnly = (["memoryMaxPages", "wasi", "isolation", "function"] as const).find((k) => m[k] !== undefined);
  switch (m.impl) {
    case "wasm":
      if (typeof m.entry !== "string") return { field: "entry", message: 'a wasm transform needs entry = "<file>.wasm"' };
      if (containerOnly) return { field: containerOnly, message: `${containerOnly} is for impl = "container"` };
      if (m.steps) return { field: "steps", message: 'steps is for impl = "expression"' };
      return null;
    case "container":
      if (m.entry !== undefined && m.command !== undefined) return { field: "command", message: "give the command once: entry or command, not both" };
      if (m.entry === undefined && m.command === undefined && m.image === undefined)
        return { field: "entry", message: 'a container transform needs a local command (entry = "python3 -u main.py") or an image (image = "...")' };
      if (m.engine !== undefined && m.image === undefined) return { field: "engine", message: "engine only applies with image" };
      if (wasmOnly) return { field: wasmOnly, message: `${wasmOnly} is for impl = "wasm"` };
      if (m.steps) return { field: "steps", message: 'steps is for impl = "expression"' };
      return null;
    case "expression":
      if (!m.steps || m.steps.length === 0) return { field: "steps", message: 'an expression transform needs steps = [{ op = "applyExpression", ... }]' };
      if (m.entry !== undefined || containerOnly || wasmOnly) return { field: m.entry !== undefined ? "entry" : (containerOnly ?? wasmOnly)!, message: "an expression transform only takes steps" };
      return null;
  }
}

/**
 * Checks a parsed transform.toml. Returns the manifest or the first problem with its field.
 */
export function checkManifest(raw: unknown, where: { dir: string; file: string; root: string }):
  | { ok: true; manifest: TransformManifest }
  | { ok: false; field: string; message: string } {
  const parsed = v.safeParse(manifestSchema, raw);
  if (!parsed.success) {
    return { ok: false, ...describeIssues(manifestSchema, parsed.issues) };
  }
  const m = parsed.output;
  const problem = implProblem(m);
  if (problem) return { ok: false, ...problem };
  const command = m.command ?? (m.impl === "container" && m.entry !== undefined ? m.entry : undefined);
  const config: Record<string, string> = {};
  for (const [key, value] of Object.entries(m.config ?? {})) config[key] = String(value);
  const allowedPaths: Record<string, string> = {};
  for (const [guest, host] of Object.entries(m.allowedPaths ?? {})) allowedPaths[guest] = joinPath(where.dir, host);
  const manifest: TransformManifest = {
    id: m.id,
    version: m.version,
    impl: m.impl,
    protocol: "json",
    description: m.description,
    dir: where.dir,
    file: where.file,
    root: where.root,
    wasmPath: m.impl === "wasm" ? joinPath(where.dir, m.entry as string) : undefined,
    command: command === undefined ? undefined : splitCommand(command),
    image: m.image,
    engine: m.engine,
    env: m.env ?? {},
    inputs: m.inputs ?? [],
    outputColumns: m.output?.columns,
    function: m.function ?? manifestDefaults.function,
    batchSize: m.batchSize ?? manifestDefaults.batchSize,
    timeoutMs: m.timeoutMs ?? manifestDefaults.timeoutMs,
    memoryMaxPages: m.memoryMaxPages,
    config,
    allowedHosts: m.allowedHosts ?? [],
    allowedPaths,
    wasi: m.wasi ?? false,
    isolation: m.isolation,
    steps: m.steps as StepDef[] | undefined,
  };
  return { ok: true, manifest };
}
