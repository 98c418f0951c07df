#!/usr/bin/env bun
/**
 * fv-streams CLI:
 *   fv-streams run FILE [--record-file PATH]          run a pipeline file until stopped
 *   fv-streams run --control-plane URL --pipeline ID [--build ID] [--record-file PATH]
 *                                                     run a pipeline a platform serves
 *   fv-streams validate FILE                          check the file and its topology, consume nothing
 *   fv-streams validate --control-plane URL --pipeline ID
 * Runs on Bun (`bun runtime/cli/main.ts`), Deno (`deno run -A runtime/cli/main.ts`) and as the
 * single binary (`npm run build:binary`).
 *
 * A run stops in order (finish the batch, flush, commit, leave the group, final record STOPPED,
 * exit 0) on SIGINT or SIGTERM, on POST /stop to the admin server, or when the host's heartbeat
 * says Stop.
 */
import { appendFileSync, readFileSync } from "node:fs";
import process from "node:process";
import { computeConfig } from "./compute-config.ts";
import { type BuildRecord, compileTopology, FvError, loadKafkaClient, planKeying, type ControlPlane, type Logger, parseSettings, planStream, runStream, settingsTable, type StreamPlan, type TopicBinding } from "../../src/index.ts";
import { HttpHost } from "../hosts/http-host.ts";
import { parsePipelineFile, TomlHost } from "../hosts/toml-host.ts";
import { loggerFromEnv, stderrRecordWriter } from "../logging.ts";
import { type AdminServer, startAdminServer } from "./admin-server.ts";
import { parseCommand, type PipelineSource, UsageError } from "./args.ts";
import { AskOnceHost, brokersOf } from "./ask-once-host.ts";

const CLI_SETTINGS: Array<[string, string, string]> = [
  ["STREAM_ADMIN_ADDR", "where the admin server listens: host:port ([v6]:port; port 0 picks a free one) or off", "127.0.0.1:8686"],
  ["STREAM_ADMIN_TOKEN", "bearer token every admin route but /healthz and /readyz needs (POST /stop off loopback needs one)", "none"],
  ["STREAM_ADMIN_METRICS_OPEN", "true: /metrics answers without STREAM_ADMIN_TOKEN (for a Prometheus scraper)", "false"],
  ["STREAM_LOG_FORMAT", "json or pretty", "pretty on a terminal, else json"],
  ["STREAM_LOG_LEVEL", "debug, info, warn or error", "info"],
  ["FV_CONTROL_PLANE_TOKEN", "bearer token sent to --control-plane", "none"],
  ["FV_BUILD_ID", "the build id when --build is not given", "<pipeline>-<time>"],
];

const USAGE = `usage:
  fv-streams run FILE [--record-file PATH]         run a pipeline file until stopped
  fv-streams run --control-plane URL --pipeline ID [--build ID] [--record-file PATH]
                                                   run a pipeline a platform serves (docs/control-plane.md)
  fv-streams validate FILE [--offline]             check a pipeline file without consuming anything,
                                                   and that its input topics exist (--offline: skip the brokers)
  fv-streams validate --control-plane URL --pipeline ID [--offline]

A run stops in order on SIGINT/SIGTERM, POST /stop to the admin server, or the host's Stop.
Exit codes: 0 stopped in order (or valid), 1 the run failed or a setting is bad, 2 a wrong command line.

settings (environment; an empty value, NAME=, counts as unset and takes the default):
${[...settingsTable, ...CLI_SETTINGS].map(([name, meaning, fallback]) => `  ${name.padEnd(30)} ${meaning} (default: ${fallback})`).join("\n")}`;

/** A host and what the engine needs besides it, for either kind of pipeline source. */
interface Source {
  host: ControlPlane;
  pipeline: string;
  /** Brokers when STREAM_BROKERS is unset (a platform is asked for them; it may take a while). */
  defaultBrokers(): Promise<string | undefined>;
  /** Sends what the host still holds (HttpHost keeps records while the platform is down). */
  flush(): Promise<boolean>;
  /** Makes the host's next heartbeat say Stop (the TOML host); the abort signal does the rest. */
  requestStop(): void;
  describe: string;
  /** The pipeline is at hand (a file): check it before the admin port opens. A platform's is asked with retries, while the admin server answers. */
  local: boolean;
}

function readPipeline(path: string) {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (error) {
    throw new Error(`cannot read pipeline file ${path}: ${(error as Error).message}`);
  }
  return parsePipelineFile(text, path);
}

function openSource(source: PipelineSource, recordFile: string | undefined, log: Logger): Source {
  const writeFile = recordFile ? (line: string) => appendFileSync(recordFile, line + "\n") : undefined;
  if (source.kind === "file") {
    const file = readPipeline(source.path);
    const settings = parseSettings(process.env, file.brokers?.default);
    const host = new TomlHost(file, { brokers: settings.brokers, writeRecord: writeFile ?? stderrRecordWriter(process.env) });
    return {
      host,
      pipeline: file.name,
      defaultBrokers: () => Promise.resolve(file.brokers?.default),
      flush: () => Promise.resolve(true),
      requestStop: () => host.requestStop(),
      describe: source.path,
      local: true,
    };
  }
  const http = HttpHost.fromEnv(source.url, process.env, { log });
  // Records go to the platform, and to --record-file too when given.
  const host = new AskOnceHost(http, { writeRecord: writeFile });
  return {
    host,
    pipeline: source.pipeline,
    defaultBrokers: () => (process.env.STREAM_BROKERS ? Promise.resolve(undefined) : brokersOf(host, source.pipeline, log)),
    flush: () => http.flush(),
    requestStop: () => {},
    describe: `${http.baseUrl} pipeline ${source.pipeline}`,
    local: false,
  };
}

/**
 * The input topics no stage produces, checked on the brokers: 0 when they all exist, 1 naming the
 * missing ones. Brokers that do not answer leave them unchecked (a note, exit 0): the file is valid.
 */
async function checkInputTopics(source: Source, plan: StreamPlan): Promise<number> {
  const settings = parseSettings(process.env, await source.defaultBrokers());
  const stages = compileTopology(plan.topology).stages;
  const produced = new Set(stages.map((s) => s.def.output));
  const inputs = [...new Set(stages.flatMap((s) => s.def.inputs))].filter((d) => !produced.has(d));
  if (inputs.length === 0) return 0;
  const admin = (await loadKafkaClient(settings.kafkaClient))(settings.brokers.split(",")).admin({ clientId: `fv-validate-${source.pipeline}` });
  try {
    const counts = await admin.partitionCounts(inputs.map((d) => plan.bindings[d]!.topic));
    const missing = inputs.filter((d) => counts.get(plan.bindings[d]!.topic) === undefined);
    for (const d of missing) {
      const stage = stages.find((s) => s.def.inputs.includes(d))!;
      process.stdout.write(`  stage ${stage.index + 1}: input dataset "${d}" maps to topic "${plan.bindings[d]!.topic}", which does not exist on ${settings.brokers}: create it before run\n`);
    }
    if (missing.length === 0) process.stdout.write(`  input topics exist on ${settings.brokers}: ${inputs.map((d) => plan.bindings[d]!.topic).join(", ")}\n`);
    return missing.length === 0 ? 0 : 1;
  } catch (error) {
    const why = error instanceof FvError && typeof error.context.unreachable === "string" ? `no broker answered at ${settings.brokers} (${error.context.unreachable})` : (error as Error).message;
    process.stdout.write(`  input topics not checked: ${why}. --offline skips this check.\n`);
    return 0;
  } finally {
    await admin.close().catch(() => {});
  }
}

async function validate(source: Source, where: string, offline: boolean): Promise<number> {
  const plan = await planStream(source.host, source.pipeline, { compute: computeConfig() });
  const stages = compileTopology(plan.topology).stages;
  process.stdout.write(`${where}: pipeline "${source.pipeline}" is valid: ${stages.length} stage(s)\n`);
  for (const stage of stages) {
    const topics = (ds: string[]) => ds.map((d) => `${d} (${describeBinding(plan.bindings[d]!)})`).join(", ");
    process.stdout.write(`  stage ${stage.index + 1}: ${topics(stage.def.inputs)} → ${topics([stage.def.output])}: ${stage.steps.map((s) => s.op).join(" → ") || "pass-through"}\n`);
  }
  // Which stateful stages get a repartition hop, and why.
  for (const keying of planKeying(compileTopology(plan.topology), source.pipeline)) {
    process.stdout.write(`  stage ${keying.stage + 1}: ${keying.reason}\n`);
  }
  return offline ? 0 : checkInputTopics(source, plan);
}

async function run(source: Source, buildFlag: string | undefined, log: Logger): Promise<number> {
  parseSettings(process.env); // a bad setting stops the start before anything listens
  const buildId = buildFlag ?? process.env.FV_BUILD_ID ?? `${source.pipeline}-${Date.now()}`;
  const initial: BuildRecord = { id: buildId, pipeline: source.pipeline, kind: "stream", status: "STARTING" };

  // Each of these starts the ordered shutdown once: finish the batch, flush, commit, exit 0.
  const abort = new AbortController();
  const stop = (why: string) => {
    if (abort.signal.aborted) return;
    log("info", `${why}: stopping in order`, { build: buildId });
    source.requestStop();
    abort.abort();
  };
  process.on("SIGINT", () => stop("SIGINT received"));
  process.on("SIGTERM", () => stop("SIGTERM received"));
  keepRunningOnStrayRejections(log);

  // A pipeline file that will not run opens no port: runStream then fails it (FAILED record, exit 1) as usual.
  const runnable = !source.local || (await planStream(source.host, source.pipeline, { compute: computeConfig() }).then(() => true, () => false));
  const admin: AdminServer | undefined = runnable
    ? await startAdminServer({ env: process.env, initial, stop: () => stop("POST /stop received"), log })
    : undefined;
  // The record names the admin URL, so whoever reads it (a platform, a test) finds the dashboard.
  if (admin) initial.admin = admin.url;
  admin?.update(initial);

  // Asking a platform for the brokers waits for it (with retries): the admin server answers meanwhile.
  const settings = parseSettings(process.env, await source.defaultBrokers());
  log("info", `starting build ${buildId} of pipeline "${source.pipeline}" from ${source.describe}`, { build: buildId, brokers: settings.brokers });
  let final: BuildRecord;
  try {
    final = await runStream(source.host, source.pipeline, buildId, initial, {
      settings,
      log,
      signal: abort.signal,
      compute: computeConfig(),
      onRecord: (record, metrics) => admin?.update(record, metrics),
      onState: (state) => admin?.setState(state),
      ...(admin ? { advertise: admin.advertised } : {}),
      // The loops' per-poll debug lines (the engine itself reads no environment).
      debugLoop: process.env.FV_DEBUG_LOOP === "1",
      // Breaks exactly-once on purpose: only the kill test sets it, to show that it catches this.
      unsafeCommitAhead: process.env.FV_UNSAFE_COMMIT_AHEAD === "1",
    });
    admin?.update(final);
  } finally {
    await admin?.close();
  }
  if (!(await source.flush())) log("warn", "the control plane did not take the final build record before exit", { build: buildId });
  if (final.status === "FAILED") {
    log("error", `pipeline "${source.pipeline}" failed: ${final.error}`, { build: buildId });
    return 1;
  }
  log("info", `build ${buildId} ${final.status}`, { build: buildId, consumed: final.metrics?.consumed, emitted: final.metrics?.emitted });
  return 0;
}

async function main(argv: string[], log: Logger): Promise<number> {
  let command;
  try {
    command = parseCommand(argv);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    process.stderr.write(`fv-streams: ${error.message}\n${USAGE}\n`);
    return 2;
  }
  if (command.kind === "help") {
    process.stderr.write(USAGE + "\n");
    return argv.length === 0 ? 2 : 0;
  }
  const where = command.source.kind === "file" ? command.source.path : command.source.url;
  if (command.kind === "validate") return validate(openSource(command.source, undefined, log), where, command.offline);
  const source = openSource(command.source, command.recordFile, log);
  return run(source, command.source.kind === "control-plane" ? command.source.build : undefined, log);
}

/** Logs on stderr as STREAM_LOG_FORMAT says; a bad setting falls back to plain lines so its message is seen. */
function processLogger(): Logger {
  try {
    return loggerFromEnv(process.env);
  } catch (error) {
    process.stderr.write(`fv-streams: ${(error as Error).message}\n`);
    process.exit(1); // as for every bad setting; 2 is a wrong command line
  }
}

const log = processLogger();
main(process.argv.slice(2), log).then(
  (code) => process.exit(code),
  (error) => {
    log("error", (error as Error)?.message ?? String(error));
    process.exit(1);
  },
);

/**
 * A promise rejected where nobody awaits it (a client library's background work) would end the
 * process, and its partitions would move for nothing: the loop awaits everything that decides
 * its state, so a stray rejection is logged with its reason and the stream goes on. On Deno the
 * same holds for a stray non-Error thrown from a library callback: a Deno process resumed after
 * SIGSTOP ended with "Uncaught null" in the fault soak.
 */
function keepRunningOnStrayRejections(log: Logger): void {
  const describe = (reason: unknown) => (reason instanceof Error ? reason.stack ?? reason.message : String(reason));
  type WebEvent = { reason?: unknown; error?: unknown; preventDefault(): void };
  const web = globalThis as { addEventListener?: (type: string, listener: (event: WebEvent) => void) => void; Deno?: unknown };
  if (web.Deno && web.addEventListener) {
    web.addEventListener("unhandledrejection", (event) => {
      event.preventDefault();
      log("error", `unhandled promise rejection (the stream goes on): ${describe(event.reason)}`);
    });
    web.addEventListener("error", (event) => {
      if (event.error instanceof Error) return; // a real exception still ends the process
      event.preventDefault();
      log("error", `uncaught non-Error value thrown (the stream goes on): ${describe(event.error)}`);
    });
  } else {
    process.on("unhandledRejection", (reason) => log("error", `unhandled promise rejection (the stream goes on): ${describe(reason)}`));
  }
}

/** Where a dataset lives, for `validate`: its topic, or its sink. */
function describeBinding(binding: TopicBinding): string {
  const sink = binding.sinkConfig;
  if (!sink) return `topic ${binding.topic}`;
  return sink.kind === "postgres" ? `postgres sink: table ${sink.table}, key ${sink.key.join(", ")}` : `http sink: ${sink.method} ${sink.url}`;
}
