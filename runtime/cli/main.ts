#!/usr/bin/env bun
/**
 * fv-streams CLI:
 *   fv-streams run FILE [--record-file PATH]   run the pipeline until SIGINT/SIGTERM
 *   fv-streams validate FILE                   check the file and its topology, consume nothing
 * Runs on Bun (`bun runtime/cli/main.ts`) and Deno (`deno run -A runtime/cli/main.ts`).
 */
import { appendFileSync, readFileSync } from "node:fs";
import process from "node:process";
import { compileTopology, type Logger, parseSettings, planStream, runStream, settingsTable } from "../../src/index.ts";
import { parsePipelineFile, TomlHost } from "../hosts/toml-host.ts";

const USAGE = `usage:
  fv-streams run FILE [--record-file PATH]   run a pipeline file until SIGINT or SIGTERM
  fv-streams validate FILE                   check a pipeline file without consuming anything

settings (environment):
${settingsTable.map(([name, meaning, fallback]) => `  ${name.padEnd(30)} ${meaning} (default: ${fallback})`).join("\n")}`;

/** Human-readable logs on stderr; build records are the only JSON lines there. */
const log: Logger = (level, message, context) => {
  const ctx = context && Object.keys(context).length ? " " + Object.entries(context).map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`).join(" ") : "";
  process.stderr.write(`fv-streams ${level.padEnd(5)} ${message}${ctx}\n`);
};

function readPipeline(path: string) {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (error) {
    throw new Error(`cannot read pipeline file ${path}: ${(error as Error).message}`);
  }
  return parsePipelineFile(text, path);
}

async function main(argv: string[]): Promise<number> {
  const [command, file, ...rest] = argv;
  if (!command || command === "--help" || command === "-h" || !file) {
    process.stderr.write(USAGE + "\n");
    return command === "--help" || command === "-h" ? 0 : 2;
  }
  const recordFileAt = rest.indexOf("--record-file");
  const recordFile = recordFileAt >= 0 ? rest[recordFileAt + 1] : undefined;
  if (recordFileAt >= 0 && !recordFile) {
    process.stderr.write("--record-file needs a path\n");
    return 2;
  }

  const pipelineFile = readPipeline(file);
  const settings = parseSettings(process.env, pipelineFile.brokers?.default);
  const host = new TomlHost(pipelineFile, {
    brokers: settings.brokers,
    writeRecord: recordFile ? (line) => appendFileSync(recordFile, line + "\n") : (line) => process.stderr.write(line + "\n"),
  });

  if (command === "validate") {
    const plan = await planStream(host, pipelineFile.name);
    const stages = compileTopology(plan.topology).stages;
    process.stdout.write(`${file}: pipeline "${pipelineFile.name}" is valid: ${stages.length} stage(s)\n`);
    for (const stage of stages) {
      const topics = (ds: string[]) => ds.map((d) => `${d} (topic ${plan.bindings[d]!.topic})`).join(", ");
      process.stdout.write(`  stage ${stage.index + 1}: ${topics(stage.def.inputs)} → ${topics([stage.def.output])}: ${stage.steps.map((s) => s.op).join(" → ") || "pass-through"}\n`);
    }
    return 0;
  }
  if (command !== "run") {
    process.stderr.write(`unknown command "${command}"\n${USAGE}\n`);
    return 2;
  }

  // Either signal starts the ordered shutdown: finish the batch, flush, commit, exit 0.
  const abort = new AbortController();
  const onSignal = (name: string) => () => {
    log("info", `${name} received: stopping in order`);
    host.requestStop();
    abort.abort();
  };
  process.on("SIGINT", onSignal("SIGINT"));
  process.on("SIGTERM", onSignal("SIGTERM"));

  const buildId = process.env.FV_BUILD_ID ?? `${pipelineFile.name}-${Date.now()}`;
  const final = await runStream(
    host,
    pipelineFile.name,
    buildId,
    { id: buildId, pipeline: pipelineFile.name, kind: "stream", status: "STARTING" },
    { settings, log, signal: abort.signal },
  );
  if (final.status === "FAILED") {
    process.stderr.write(`fv-streams: pipeline "${pipelineFile.name}" failed: ${final.error}\n`);
    return 1;
  }
  return 0;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error) => {
    process.stderr.write(`fv-streams: ${(error as Error)?.message ?? String(error)}\n`);
    process.exit(1);
  },
);
