/**
 * Compute steps end to end through the real broker: WASM map then WASM filter (Bun and Deno, and
 * Node in the Node passes), a trapping row dead-lettered, a runaway plugin timed out, the
 * container example with its process killed mid-run, and a bad manifest refused before anything
 * is consumed.
 */
import { describe, expect, test } from "bun:test";
import { execSync } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { InboundRecord, OutboundRecord } from "../../src/kafka/port.ts";
import { lastRecord, ROOT, type Runtime, runCli, startCli, TEST_ENGINE, waitFor, writePipeline } from "../helpers/cli.ts";
import { collect, committedOffsets, createTopic, header, json, partitionCount, produce, uniqueName } from "../helpers/kafka.ts";
import { pipelineFile, transformFile } from "../helpers/pipelines.ts";
import { readUntil, runUntilOutput } from "../helpers/streams.ts";

const FUNCTIONS = join(ROOT, "functions");

function order(i: number) {
  return { id: i, sku: i % 10 === 7 ? "TRAP" : `AB-${i % 5}`, customer: i % 3 === 0 ? "Zoë" : "Ann", price: 50 + (i % 100), qty: 1 + (i % 4) };
}
/**
 * enrich-order then price-filter (min_price 100), computed by hand. The filter declares its
 * output columns (sku, customer, price, qty), so the map's extra columns stop there.
 */
function expected(i: number) {
  const o = order(i);
  if (o.price < 100) return undefined;
  return { sku: o.sku, customer: o.customer, price: o.price, qty: o.qty };
}

function twoStages(name: string, input: string, enriched: string, output: string, dlq: string) {
  return pipelineFile({
    name,
    datasets: { orders: { topic: input, deadLetter: dlq }, enriched: { topic: enriched, deadLetter: dlq }, large: { topic: output } },
    transforms: [
      { inputs: ["orders"], output: "enriched", steps: [{ op: "wasm", ref: "enrich-order" }] },
      { inputs: ["enriched"], output: "large", steps: [{ op: "wasm", ref: "price-filter" }] },
    ],
  });
}

/** A transforms root whose price-filter@1.0.0 traps on sku "TRAP" (later roots override earlier ones). */
function trappingRoot(): string {
  const root = mkdtempSync(join(tmpdir(), "fv-transforms-"));
  cpSync(join(FUNCTIONS, "price-filter"), join(root, "price-filter"), { recursive: true });
  const manifest = join(root, "price-filter", "transform.toml");
  writeFileSync(manifest, readFileSync(manifest, "utf8").replace('min_price = "100"', 'min_price = "100"\ntrap_sku = "TRAP"'));
  return root;
}

describe("compute steps through the real broker", () => {
  // Node runs the tsc build in dist/, which the Node passes of scripts/test.sh (FV_TEST_ENGINE=node-*) have built
  const runtimes: Runtime[] = ["bun", "deno", ...(TEST_ENGINE.runtime === "node" ? ["node" as const] : [])];
  for (const runtime of runtimes) {
    test(`a WASM map then a WASM filter give exactly the expected output, and a trapping row is dead-lettered (${runtime})`, async () => {
      const name = uniqueName(`wasm-${runtime}`);
      const [input, enriched, output, dlq] = ["in", "enriched", "out", "dlq"].map((t) => `${name}-${t}`) as [string, string, string, string];
      await createTopic(input, 4);
      const n = 600;
      await produce(Array.from({ length: n }, (_, i): OutboundRecord => ({ topic: input, key: `k${i}`, value: JSON.stringify(order(i)) })));
      const want = [...Array(n).keys()].filter((i) => order(i).sku !== "TRAP").map(expected).filter((x) => x !== undefined);
      const traps = [...Array(n).keys()].filter((i) => order(i).sku === "TRAP");
      const file = twoStages(name, input, enriched, output, dlq);
      const client: Record<string, string> = runtime === "node" && TEST_ENGINE.kafkaClient ? { STREAM_KAFKA_CLIENT: TEST_ENGINE.kafkaClient } : {};
      const { run, records: out } = await runUntilOutput(file, output, (got) => got.length >= want.length, `${want.length} output records`, {
        runtime,
        env: { FV_TRANSFORMS_DIR: `${FUNCTIONS}:${trappingRoot()}`, ...client },
        settleMs: 1000,
      });

      const sortKey = (r: Record<string, unknown>) => `${r.sku}|${r.customer}|${r.price}|${r.qty}`;
      const got = out.map(json).sort((a, b) => sortKey(a).localeCompare(sortKey(b)));
      expect(got).toEqual([...want].sort((a, b) => sortKey(a!).localeCompare(sortKey(b!))));

      // The trapping rows (sku TRAP) reach the filter and are isolated; their batch-mates came out above.
      const dead = await readUntil(dlq, (got) => got.length >= traps.length, "dead letters");
      expect(dead.length).toBe(traps.length);
      for (const r of dead as InboundRecord[]) {
        expect(json(r).sku).toBe("TRAP");
        expect(header(r, "fv.error.reason")).toBe("plugin_error");
        expect(header(r, "fv.source.topic")).toBe(enriched);
      }
      const m = lastRecord(run.records)!.metrics!;
      expect(m.poisonByReason).toEqual({ plugin_error: traps.length });
    });
  }

  test("a runaway plugin is timed out, its rows dead-lettered, and the stream keeps flowing", async () => {
    const name = uniqueName("spin");
    const [input, output, dlq] = ["in", "out", "dlq"].map((t) => `${name}-${t}`) as [string, string, string];
    await createTopic(input, 1);
    // Row 5 loops forever; spin's batch size is 8, so rows 0-7 share its fate and 8-39 flow on.
    await produce(Array.from({ length: 40 }, (_, i): OutboundRecord => ({ topic: input, key: `k${i}`, value: JSON.stringify({ id: i, spin: i === 5 }) })));
    const file = pipelineFile({
      name,
      datasets: { in: { topic: input, deadLetter: dlq }, out: { topic: output } },
      transforms: [{ inputs: ["in"], output: "out", steps: [{ op: "wasm", ref: "spin" }] }],
    });
    const { run, records: out } = await runUntilOutput(file, output, (got) => got.length >= 32, "32 output records", {
      runtime: "bun",
      env: { FV_TRANSFORMS_DIR: FUNCTIONS, STREAM_BATCH_SIZE: "8" },
      settleMs: 1000,
    });
    expect(out.map((r) => json(r).id).sort((a, b) => a - b)).toEqual([...Array(32).keys()].map((i) => i + 8));
    const dead = await readUntil(dlq, (got) => got.length >= 8, "dead letters");
    expect(dead.map((r) => json(r).id).sort((a, b) => a - b)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(new Set(dead.map((r) => header(r, "fv.error.reason")))).toEqual(new Set(["timeout"]));
    expect(lastRecord(run.records)!.metrics!.poisonByReason).toEqual({ timeout: 8 });
  });

  test("the container example gives the expected output, and killing its process mid-run loses nothing", async () => {
    const name = uniqueName("container");
    const [input, output] = ["in", "out"].map((t) => `${name}-${t}`) as [string, string];
    await createTopic(input, 2);
    const titles = ["Crème Brûlée", "Hello World", "Ünïcödé Títle", "a  b"];
    const n = 3000;
    // Every 250th row takes the transform 0.5 s, so the run lasts long enough to kill it mid-way.
    const title = (i: number) => (i % 250 === 249 ? "#slow" : `${titles[i % 4]} ${i}`);
    await produce(Array.from({ length: n }, (_, i): OutboundRecord => ({ topic: input, key: `k${i}`, value: JSON.stringify({ id: i, title: title(i) }) })));
    const slug = (i: number) => (i % 250 === 249 ? "slow" : `${["creme-brulee", "hello-world", "unicode-title", "a-b"][i % 4]}-${i}`);
    const file = writePipeline(`name = "${name}"
[[transforms]]
inputs = ["${input}"]
output = "${output}"
[[transforms.steps]]
op = "container"
ref = "slugify-py"
`);
    const run = startCli(["run", file], { env: { FV_TRANSFORMS_DIR: FUNCTIONS, STREAM_BATCH_SIZE: "100" } });
    await waitFor(async () => (await partitionCount(output)) !== undefined, 60_000, "the output topic");
    const collector = collect(output);
    // Kill the transform's process (not the pipeline) while rows are flowing.
    await waitFor(() => collector.records.length > 200, 60_000, "first outputs");
    execSync("pkill -9 -f 'python3 -u [s]lugify.py'");
    const killedAt = new Set(collector.records.map((r) => json(r).id)).size;
    await waitFor(() => new Set(collector.records.map((r) => json(r).id)).size >= n, 120_000, "every row");
    run.child.kill("SIGTERM");
    expect(await run.exited).toBe(0);
    const out = await collector.stop();
    const byId = new Map(out.map((r) => [json(r).id as number, json(r).slug as string]));
    expect(byId.size).toBe(n);
    for (let i = 0; i < n; i++) expect(byId.get(i)).toBe(slug(i));
    expect(killedAt).toBeLessThan(n);
    expect(lastRecord(run.records)!.metrics!.poison).toBe(0);
  });

  test("a bad manifest fails validation before anything is consumed", async () => {
    const name = uniqueName("bad-manifest");
    const input = `${name}-in`;
    await createTopic(input, 1);
    await produce([{ topic: input, key: "k", value: JSON.stringify({ id: 1 }) }]);
    const root = mkdtempSync(join(tmpdir(), "fv-bad-"));
    execSync(`mkdir -p ${root}/broken && printf 'id = "broken"\\nimpl = "wasm"\\n' > ${root}/broken/transform.toml`);
    const file = transformFile(name, input, `${name}-out`, { op: "filter", expression: "id > 0" });
    const result = await runCli(["run", file], { env: { FV_TRANSFORMS_DIR: `${FUNCTIONS}:${root}` } });
    expect(result.code).not.toBe(0);
    expect(result.output).toContain("broken/transform.toml");
    expect(await committedOffsets(`fv-stream-${name}`, [input])).toEqual([{ topic: input, partition: 0, offset: -1n }]);

    const missing = transformFile(`${name}-2`, input, `${name}-out`, { op: "wasm", ref: "no-such-transform" });
    const second = await runCli(["validate", missing], { env: { FV_TRANSFORMS_DIR: FUNCTIONS } });
    expect(second.code).not.toBe(0);
    expect(second.output).toContain("stage 1, step 1");
    expect(second.output).toContain("no-such-transform");
  });
});
