/**
 * The demo `npm start` runs: creates the demo topics on the local broker, feeds sample trades
 * (a few of them poison), runs examples/demo.toml and prints what comes out with the counters.
 * Serves the admin server (the dashboard) as `fv-streams run` does. Ctrl-C stops it in order.
 */
import { readFileSync } from "node:fs";
import process from "node:process";
import { delay } from "../../src/async.ts";
import { type BuildRecord, loadKafkaClient, type Logger, parseSettings, runStream } from "../../src/index.ts";
import { parsePipelineFile, TomlHost } from "../hosts/toml-host.ts";
import { packageRoot } from "../package-root.ts";
import { type AdminServer, startAdminServer } from "./admin-server.ts";

const file = new URL("examples/demo.toml", packageRoot);
const pipeline = parsePipelineFile(readFileSync(file, "utf8"), "examples/demo.toml");
const settings = parseSettings({ STREAM_RECORD_INTERVAL_MS: "2000", ...process.env }, pipeline.brokers?.default);
// The demo's feeder and tail use the same client as the stream (STREAM_KAFKA_CLIENT, auto by default).
const client = (await loadKafkaClient(settings.kafkaClient))(settings.brokers.split(","));
const inputTopic = pipeline.datasets!["trades"]!.topic!;
const outputTopic = pipeline.datasets!["large-trades"]!.topic!;

const admin = client.admin({ clientId: "fv-demo-admin" });
await admin.createTopics([{ topic: inputTopic, partitions: 4 }]);
await admin.close();

const stop = new AbortController();
const log: Logger = (level, message) => {
  if (level !== "debug") process.stderr.write(`  [${level}] ${message}\n`);
};
const printRecord = (record: BuildRecord) => {
  const m = record.metrics;
  if (!m) return void process.stdout.write(`build record: ${record.status}\n`);
  process.stdout.write(
    `build record: ${record.status}  consumed=${m.consumed} emitted=${m.emitted} dropped=${m.dropped} poison=${m.poison} ` +
      `dead-lettered=${m.deadLettered} partitions=${m.partitions.length} rate=${m.recordsPerSecond}/s\n`,
  );
};

// Feed a trade every 200 ms; every 25th one is poison (not JSON) and goes to the dead-letter topic.
// One send in flight at a time; a trade whose send fails stays queued and goes again with the
// next tick, and each failure is reported: the feeder never drops a record silently.
const producer = client.producer({ clientId: "fv-demo-feeder" });
const syms = ["ACME", "GLOBEX", "INITECH", "UMBRELLA"];
const feed = { made: 0, delivered: 0, failures: 0, queue: [] as Array<{ key: string; value: string }>, sending: false };
const sendQueued = async () => {
  if (feed.sending || feed.queue.length === 0) return;
  feed.sending = true;
  const batch = feed.queue.slice();
  try {
    await producer.send(batch.map((r) => ({ topic: inputTopic, ...r })));
    feed.queue.splice(0, batch.length);
    feed.delivered += batch.length;
  } catch (error) {
    feed.failures++;
    if (feed.failures <= 3 || feed.failures % 50 === 0) {
      log("warn", `demo feeder: sending ${batch.length} trade(s) failed (${feed.failures} failures so far), will retry: ${(error as Error).message}`);
    }
  } finally {
    feed.sending = false;
  }
};
const feeder = setInterval(() => {
  const n = ++feed.made;
  const value = n % 25 === 0
    ? "not json {"
    : JSON.stringify({ id: n, sym: syms[n % syms.length], price: Math.round(50 + Math.random() * 100), qty: 1 + (n % 10), side: n % 2 ? "buy" : "sell" });
  feed.queue.push({ key: String(n % 8), value });
  void sendQueued();
}, 200);

// Print what the pipeline emits, as a separate consumer of the output topic.
const tail = client.consumer({ groupId: `fv-demo-tail-${Date.now()}`, clientId: "fv-demo-tail", topics: [outputTopic], offsetReset: "latest" });
let tailing = true;
const tailDone = (async () => {
  // The stream creates the output topic; start tailing once it exists.
  await delay(1500);
  await tail.start().catch((e) => log("warn", `tail: ${(e as Error).message}`));
  while (tailing) {
    for (const r of await tail.poll(100, 200).catch(() => [])) {
      process.stdout.write(`  → ${outputTopic}[${r.partition}] ${new TextDecoder().decode(r.value!)}\n`);
    }
  }
})();

process.on("SIGINT", () => stop.abort());
process.on("SIGTERM", () => stop.abort());
process.stdout.write(`fv-streams demo: ${inputTopic} → filter price > 100 → ${outputTopic} (Ctrl-C to stop)\n`);

// The dashboard, on STREAM_ADMIN_ADDR (127.0.0.1:8686 by default). When that default port is
// taken (a stream of your own runs there), the demo takes a free one rather than not starting.
const buildId = `demo-${Date.now()}`;
const initial: BuildRecord = { id: buildId, pipeline: pipeline.name, kind: "stream", status: "STARTING" };
const quiet: Logger = () => {}; // the demo prints its own line below
const serveAdmin = (env: Record<string, string | undefined>) => startAdminServer({ env, initial, stop: () => stop.abort(), log: quiet });
let adminServer: AdminServer | undefined;
try {
  adminServer = await serveAdmin(process.env);
} catch (error) {
  if (process.env.STREAM_ADMIN_ADDR) throw error;
  adminServer = await serveAdmin({ ...process.env, STREAM_ADMIN_ADDR: "127.0.0.1:0" });
}
if (adminServer) {
  initial.admin = adminServer.url;
  adminServer.update(initial);
  process.stdout.write(`dashboard: ${adminServer.localUrl}/\n`);
}

const host = new TomlHost(pipeline, { brokers: settings.brokers, writeRecord: (line) => printRecord(JSON.parse(line)) });
let final: BuildRecord;
try {
  final = await runStream(host, pipeline.name, buildId, initial, {
    settings,
    log,
    signal: stop.signal,
    onRecord: (record, metrics) => adminServer?.update(record, metrics),
  });
  adminServer?.update(final);
} finally {
  await adminServer?.close();
}
clearInterval(feeder);
// What is still queued goes out before the end (a few tries), and the count says what did not.
for (let i = 0; i < 5 && (feed.queue.length || feed.sending); i++) {
  await sendQueued();
  if (feed.queue.length) await delay(200);
}
process.stdout.write(`demo feeder: ${feed.made} trades made, ${feed.delivered} delivered${feed.queue.length ? `, ${feed.queue.length} NOT delivered` : ""}, ${feed.failures} failed sends retried\n`);
tailing = false;
await tailDone;
await Promise.allSettled([producer.close(), tail.close()]);
process.stdout.write(`demo ended: ${final.status}${final.error ? `: ${final.error}` : ""}\n`);
process.exit(final.status === "FAILED" ? 1 : 0);
