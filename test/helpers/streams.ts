/**
 * A pipeline run with its output read alongside: `startStream` starts `run` on a pipeline file,
 * waits for the output topic the pipeline creates and collects it from the start; `stopWhen`
 * waits for the output a test wants and stops the run; `runUntilOutput` does both.
 */
import type { InboundRecord } from "../../src/kafka/port.ts";
import { type CliOptions, type CliRun, exitWithin, startCli, waitFor } from "./cli.ts";
import { collect, partitionCount } from "./kafka.ts";

export interface Stream {
  run: CliRun;
  /** The output topic, read from the start while the run goes on. */
  out: ReturnType<typeof collect>;
}

export interface StopOptions {
  /** How long to wait for the output (default 120 s). */
  timeoutMs?: number;
  /** How long to go on once it is there, so that a wrong or duplicate record arriving just after still shows (default 0). */
  settleMs?: number;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Throws, with the CLI's output, once the run has exited (for use inside a `waitFor` check). */
export function assertRunning(run: CliRun): void {
  if (run.child.exitCode !== null) throw new Error(`the CLI exited (${run.child.exitCode}):\n${run.lines.join("\n")}`);
}

/** Expects exit code 0; otherwise fails with the run's last output lines (a crash report shows there). */
export function expectCleanExit(run: CliRun, code: number | string): void {
  if (code !== 0) throw new Error(`the CLI exited with ${code}, not 0; its last output:\n${run.lines.slice(-40).join("\n")}`);
}

/** Starts `run` on `file`, waits (up to 60 s) for the topic `output` and collects it. */
export async function startStream(file: string, output: string, options: CliOptions = {}): Promise<Stream> {
  const run = startCli(["run", file], options);
  try {
    await waitFor(async () => (assertRunning(run), (await partitionCount(output)) !== undefined), 60_000, "the output topic");
  } catch (error) {
    run.child.kill("SIGKILL");
    throw error;
  }
  return { run, out: collect(output) };
}

/** How long a run may take to stop in order after SIGTERM before the test fails saying so. */
const STOP_DEADLINE_MS = 60_000;

/**
 * Stops the run with SIGTERM, expects it to exit 0 within STOP_DEADLINE_MS and returns every
 * output record read. A run that does not stop is killed, and the test fails with its last output
 * lines (not with the test runner's timeout, which shows nothing of the run).
 */
export async function stopStream({ run, out }: Stream): Promise<InboundRecord[]> {
  run.child.kill("SIGTERM");
  const code = await exitWithin(run, STOP_DEADLINE_MS, "the CLI did not exit after SIGTERM").catch((error) => {
    void out.stop();
    throw error;
  });
  expectCleanExit(run, code);
  return out.stop();
}

/**
 * Waits until `done(the output records so far)` holds, failing at once if the run exits, then
 * `settleMs` more; stops the run (`stopStream`) and returns every output record read.
 */
export async function stopWhen(stream: Stream, done: (records: InboundRecord[]) => boolean, what: string, options: StopOptions = {}): Promise<InboundRecord[]> {
  try {
    await waitFor(() => (assertRunning(stream.run), done(stream.out.records)), options.timeoutMs ?? 120_000, what);
    await sleep(options.settleMs ?? 0);
  } catch (error) {
    stream.run.child.kill("SIGTERM");
    void stream.out.stop();
    throw error;
  }
  return stopStream(stream);
}

/** Runs the pipeline in `file` until its output satisfies `done` (`startStream`, then `stopWhen`). */
export async function runUntilOutput(file: string, output: string, done: (records: InboundRecord[]) => boolean, what: string, options: CliOptions & StopOptions = {}) {
  const stream = await startStream(file, output, options);
  return { run: stream.run, records: await stopWhen(stream, done, what, options) };
}

/**
 * Reads `topic` from the start until `done(the records so far)` holds (up to `timeoutMs`, default
 * 30 s), then `settleMs` more, and returns every record read.
 */
export async function readUntil(topic: string, done: (records: InboundRecord[]) => boolean, what: string, options: StopOptions = {}): Promise<InboundRecord[]> {
  const reader = collect(topic);
  try {
    await waitFor(() => done(reader.records), options.timeoutMs ?? 30_000, what);
    await sleep(options.settleMs ?? 0);
  } finally {
    await reader.stop();
  }
  return reader.records;
}
