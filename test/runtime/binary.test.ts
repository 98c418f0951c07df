/**
 * The single binary (`npm run build:binary`, docs/edge.md): built once, then run from a folder
 * that is not the repository, against the real local broker, with no Bun, Deno or sources
 * beside it.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { OutboundRecord } from "../../src/kafka/port.ts";
import { parsePrometheusText, sampleValue } from "../metrics/prom-text.ts";
import { adminUrlOf, type CliRun, lastRecord, ROOT, startCli, waitFor } from "../helpers/cli.ts";
import { consumeAll, createTopic, json, produce, uniqueName } from "../helpers/kafka.ts";
import { transformFile } from "../helpers/pipelines.ts";
import { startStream, stopWhen } from "../helpers/streams.ts";

/** A folder away from the repository: the binary, its pipeline files and its transforms. */
const NODE = mkdtempSync(join(tmpdir(), "fv-edge-"));
const BINARY = join(NODE, "fv-streams");
const running = new Set<CliRun>();

beforeAll(() => {
  const build = spawnSync("npm", ["run", "--silent", "build:binary", "--", "--outfile", BINARY], { cwd: ROOT, encoding: "utf8", timeout: 180_000 });
  if (build.status !== 0) throw new Error(`npm run build:binary failed (${build.status}):\n${build.stdout}\n${build.stderr}`);
}, 200_000);

afterAll(async () => {
  for (const run of running) if (run.child.exitCode === null) run.child.kill("SIGKILL");
  rmSync(NODE, { recursive: true, force: true });
});

function startBinary(args: string[], env: Record<string, string> = {}): CliRun {
  const run = startCli(args, { executable: BINARY, cwd: NODE, env });
  running.add(run);
  return run;
}

async function stopInOrder(run: CliRun): Promise<number | string> {
  run.child.kill("SIGTERM");
  return await Promise.race([run.exited, new Promise<string>((resolve) => setTimeout(() => resolve("still running after 30 s"), 30_000))]);
}

describe("the single binary", () => {
  test("is one executable that validates the demo pipeline from any folder", () => {
    writeFileSync(join(NODE, "demo.toml"), readFileSync(join(ROOT, "examples/demo.toml")));
    const result = spawnSync(BINARY, ["validate", "demo.toml", "--offline"], { cwd: NODE, encoding: "utf8", env: { PATH: "/usr/bin:/bin", HOME: NODE } });
    expect(result.stderr).toBe("");
    expect(result.status).toBe(0);
    expect(result.stdout).toBe(
      'demo.toml: pipeline "demo" is valid: 1 stage(s)\n' +
        "  stage 1: trades (topic demo-trades) → large-trades (topic demo-large-trades): filter → applyExpression → select\n",
    );
  });

  test("runs the demo pipeline with two consumers in Workers: exact output, /metrics, and an ordered stop", async () => {
    const name = uniqueName("edge-demo");
    const input = `${name}-trades`;
    const output = `${name}-large-trades`;
    const dlq = `${name}-trades-dlq`;
    // examples/demo.toml as it is, on topics of this test's own.
    const demo = readFileSync(join(ROOT, "examples/demo.toml"), "utf8")
      .replace('name = "demo"', `name = "${name}"`)
      .replace('"demo-trades-dlq"', `"${dlq}"`)
      .replace('"demo-large-trades"', `"${output}"`)
      .replace('"demo-trades"', `"${input}"`);
    expect(demo).toContain(dlq);
    writeFileSync(join(NODE, `${name}.toml`), demo);
    await createTopic(input, 4);
    const records: OutboundRecord[] = [];
    const expected: unknown[] = [];
    for (let id = 1; id <= 1000; id++) {
      if (id % 25 === 0) {
        records.push({ topic: input, key: String(id % 8), value: "not json {" });
        continue;
      }
      const trade = { id, sym: ["ACME", "GLOBEX", "INITECH", "UMBRELLA"][id % 4], price: 50 + (id % 100), qty: 1 + (id % 10), side: id % 2 ? "buy" : "sell" };
      records.push({ topic: input, key: String(id % 8), value: JSON.stringify(trade) });
      if (trade.price > 100) expected.push({ id, sym: trade.sym, price: trade.price, qty: trade.qty, notional: trade.price * trade.qty });
    }
    await produce(records);

    const run = startBinary(["run", `${name}.toml`], { STREAM_CONSUMERS: "2" });
    const admin = await adminUrlOf(run);
    await waitFor(() => {
      if (run.child.exitCode !== null) throw new Error(`the binary exited:\n${run.lines.join("\n")}`);
      return lastRecord(run.records)?.metrics?.consumed === 1000;
    }, 40_000, "the binary to consume the 1000 trades");
    expect(run.logs.map((l) => l.msg)).toContain("running 2 consumer(s) in workers");

    const families = parsePrometheusText(await (await fetch(`${admin}/metrics`)).text());
    expect(sampleValue(families, "fv_records_consumed_total")).toBe(1000);
    expect(sampleValue(families, "fv_consumers")).toBe(2);
    expect(sampleValue(families, "process_resident_memory_bytes")).toBeGreaterThan(0);

    expect(await stopInOrder(run)).toBe(0);
    const final = lastRecord(run.records)!;
    expect(final.status).toBe("STOPPED");
    expect(final.metrics).toMatchObject({ consumed: 1000, emitted: expected.length, dropped: 960 - expected.length, poison: 40, deadLettered: 40 });
    const out = await consumeAll(output, { expected: expected.length, quietMs: 3000 });
    const byId = (a: unknown, b: unknown) => (a as { id: number }).id - (b as { id: number }).id;
    expect(out.map(json).sort(byId)).toEqual(expected.sort(byId));
  }, 60_000);

  test("runs a pipeline whose WASM step comes from FV_TRANSFORMS_DIR, in a worker inside the binary", async () => {
    // The example price-filter, dropped into the node's transforms folder. A compiled binary has
    // no script to start a plugin process with, so the manifest asks for a worker (docs/edge.md).
    const functions = join(NODE, "functions");
    cpSync(join(ROOT, "functions/price-filter"), join(functions, "price-filter"), { recursive: true });
    const manifest = join(functions, "price-filter/transform.toml");
    writeFileSync(manifest, readFileSync(manifest, "utf8").replace('protocol = "json"', 'protocol = "json"\nisolation = "worker"'));
    expect(readFileSync(manifest, "utf8")).toContain('isolation = "worker"');

    const name = uniqueName("edge-wasm");
    const input = `${name}-orders`;
    const output = `${name}-large`;
    writeFileSync(
      join(NODE, `${name}.toml`),
      `name = "${name}"
[datasets.orders]
topic = "${input}"
[datasets.large]
topic = "${output}"

[[transforms]]
inputs = ["orders"]
output = "large"
[[transforms.steps]]
op = "wasm"
ref = "price-filter"
`,
    );
    await createTopic(input, 2);
    const orders = Array.from({ length: 300 }, (_, i) => ({ sku: `AB-${i}`, customer: i % 3 === 0 ? "Zoë" : "Ann", price: 40 + (i % 120), qty: 1 + (i % 4) }));
    await produce(orders.map((o, i) => ({ topic: input, key: `k${i}`, value: JSON.stringify(o) })));
    const expected = orders.filter((o) => o.price >= 100); // min_price = "100" in the manifest's [config]

    const run = startBinary(["run", `${name}.toml`], { STREAM_CONSUMERS: "2", FV_TRANSFORMS_DIR: functions });
    await waitFor(() => {
      if (run.child.exitCode !== null) throw new Error(`the binary exited:\n${run.lines.join("\n")}`);
      return lastRecord(run.records)?.metrics?.consumed === orders.length;
    }, 40_000, "the binary to consume every order");
    expect(await stopInOrder(run)).toBe(0);
    const final = lastRecord(run.records)!;
    expect(final.status).toBe("STOPPED");
    expect(final.metrics).toMatchObject({ consumed: orders.length, emitted: expected.length, poison: 0 });
    const out = await consumeAll(output, { expected: expected.length, quietMs: 3000 });
    const bySku = (a: { sku: string }, b: { sku: string }) => a.sku.localeCompare(b.sku);
    expect(out.map(json).sort(bySku)).toEqual(expected.sort(bySku));
  }, 60_000);

  test("keeps state in its local store (lmdb's addon inside the binary): a restart reads the store and only the changelog's tail", async () => {
    const name = uniqueName("edge-store");
    const input = `${name}-in`;
    const output = `${name}-out`;
    await createTopic(input, 2);
    const file = transformFile(name, input, output, { op: "lastN", timeColumn: "ts", n: 2, column: "v", groupBy: ["key"], repartition: false });
    const env = { STREAM_CHECKPOINT_INTERVAL_MS: "300" };
    const rows = (from: number, to: number, v: number) => Array.from({ length: to - from }, (_, i) => ({ topic: input, key: `k${from + i}`, value: JSON.stringify({ key: `k${from + i}`, ts: 1_000 * v, v }) }));

    // Two checkpoints: the store ends up covering the first one's changelog.
    const first = startBinary(["run", file], env);
    const consumed = (run: CliRun, n: number) => () => {
      if (run.child.exitCode !== null) throw new Error(`the binary exited:\n${run.lines.join("\n")}`);
      return lastRecord(run.records)?.metrics?.consumed === n;
    };
    await produce(rows(0, 20, 1));
    await waitFor(consumed(first, 20), 40_000, "the first 20 rows");
    await new Promise((r) => setTimeout(r, 1000));
    await produce(rows(20, 40, 1));
    await waitFor(consumed(first, 40), 40_000, "the next 20 rows");
    expect(await stopInOrder(first)).toBe(0);
    // The default STREAM_STATE_DIR, .fv-state/<pipeline> in its working folder; no warning about it.
    for (const p of [0, 1]) expect(existsSync(join(NODE, ".fv-state", name, "stage-1", `partition-${p}`, "state.mdb"))).toBe(true);
    expect(first.logs.map((l) => l.msg).filter((m) => m.includes("local state store"))).toEqual([]);

    await produce(rows(0, 40, 2));
    const stream = await startStream(file, output, { executable: BINARY, cwd: NODE, env });
    running.add(stream.run);
    const second = (records: Array<{ value: unknown }>) => records.map((r) => json(r as never) as { key: string; last: number[] }).filter((r) => r.last.length === 2);
    const records = await stopWhen(stream, (out) => second(out).length >= 40, "the 40 rows of the restart", { timeoutMs: 60_000, settleMs: 1000 });
    // Every key remembered its first value across the restart.
    expect(second(records).sort((a, b) => a.key.localeCompare(b.key, "en", { numeric: true }))).toEqual(Array.from({ length: 40 }, (_, i) => ({ key: `k${i}`, last: [1, 2] })));
    const m = lastRecord(stream.run.records)!.metrics!;
    console.log(`binary store restart: ${m.restoredFromStore} entries from the store, ${m.restoredRecords} changelog records`);
    // The first 20 keys from the store; the changelog read from the second checkpoint's records on.
    expect(m.restoredFromStore).toBe(20);
    expect(m.restoredRecords).toBeLessThan(40);
  }, 120_000);
});
