/** Shared pieces of the Kafka benchmarks: loading an input topic and timing the engine over it. */
import { BuildSignal, type BuildRecord, type ControlPlane, parseSettings, runStream, type TopicBinding } from "../src/index.ts";
import { platformaticClient } from "../src/kafka/platformatic/index.ts";
import type { OutboundRecord } from "../src/kafka/port.ts";

export const BROKERS = process.env.STREAM_BROKERS ?? "127.0.0.1:9092";
export const client = platformaticClient(BROKERS.split(","));

/** A ~200-byte JSON row. */
export function row(i: number): string {
  return JSON.stringify({ id: i, sym: ["ACME", "GLOBEX", "INITECH", "UMBRELLA"][i % 4], price: i % 200, qty: 1 + (i % 9), side: i % 2 ? "buy" : "sell", venue: "XNAS", ts: 1_700_000_000_000 + i, note: "n".repeat(60) });
}

/** Creates `topic` with 4 partitions and fills it with `n` rows. */
export async function load(topic: string, n: number): Promise<void> {
  const admin = client.admin({ clientId: "bench-admin" });
  await admin.createTopics([{ topic, partitions: 4 }]);
  await admin.close();
  const producer = client.producer({ clientId: "bench-loader" });
  const chunk = 5000;
  for (let i = 0; i < n; i += chunk) {
    const records: OutboundRecord[] = [];
    for (let j = i; j < Math.min(n, i + chunk); j++) records.push({ topic, key: `k${j}`, value: row(j) });
    await producer.send(records);
  }
  await producer.close();
}

let round = 0;
export const nextName = (prefix: string) => `${prefix}-${Date.now().toString(36)}-${++round}`;

/**
 * Runs the engine with `steps` over `input` (its own group) until all `n` records are consumed
 * (or `done` says so); returns `n` per second from start (group join included) to that moment.
 * With `from: "first-record"`, from the first build record that counts a consumed record instead
 * (no group join; build records come every 100 ms).
 */
export async function timeEngine(
  input: string,
  n: number,
  steps: Array<{ op: string; [k: string]: unknown }>,
  env: Record<string, string> = {},
  /** When the run counts as done; default: all `n` records consumed. */
  done: (metrics: NonNullable<BuildRecord["metrics"]>) => boolean = (m) => m.consumed >= n,
  options: { from?: "start" | "first-record" } = {},
): Promise<number> {
  const name = nextName("bench");
  let doneAt = 0;
  let firstAt = 0;
  let firstCount = 0;
  const started = performance.now();
  const host: ControlPlane = {
    topology: async () => ({ stages: [{ inputs: ["in"], output: "out", steps }] }),
    resolveTopic: async (dataset) => ({ apiName: dataset, topic: dataset === "in" ? input : `${name}-out`, brokers: BROKERS, policy: {}, source: "kafka", sink: "kafka" }),
    heartbeat: async () => (doneAt ? BuildSignal.Stop : BuildSignal.Continue),
    putRecord: async (_id: string, record: BuildRecord) => {
      if (!firstAt && (record.metrics?.consumed ?? 0) > 0) {
        firstAt = performance.now();
        firstCount = record.metrics!.consumed;
      }
      if (!doneAt && record.metrics && done(record.metrics)) doneAt = performance.now();
    },
  };
  const settings = parseSettings({ STREAM_BROKERS: BROKERS, STREAM_RECORD_INTERVAL_MS: "100", STREAM_HEARTBEAT_INTERVAL_MS: "100", ...env });
  await runStream(host, name, name, { id: name, pipeline: name, kind: "stream", status: "STARTING" }, { settings });
  if (options.from === "first-record" && firstAt < doneAt) return (n - firstCount) / ((doneAt - firstAt) / 1000);
  return n / ((doneAt - started) / 1000);
}

export interface EngineRun {
  /** Records per second from start (group join, restores included) to the last record processed. */
  total: number;
  /** Records per second from the first record processed to the last. */
  steady: number;
  final: BuildRecord;
}

/** runStream with `steps` over `input` as pipeline `name` (its group and state topic) until `n` records are consumed. */
export async function runEngine(
  name: string,
  input: string,
  n: number,
  steps: Array<Record<string, unknown>>,
  env: Record<string, string> = {},
  /** When the run counts as done; default: `n` records consumed. */
  done: (metrics: NonNullable<BuildRecord["metrics"]>) => boolean = (m) => m.consumed >= n,
  /** The output dataset's binding instead of the topic `<name>-out` (a sink: `{ sink: "postgres", sinkConfig }`). */
  output: Partial<TopicBinding> = {},
): Promise<EngineRun> {
  let first: { at: number; consumed: number } | undefined;
  let doneAt = 0;
  const started = performance.now();
  const host: ControlPlane = {
    topology: async () => ({ stages: [{ inputs: ["in"], output: "out", steps: steps as Array<{ op: string }> }] }),
    resolveTopic: async (dataset) => ({ apiName: dataset, topic: dataset === "in" ? input : `${name}-out`, brokers: BROKERS, policy: {}, source: "kafka", sink: "kafka", ...(dataset === "in" ? {} : output) }),
    heartbeat: async () => (doneAt ? BuildSignal.Stop : BuildSignal.Continue),
    putRecord: async (_id: string, record: BuildRecord) => {
      const consumed = record.metrics?.consumed ?? 0;
      if (!first && consumed > 0) first = { at: performance.now(), consumed };
      if (!doneAt && record.metrics && done(record.metrics)) doneAt = performance.now();
    },
  };
  const settings = parseSettings({ STREAM_BROKERS: BROKERS, STREAM_RECORD_INTERVAL_MS: "100", STREAM_HEARTBEAT_INTERVAL_MS: "100", ...env });
  const final = await runStream(host, name, name, { id: name, pipeline: name, kind: "stream", status: "STARTING" }, { settings });
  if (final.status === "FAILED" || !doneAt) throw new Error(`${name} ended ${final.status} after ${final.metrics?.consumed} records: ${final.error ?? ""}`);
  const steadyMs = doneAt - first!.at;
  // `steady` needs at least two build records apart (they come every 100 ms).
  return { total: n / ((doneAt - started) / 1000), steady: steadyMs > 0 && first!.consumed < n ? (n - first!.consumed) / (steadyMs / 1000) : NaN, final };
}

export const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
export const fmt = (n: number) => Math.round(n).toLocaleString("en").padStart(9);
export const runtimeName = () => (typeof Bun !== "undefined" ? `bun ${Bun.version}` : "deno");
