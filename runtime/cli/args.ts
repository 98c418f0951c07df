/**
 * The command line of `fv-streams`, parsed into what to do. Nothing here touches the network
 * or the file system: a wrong command line is an error message and exit code 2.
 *
 *   fv-streams run FILE [--record-file PATH]
 *   fv-streams run --control-plane URL --pipeline ID [--build ID] [--record-file PATH]
 *   fv-streams validate FILE [--offline]
 *   fv-streams validate --control-plane URL --pipeline ID [--offline]
 */

/** Where the pipeline comes from: a TOML file, or a platform over HTTP. */
export type PipelineSource =
  | { kind: "file"; path: string }
  | { kind: "control-plane"; url: string; pipeline: string; build?: string };

export type Command =
  | { kind: "help" }
  | { kind: "run"; source: PipelineSource; recordFile?: string }
  | { kind: "validate"; source: PipelineSource; offline: boolean };

/** A command line that cannot run; the message says what to write instead. */
export class UsageError extends Error {
  override name = "UsageError";
}

const VALUE_FLAGS = ["--control-plane", "--pipeline", "--build", "--record-file"] as const;
type ValueFlag = (typeof VALUE_FLAGS)[number];

/**
 * @example
 * parseCommand(["run", "--control-plane", "http://127.0.0.1:8700", "--pipeline", "demo", "--build", "b1"]);
 * // { kind: "run", source: { kind: "control-plane", url: "http://127.0.0.1:8700", pipeline: "demo", build: "b1" } }
 */
export function parseCommand(argv: readonly string[]): Command {
  const [command, ...rest] = argv;
  if (command === undefined || command === "--help" || command === "-h" || command === "help") return { kind: "help" };
  if (command !== "run" && command !== "validate") throw new UsageError(`unknown command "${command}": use run or validate`);

  const flags = new Map<ValueFlag, string>();
  const positional: string[] = [];
  let offline = false;
  for (let i = 0; i < rest.length; i++) {
    const arg = rest[i]!;
    if (arg === "--help" || arg === "-h") return { kind: "help" };
    if (arg === "--offline") {
      if (command !== "validate") throw new UsageError("--offline goes with validate (it skips the check of the input topics on the brokers)");
      offline = true;
      continue;
    }
    const [flag, inline] = arg.startsWith("--") && arg.includes("=") ? [arg.slice(0, arg.indexOf("=")), arg.slice(arg.indexOf("=") + 1)] : [arg, undefined];
    if ((VALUE_FLAGS as readonly string[]).includes(flag)) {
      const value = inline ?? rest[++i];
      if (value === undefined || value === "" || (inline === undefined && value.startsWith("--"))) throw new UsageError(`${flag} needs a value`);
      if (flags.has(flag as ValueFlag)) throw new UsageError(`${flag} is given twice`);
      flags.set(flag as ValueFlag, value);
    } else if (arg.startsWith("-")) {
      throw new UsageError(`unknown option ${flag} for ${command}`);
    } else {
      positional.push(arg);
    }
  }

  const url = flags.get("--control-plane");
  let source: PipelineSource;
  if (url !== undefined) {
    if (positional.length > 0) throw new UsageError(`give either a pipeline FILE or --control-plane, not both (got ${positional.join(" ")})`);
    const pipeline = flags.get("--pipeline");
    if (!pipeline) throw new UsageError("--control-plane needs --pipeline ID: the pipeline the platform serves");
    source = { kind: "control-plane", url, pipeline, build: flags.get("--build") };
  } else {
    for (const flag of ["--pipeline", "--build"] as const) {
      if (flags.has(flag)) throw new UsageError(`${flag} goes with --control-plane URL; a pipeline FILE names its own pipeline`);
    }
    if (positional.length !== 1) {
      throw new UsageError(positional.length === 0 ? `${command} needs a pipeline FILE or --control-plane URL --pipeline ID` : `${command} takes one pipeline FILE, got ${positional.length}`);
    }
    source = { kind: "file", path: positional[0]! };
  }

  if (command === "validate") {
    if (flags.has("--record-file")) throw new UsageError("validate writes no build record: drop --record-file");
    if (source.kind === "control-plane" && source.build) throw new UsageError("validate starts no build: drop --build");
    return { kind: "validate", source, offline };
  }
  return { kind: "run", source, recordFile: flags.get("--record-file") };
}
