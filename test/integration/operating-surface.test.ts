/**
 * The operating surface end to end, on the real local broker: `fv-streams run --control-plane`
 * against the reference platform (runtime/platform/server.ts), and the admin server every run
 * serves (health, readiness, Prometheus metrics, a guarded /stop).
 */
import { afterEach, describe, expect, test } from "bun:test";
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createPlatformApp, createPlatformState } from "../../runtime/platform/server.ts";
import { serveAdmin } from "../../runtime/serve.ts";
import type { BuildRecord } from "../../src/index.ts";
import type { InboundRecord, OutboundRecord } from "../../src/kafka/port.ts";
import { parsePrometheusText, sampleValue } from "../metrics/prom-text.ts";
import { adminUrlOf, BUN, type CliRun, ENGINE_KAFKA_CLIENT, lastRecord, logsOf, ROOT, runCli, startCli, waitFor, writePipeline } from "../helpers/cli.ts";
import { collect, committedOffsets, consumeAll, createTopic, header, json, produce, uniqueName } from "../helpers/kafka.ts";
import { pipelineToml } from "../helpers/pipelines.ts";

// ---------------------------------------------------------------------------------------------
// Fixtures: trades with poison among them, and what a `price > 100` filter makes of them.

/** id % 50 == 24: a JSON list (not_object); id % 50 == 49: not JSON (invalid_json); else a trade with price id % 200. */
function value(id: number): string {
  if (id % 50 === 24) return "[1,2]";
  if (id % 50 === 49) return "not json {";
  return JSON.stringify({ id, sym: ["ACME", "GLOBEX", "INITECH"][id % 3], price: id % 200, qty: 1 + (id % 7) });
}
const trades = (topic: string, from: number, to: number): OutboundRecord[] =>
  Array.from({ length: to - from }, (_, i) => ({ topic, key: `k${from + i}`, value: value(from + i) }));

/** The exact counters and output ids of ids [from, to). */
function expectedOf(from: number, to: number) {
  const ids: number[] = [];
  let dropped = 0;
  const poisonByReason = { invalid_json: 0, not_object: 0 };
  for (let id = from; id < to; id++) {
    if (id % 50 === 24) poisonByReason.not_object++;
    else if (id % 50 === 49) poisonByReason.invalid_json++;
    else if (id % 200 > 100) ids.push(id);
    else dropped++;
  }
  const poison = poisonByReason.invalid_json + poisonByReason.not_object;
  return { consumed: to - from, emitted: ids.length, dropped, poison, poisonByReason, deadLettered: poison, ids };
}

interface Topics {
  name: string;
  input: string;
  output: string;
  dlq: string;
}

async function topicsFor(prefix: string, partitions: number): Promise<Topics> {
  const name = uniqueName(prefix);
  const topics = { name, input: `${name}-in`, output: `${name}-out`, dlq: `${name}-dlq` };
  await createTopic(topics.input, partitions);
  return topics;
}

function tradesPipeline(t: Topics): string {
  return pipelineToml({
    name: t.name,
    datasets: { trades: { topic: t.input, deadLetter: t.dlq }, large: { topic: t.output } },
    transforms: [{ inputs: ["trades"], output: "large", steps: [{ op: "filter", expression: "price > 100" }] }],
  });
}

/** A folder the platform serves pipelines from, holding this one pipeline. */
function platformDir(t: Topics): string {
  const dir = mkdtempSync(join(tmpdir(), "fv-platform-"));
  writeFileSync(join(dir, `${t.name}.toml`), tradesPipeline(t));
  return dir;
}

const idsOf = (records: InboundRecord[]) => records.map((r) => json(r).id as number).sort((a, b) => a - b);
const distinct = (ids: number[]) => [...new Set(ids)].sort((a, b) => a - b);

// ---------------------------------------------------------------------------------------------
// Processes this file starts; whatever a test leaves running is killed after it.

const started = new Set<ChildProcess>();
const track = (run: CliRun) => (started.add(run.child), run);
const cli = (args: string[], env: Record<string, string> = {}) => track(startCli(args, { env }));

afterEach(async () => {
  for (const child of started) {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGKILL");
      await new Promise((resolve) => child.once("exit", resolve));
    }
  }
  started.clear();
});

/** Waits for the process to end, at most `ms`. */
async function exitOf(run: CliRun, ms = 30_000): Promise<number | string> {
  return await Promise.race([run.exited, new Promise<string>((resolve) => setTimeout(() => resolve(`still running after ${ms} ms`), ms))]);
}

/** The reference platform as its own process (so a test can kill it like a real one). */
interface PlatformProcess {
  url: string;
  port: number;
  kill(): Promise<void>;
}

async function startPlatform(dir: string, port = 0): Promise<PlatformProcess> {
  const child = spawn(BUN, [join(ROOT, "runtime/platform/server.ts"), "--dir", dir, "--port", String(port)], { cwd: ROOT, stdio: ["ignore", "ignore", "pipe"] });
  started.add(child);
  let stderr = "";
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the platform did not start within 20 s: ${stderr}`)), 20_000);
    child.stderr!.on("data", (chunk: Buffer) => {
      stderr += chunk.toString();
      const found = /platform on (http:\/\/127\.0\.0\.1:\d+)/.exec(stderr);
      if (found) {
        clearTimeout(timer);
        resolve(found[1]!);
      }
    });
    child.once("exit", (code) => reject(new Error(`the platform exited (${code}): ${stderr}`)));
  });
  return {
    url,
    port: Number(new URL(url).port),
    async kill() {
      child.kill("SIGKILL");
      if (child.exitCode === null && child.signalCode === null) await new Promise((resolve) => child.once("exit", resolve));
    },
  };
}

/** The platform's latest record of a build, or undefined (none yet, or the platform is down). */
async function platformRecord(url: string, build: string): Promise<BuildRecord | undefined> {
  const res = await fetch(`${url}/builds/${build}/record`).catch(() => undefined);
  return res?.ok ? ((await res.json()) as BuildRecord) : undefined;
}

async function adminStatus(url: string): Promise<{ record: BuildRecord; partitions: Array<{ topic: string; partition: number; state?: string }> }> {
  const res = await fetch(`${url}/status`);
  expect(res.status).toBe(200);
  return (await res.json()) as never;
}

const controlPlaneRun = (platform: PlatformProcess | { url: string }, pipeline: string, build: string, env: Record<string, string> = {}) =>
  cli(["run", "--control-plane", platform.url, "--pipeline", pipeline, "--build", build], env);

/** What the CLI logged, for a failure message. */

// ---------------------------------------------------------------------------------------------

describe("a pipeline configured over HTTP by the reference platform", () => {
  test("a heartbeat Stop gives an ordered shutdown whose final record is STOPPED, with counters matching the output", async () => {
    const t = await topicsFor("cp-stop", 4);
    await produce(trades(t.input, 0, 3000));
    const want = expectedOf(0, 3000);
    const platform = await startPlatform(platformDir(t));
    const build = `${t.name}-b1`;
    const run = controlPlaneRun(platform, t.name, build);

    await waitFor(async () => {
      if (run.child.exitCode !== null) throw new Error(`the stream exited early:\n${logsOf(run)}`);
      return (await platformRecord(platform.url, build))?.metrics?.consumed === want.consumed;
    }, 40_000, "the platform to hear of every record consumed");

    const stop = await fetch(`${platform.url}/builds/${build}/stop`, { method: "POST" });
    expect(stop.status).toBe(202);
    expect(await exitOf(run)).toBe(0);

    const final = (await platformRecord(platform.url, build))!;
    expect(final.status).toBe("STOPPED");
    expect(final.id).toBe(build);
    expect(final.pipeline).toBe(t.name);
    expect(final.admin).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(final.metrics).toMatchObject({
      consumed: want.consumed,
      emitted: want.emitted,
      dropped: want.dropped,
      poison: want.poison,
      poisonByReason: want.poisonByReason,
      deadLettered: want.deadLettered,
      consumers: 1,
    });
    expect(run.logs.map((l) => l.msg)).toContain("stopping: the host said Stop");

    // The output is what the record says: every record counted as emitted is in the topic, once.
    const out = await consumeAll(t.output, { expected: want.emitted, quietMs: 3000 });
    expect(out.length).toBe(final.metrics!.emitted);
    expect(idsOf(out)).toEqual(want.ids);
    const dead = await consumeAll(t.dlq, { expected: want.poison, quietMs: 3000 });
    expect(dead.length).toBe(final.metrics!.deadLettered);
    expect(dead.filter((r) => header(r, "fv.error.reason") === "invalid_json").length).toBe(want.poisonByReason.invalid_json);
    // Ordered: the offsets of everything consumed were committed before the process left.
    const committed = await committedOffsets(`fv-stream-${t.name}`, [t.input]);
    expect(committed.reduce((sum, o) => sum + o.offset, 0n)).toBe(BigInt(want.consumed));

    const builds = (await (await fetch(`${platform.url}/builds`)).json()) as { builds: Array<{ id: string; heartbeats: number; records: number }> };
    const entry = builds.builds.find((b) => b.id === build)!;
    expect(entry.heartbeats).toBeGreaterThan(0);
    expect(entry.records).toBeGreaterThanOrEqual(3); // STARTING, RUNNING, STOPPED at least
  }, 60_000);

  test("the platform is killed mid-run: the stream keeps flowing, and once it is back the records reach it", async () => {
    const t = await topicsFor("cp-down", 2);
    await produce(trades(t.input, 0, 1000));
    const dir = platformDir(t);
    const first = await startPlatform(dir);
    const build = `${t.name}-b1`;
    const run = controlPlaneRun(first, t.name, build, { STREAM_RECORD_INTERVAL_MS: "300" });
    const admin = await adminUrlOf(run);

    await waitFor(async () => (await platformRecord(first.url, build))?.metrics?.consumed === 1000, 40_000, "the platform to hear of the first 1000");
    await first.kill();
    expect(await platformRecord(first.url, build)).toBeUndefined();

    // With the platform gone, the stream goes on: the second half is consumed and emitted.
    await produce(trades(t.input, 1000, 2000));
    const want = expectedOf(0, 2000);
    await waitFor(async () => (await adminStatus(admin)).record.metrics?.consumed === 2000, 30_000, "the stream to consume the second half");
    const out = await consumeAll(t.output, { expected: want.emitted, quietMs: 3000 });
    expect(distinct(idsOf(out))).toEqual(want.ids);
    expect(run.child.exitCode).toBeNull();
    expect((await fetch(`${admin}/readyz`)).status).toBe(200);
    expect(run.logs.some((l) => l.level === "warn" && l.msg.startsWith("the control plane is unreachable"))).toBe(true);

    // The platform comes back on the same address, knowing nothing of the build: the stream's
    // kept record and the ones after it reach it, and so does its Stop.
    const second = await startPlatform(dir, first.port);
    await waitFor(async () => (await platformRecord(second.url, build))?.metrics?.consumed === 2000, 20_000, "the restarted platform to get the record");
    // The stream logs it once the platform's answer is back, which can come after the platform
    // has stored the record (a fresh-clone run of 2026-12-07 checked in between).
    await waitFor(() => run.logs.some((l) => l.msg.startsWith(`the control plane at ${first.url} answers again`)), 10_000, "the stream to log that the control plane answers again");
    await fetch(`${second.url}/builds/${build}/stop`, { method: "POST" });
    expect(await exitOf(run)).toBe(0);
    const final = (await platformRecord(second.url, build))!;
    expect(final.status).toBe("STOPPED");
    expect(final.metrics).toMatchObject({ consumed: 2000, emitted: want.emitted, dropped: want.dropped, poison: want.poison, deadLettered: want.deadLettered });
    expect(out.length).toBe(want.emitted);
  }, 60_000);

  test("two processes share a group; one is killed mid-flow and the other takes over its partitions with nothing lost", async () => {
    const t = await topicsFor("cp-takeover", 4);
    await produce(trades(t.input, 0, 1000));
    const platform = await startPlatform(platformDir(t));
    const env = { STREAM_SESSION_TIMEOUT_MS: "6000", STREAM_BATCH_SIZE: "100" };
    const a = controlPlaneRun(platform, t.name, `${t.name}-a`, env);
    const b = controlPlaneRun(platform, t.name, `${t.name}-b`, env);
    const [adminA, adminB] = await Promise.all([adminUrlOf(a), adminUrlOf(b)]);

    // Both own a share of the four partitions.
    let shares: number[] = [];
    await waitFor(async () => {
      shares = [(await adminStatus(adminA)).partitions.length, (await adminStatus(adminB)).partitions.length];
      return shares[0]! > 0 && shares[1]! > 0 && shares[0]! + shares[1]! === 4;
    }, 40_000, "the two processes to split the partitions");

    // Records keep coming (100 every 50 ms); a dies half-way through them, in the middle of its work.
    let fed = 1000;
    const feeding = (async () => {
      for (; fed < 5000; fed += 100) {
        await produce(trades(t.input, fed, fed + 100));
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    })();
    await waitFor(() => fed >= 3000, 30_000, "half of the feed");
    // As a's admin last saw it (the record is at most a second old; a read on until the kill).
    const consumedByA = (await adminStatus(adminA)).record.metrics!.consumed;
    a.child.kill("SIGKILL");
    expect(await exitOf(a)).toBe("SIGKILL");
    await feeding;

    // After the session timeout the group drops the dead member and b owns all four.
    await waitFor(async () => (await adminStatus(adminB)).partitions.length === 4, 30_000, "b to take over every partition");
    const want = expectedOf(0, 5000);
    const collector = collect(t.output);
    try {
      await waitFor(() => distinct(idsOf(collector.records)).length === want.ids.length, 30_000, `${want.ids.length} distinct output ids`);
    } finally {
      await collector.stop();
    }
    expect(distinct(idsOf(collector.records))).toEqual(want.ids);

    await fetch(`${platform.url}/builds/${t.name}-b/stop`, { method: "POST" });
    expect(await exitOf(b)).toBe(0);
    const final = (await platformRecord(platform.url, `${t.name}-b`))!;
    expect(final.status).toBe("STOPPED");
    expect(final.metrics!.consumed).toBe(final.metrics!.emitted + final.metrics!.dropped + final.metrics!.poison);
    // Every poison row reached the dead-letter topic (told apart by its source position).
    const dead = await consumeAll(t.dlq, { quietMs: 3000 });
    expect(new Set(dead.map((r) => `${header(r, "fv.source.partition")}:${header(r, "fv.source.offset")}`)).size).toBe(want.poison);
    console.log(
      `takeover: shares ${shares.join("+")}; a had consumed about ${consumedByA} when killed, b ${final.metrics!.consumed}; ` +
        `${collector.records.length - want.ids.length} duplicate outputs`,
    );
  }, 60_000);
});

describe("the admin server of a run", () => {
  test("health answers from the start; readiness waits for RUNNING with partitions, and follows them across processes", async () => {
    const t = await topicsFor("admin-ready", 1);
    await produce(trades(t.input, 0, 100));
    // The platform holds the topology back until released, so the build stays in STARTING.
    const app = createPlatformApp({ dir: platformDir(t), state: createPlatformState() });
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const held = {
      async fetch(request: Request) {
        if (new URL(request.url).pathname.endsWith("/topology")) await gate;
        return app.fetch(request);
      },
    };
    const server = await serveAdmin(held, { hostname: "127.0.0.1", port: 0 });
    try {
      const platform = { url: `http://127.0.0.1:${server.port}` };
      const a = controlPlaneRun(platform, t.name, `${t.name}-a`, { STREAM_SESSION_TIMEOUT_MS: "6000" });
      const adminA = await adminUrlOf(a);

      const health = await fetch(`${adminA}/healthz`);
      expect(health.status).toBe(200);
      expect(await health.json()).toEqual({ status: "ok" });
      const starting = await fetch(`${adminA}/readyz`);
      expect(starting.status).toBe(503);
      expect(await starting.json()).toEqual({ status: "not ready", reason: "the build is STARTING, not RUNNING" });
      expect((await adminStatus(adminA)).record.status).toBe("STARTING");

      release();
      await waitFor(async () => (await fetch(`${adminA}/readyz`)).status === 200, 20_000, "a to be ready");
      expect((await adminStatus(adminA)).partitions).toMatchObject([{ topic: t.input, partition: 0, state: "running" }]);

      // One partition, two processes: the second runs but owns nothing, so it is not ready.
      const b = controlPlaneRun(platform, t.name, `${t.name}-b`, { STREAM_SESSION_TIMEOUT_MS: "6000" });
      const adminB = await adminUrlOf(b);
      await waitFor(async () => (await adminStatus(adminB)).record.status === "RUNNING", 20_000, "b to run");
      const idle = await fetch(`${adminB}/readyz`);
      expect(idle.status).toBe(503);
      expect(((await idle.json()) as { reason: string }).reason).toStartWith("no partitions assigned to this process");
      expect((await fetch(`${adminB}/healthz`)).status).toBe(200);

      // a stops in order (POST /stop on loopback needs no token) and leaves the group: b takes over.
      const stop = await fetch(`${adminA}/stop`, { method: "POST" });
      expect(stop.status).toBe(202);
      expect(await stop.json()).toEqual({ status: "stopping" });
      expect(await exitOf(a)).toBe(0);
      await waitFor(async () => (await fetch(`${adminB}/readyz`)).status === 200, 20_000, "b to be ready after a left");
      await expect(fetch(`${adminA}/healthz`)).rejects.toThrow(); // a's server is gone with it

      b.child.kill("SIGTERM");
      expect(await exitOf(b)).toBe(0);
    } finally {
      release();
      await server.close();
    }
  }, 60_000);

  test("/metrics parses as Prometheus text and its counters match the build record", async () => {
    const t = await topicsFor("admin-metrics", 2);
    await produce(trades(t.input, 0, 1500));
    const want = expectedOf(0, 1500);
    const run = cli(["run", writePipeline(tradesPipeline(t))]);
    const admin = await adminUrlOf(run);
    // Settled: everything consumed, checkpointed, and the measured rate back to 0, the same in two
    // reads 300 ms apart, so nothing moves between the two reads below. (The rate is 0 until first
    // measured, and the first checkpoint is 200 ms in: a run that consumed everything at once
    // looked settled before anything was committed.)
    let previous = "";
    await waitFor(async () => {
      const m = (await adminStatus(admin)).record.metrics;
      const now = JSON.stringify([m?.consumed, m?.commits, m?.recordsPerSecond]);
      const settled = m?.consumed === want.consumed && m.recordsPerSecond === 0 && m.commits > 0 && now === previous;
      previous = now;
      if (!settled) await new Promise((r) => setTimeout(r, 300));
      return settled;
    }, 30_000, "the stream to consume everything and settle");

    const res = await fetch(`${admin}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8");
    const families = parsePrometheusText(await res.text());
    const { record } = await adminStatus(admin);
    const m = record.metrics!;
    const value = (name: string, labels: Record<string, string> = {}) => sampleValue(families, name, labels);

    expect(m).toMatchObject({ consumed: want.consumed, emitted: want.emitted, dropped: want.dropped, poison: want.poison, deadLettered: want.deadLettered });
    expect(value("fv_records_consumed_total")).toBe(m.consumed);
    expect(value("fv_records_emitted_total")).toBe(m.emitted);
    expect(value("fv_records_dropped_total")).toBe(m.dropped);
    expect(value("fv_poison_records_total", { reason: "invalid_json" })).toBe(m.poisonByReason.invalid_json!);
    expect(value("fv_poison_records_total", { reason: "not_object" })).toBe(m.poisonByReason.not_object!);
    expect(value("fv_records_dead_lettered_total")).toBe(m.deadLettered);
    expect(value("fv_checkpoint_commits_total")).toBe(m.commits);
    expect(m.commits).toBeGreaterThan(0);
    expect(value("fv_consumers")).toBe(1);
    expect(value("fv_assigned_partitions")).toBe(2);
    expect(value("fv_records_per_second")).toBe(0);
    expect(value("fv_build_info", { pipeline: t.name, build: record.id, guarantee: "at-least-once", kafka_client: ENGINE_KAFKA_CLIENT })).toBe(1);
    expect(value("fv_build_status", { status: "RUNNING" })).toBe(1);
    expect(value("fv_build_status", { status: "STOPPED" })).toBe(0);
    expect(value("fv_build_start_time_seconds")).toBe(Date.parse(record.startedAt!) / 1000);
    expect(families.get("fv_records_consumed_total")?.type).toBe("counter");
    expect(value("process_resident_memory_bytes")).toBeGreaterThan(0);
    // Per partition, the next offset to process: on a fresh input they add up to what was consumed.
    expect(m.partitions.reduce((sum, p) => sum + (p.offset ?? 0), 0)).toBe(m.consumed);
    // Events the loop records, not the build record: the join, and the stage's batch latencies.
    expect(value("fv_rebalances_total")).toBeGreaterThanOrEqual(1);
    expect(value("fv_step_latency_seconds_count", { stage: "0", step: "0", op: "stage" })).toBeGreaterThanOrEqual(1);

    run.child.kill("SIGTERM");
    expect(await exitOf(run)).toBe(0);
    const final = lastRecord(run.records)!;
    expect(final.status).toBe("STOPPED");
    expect(final.metrics).toMatchObject({ consumed: m.consumed, emitted: m.emitted, dropped: m.dropped, poison: m.poison, deadLettered: m.deadLettered });
  }, 60_000);

  test("/stop without a token is refused on a non-loopback address; with STREAM_ADMIN_TOKEN it takes the bearer token only", async () => {
    const t = await topicsFor("admin-stop", 1);
    await produce(trades(t.input, 0, 50));
    const file = writePipeline(tradesPipeline(t));
    const open = cli(["run", file], { STREAM_ADMIN_ADDR: "0.0.0.0:0" });
    const guarded = cli(["run", file], { STREAM_ADMIN_ADDR: "0.0.0.0:0", STREAM_ADMIN_TOKEN: "s3cret-token" });
    const [openAdmin, guardedAdmin] = await Promise.all([adminUrlOf(open), adminUrlOf(guarded)]);
    await waitFor(() => lastRecord(open.records)?.status === "RUNNING" && lastRecord(guarded.records)?.status === "RUNNING", 20_000, "both to run");

    const refused = await fetch(`${openAdmin}/stop`, { method: "POST" });
    expect(refused.status).toBe(403);
    expect(((await refused.json()) as { error: string }).error).toContain("no STREAM_ADMIN_TOKEN is set");
    await new Promise((resolve) => setTimeout(resolve, 1000));
    expect(open.child.exitCode).toBeNull();
    expect((await adminStatus(openAdmin)).record.status).toBe("RUNNING");

    expect((await fetch(`${guardedAdmin}/stop`, { method: "POST" })).status).toBe(401);
    expect((await fetch(`${guardedAdmin}/stop`, { method: "POST", headers: { authorization: "Bearer wrong" } })).status).toBe(401);
    expect(guarded.child.exitCode).toBeNull();
    const taken = await fetch(`${guardedAdmin}/stop`, { method: "POST", headers: { authorization: "Bearer s3cret-token" } });
    expect(taken.status).toBe(202);
    expect(await exitOf(guarded)).toBe(0);
    expect(lastRecord(guarded.records)!.status).toBe("STOPPED");
    expect(guarded.logs.map((l) => l.msg)).toContain("POST /stop received: stopping in order");

    open.child.kill("SIGTERM");
    expect(await exitOf(open)).toBe(0);
    expect(lastRecord(open.records)!.status).toBe("STOPPED");
  }, 60_000);
});

describe("the command line", () => {
  test("validate --control-plane checks the pipeline the platform serves; a wrong command line exits 2 saying what is missing", async () => {
    const t = await topicsFor("cli-validate", 1);
    const platform = await startPlatform(platformDir(t));
    const valid = await runCli(["validate", "--control-plane", platform.url, "--pipeline", t.name]);
    expect(valid.code).toBe(0);
    expect(valid.lines).toEqual([
      `${platform.url}: pipeline "${t.name}" is valid: 1 stage(s)`,
      `  stage 1: trades (topic ${t.input}) → large (topic ${t.output}): filter`,
      expect.stringMatching(new RegExp(`^  input topics exist on \\S+: ${t.input}$`)),
    ]);

    const unknown = await runCli(["validate", "--control-plane", platform.url, "--pipeline", "no-such-pipeline"]);
    expect(unknown.code).toBe(1);
    expect(unknown.output).toContain(`the control plane has no pipeline "no-such-pipeline": GET ${platform.url}/pipelines/no-such-pipeline/topology answered 404`);

    const noPipeline = await runCli(["run", "--control-plane", platform.url]);
    expect(noPipeline.code).toBe(2);
    expect(noPipeline.output).toContain("--control-plane needs --pipeline ID");
    const both = await runCli(["run", "pipeline.toml", "--control-plane", platform.url, "--pipeline", t.name]);
    expect(both.code).toBe(2);
    expect(both.output).toContain("give either a pipeline FILE or --control-plane, not both");
  }, 60_000);

  test("a platform that does not answer fails the start naming its URL, while the admin server says why it is not ready", async () => {
    // A port that was just free: nothing listens there.
    const probe = await serveAdmin({ fetch: () => new Response() }, { hostname: "127.0.0.1", port: 0 });
    await probe.close();
    const url = `http://127.0.0.1:${probe.port}`;
    const run = controlPlaneRun({ url }, "demo", "b-unreachable");
    const admin = await adminUrlOf(run);
    const ready = await fetch(`${admin}/readyz`);
    expect(ready.status).toBe(503);
    expect(((await ready.json()) as { reason: string }).reason).toBe("the build is STARTING, not RUNNING");
    expect(await exitOf(run)).toBe(1);
    expect(run.logs.some((l) => l.level === "error" && l.msg.startsWith(`pipeline "demo" failed: the control plane did not answer GET ${url}/pipelines/demo/topology`))).toBe(true);
  }, 60_000);
});
