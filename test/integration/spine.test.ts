/**
 * The spine end to end: the CLI on Bun and Deno against the real local broker (and on Node with
 * each Kafka client when FV_TEST_ENGINE says so; scripts/test.sh).
 */
import { describe, expect, test } from "bun:test";
import type { OutboundRecord } from "../../src/kafka/port.ts";
import { lastRecord, logsOf, runCli, startCli, TEST_ENGINE, waitFor, writePipeline } from "../helpers/cli.ts";
import type { InboundRecord } from "../../src/kafka/port.ts";
import { collect, committedOffsets, consumeAll, createTopic, header, json, partitionCount, produce, text, uniqueName } from "../helpers/kafka.ts";
import { pipelineToml, type Transform } from "../helpers/pipelines.ts";

/** A trade row of about 200 bytes; price cycles 0..199 so 99 of every 200 pass `price > 100`. */
function trade(id: number) {
  return { id, sym: ["ACME", "GLOBEX", "INITECH"][id % 3], price: id % 200, qty: 1 + (id % 7), venue: "XNAS", note: "x".repeat(100) };
}
const trades = (topic: string, from: number, to: number): OutboundRecord[] =>
  Array.from({ length: to - from }, (_, i) => ({ topic, key: `k${from + i}`, value: JSON.stringify(trade(from + i)) }));
const expectedIds = (from: number, to: number) => {
  const ids: number[] = [];
  for (let id = from; id < to; id++) if (id % 200 > 100) ids.push(id);
  return ids;
};

/** `price > 100` from the dataset `events` (dead-lettered to `deadLetter` when given) to `out`, then the transforms `then`. */
function filterPipeline(name: string, input: string, output: string, options: { deadLetter?: string; then?: Transform[] } = {}): string {
  return pipelineToml({
    name,
    datasets: { events: { topic: input, deadLetter: options.deadLetter }, out: { topic: output } },
    transforms: [{ inputs: ["events"], output: "out", steps: [{ op: "filter", expression: "price > 100" }] }, ...(options.then ?? [])],
  });
}

/**
 * Runs the pipeline until its output topic holds every expected id, then SIGTERMs it.
 * Returns the exit code, the run, and every output record read meanwhile.
 */
async function runUntil(file: string, output: string, expected: number[], options: { runtime?: "bun" | "deno"; env?: Record<string, string> } = {}) {
  const run = startCli(["run", file], options);
  // The pipeline creates the output topic; read it once it exists.
  await waitFor(async () => (await partitionCount(output)) !== undefined || run.child.exitCode !== null, 60_000, `topic ${output}`);
  const collector = collect(output);
  const missing = () => {
    const seen = new Set(collector.records.map((r) => json(r).id as number));
    return expected.filter((id) => !seen.has(id)).length;
  };
  try {
    await waitFor(() => {
      if (run.child.exitCode !== null) throw new Error("pipeline exited early");
      return missing() === 0;
    }, 120_000, `${expected.length} output records`);
  } catch (error) {
    run.child.kill("SIGKILL");
    await collector.stop();
    const logs = logsOf(run);
    throw new Error(`${(error as Error).message} (${missing()} missing)\nlast record: ${JSON.stringify(lastRecord(run.records))}\n${logs}`);
  }
  // A build record means the CLI has its signal handlers: SIGTERM is then the ordered stop.
  await waitFor(() => run.records.length > 0 || run.child.exitCode !== null, 30_000, "the first build record");
  run.child.kill("SIGTERM");
  const code = await run.exited;
  return { code, run, out: await collector.stop() };
}

/** Sorted distinct ids of output records. */
const idsOf = (records: InboundRecord[]) => [...new Set(records.map((r) => json(r).id as number))].sort((a, b) => a - b);

describe(`the spine on ${TEST_ENGINE.name}`, () => {
  test("10,000 records through a filter with 2 consumers give exactly the expected output and counters that add up", async () => {
    const name = uniqueName("spine");
    const input = `${name}-in`;
    const output = `${name}-out`;
    await createTopic(input, 4);
    await produce(trades(input, 0, 10_000));
    const file = writePipeline(filterPipeline(name, input, output));

    const expected = expectedIds(0, 10_000);
    const { code, run, out } = await runUntil(file, output, expected, { env: { STREAM_CONSUMERS: "2" } });
    expect(code).toBe(0);

    const final = lastRecord(run.records)!;
    expect(final.status).toBe("STOPPED");
    const m = final.metrics!;
    expect(m.consumers).toBe(2);
    expect(m.consumed).toBeGreaterThanOrEqual(10_000);
    expect(m.consumed).toBe(m.emitted + m.dropped + m.poison);
    expect(m.poison).toBe(0);

    const ids = new Set(out.map((r) => json(r).id as number));
    expect(idsOf(out)).toEqual(expected);
    // Keys are kept as they are.
    for (const r of out.slice(0, 50)) expect(text(r.key)).toBe(`k${json(r).id}`);
    // The output topic was created with the input's partition count.
    expect(await partitionCount(output)).toBe(4);
    const duplicates = out.length - ids.size;
    console.log(`${TEST_ENGINE.name}: consumed=${m.consumed} emitted=${m.emitted} dropped=${m.dropped} duplicates=${duplicates}`);
  });

  test("poison records are counted and dead-lettered with their reason, and every good record still comes out", async () => {
    const name = uniqueName("poison");
    const input = `${name}-in`;
    const output = `${name}-out`;
    const dlq = `${name}-dlq`;
    await createTopic(input, 4);
    const poison: OutboundRecord[] = [
      { topic: input, key: "p1", value: "not json {" },
      { topic: input, key: "p2", value: "[1,2,3]" },
      { topic: input, key: "p3", value: "42" },
      { topic: input, key: "p4", value: '"a string"' },
      { topic: input, key: "p5", value: null },
    ];
    const good = trades(input, 0, 1000);
    await produce([...good.slice(0, 500), ...poison, ...good.slice(500)]);
    const file = writePipeline(filterPipeline(name, input, output, { deadLetter: dlq }));

    const expected = expectedIds(0, 1000);
    const { code, run, out } = await runUntil(file, output, expected);
    expect(code).toBe(0);
    const m = lastRecord(run.records)!.metrics!;
    expect(m.poison).toBe(5);
    expect(m.deadLettered).toBe(5);
    expect(m.poisonByReason).toEqual({ invalid_json: 1, not_object: 4 });

    expect(idsOf(out)).toEqual(expected);

    const dead = await consumeAll(dlq, { expected: 5 });
    expect(dead.map((r) => text(r.key)).sort()).toEqual(["p1", "p2", "p3", "p4", "p5"]);
    const p1 = dead.find((r) => text(r.key) === "p1")!;
    expect(text(p1.value)).toBe("not json {");
    expect(header(p1, "fv.error.reason")).toBe("invalid_json");
    expect(header(p1, "fv.source.topic")).toBe(input);
    expect(Number(header(p1, "fv.source.offset"))).toBeGreaterThanOrEqual(0);
    expect(header(dead.find((r) => text(r.key) === "p2")!, "fv.error.reason")).toBe("not_object");
  });

  test("an invalid topology exits non-zero naming stage, step and field, and moves no offset", async () => {
    const name = uniqueName("invalid");
    const input = `${name}-in`;
    const output = `${name}-out`;
    await createTopic(input, 2);
    await produce(trades(input, 0, 400));
    // A valid run first, so the group has committed offsets to compare against.
    const valid = writePipeline(filterPipeline(name, input, output));
    const first = await runUntil(valid, output, expectedIds(0, 400));
    expect(first.code).toBe(0);
    const group = `fv-stream-${name}`;
    const before = await committedOffsets(group, [input]);
    expect(before.map((o) => o.offset).reduce((a, b) => a + b, 0n)).toBe(400n);

    await produce(trades(input, 400, 600));
    const invalid = writePipeline(filterPipeline(name, input, output, { then: [{ inputs: ["out"], output: "final", steps: [{ op: "filter", expression: "price > > 100" }] }] }));
    const result = await runCli(["run", invalid]);
    expect(result.code).not.toBe(0);
    expect(result.output).toContain("stage 2");
    expect(result.output).toContain("step 1");
    expect(result.output).toContain('field "expression"');
    expect(await committedOffsets(group, [input])).toEqual(before);

    const validated = await runCli(["validate", invalid]);
    expect(validated.code).not.toBe(0);
    expect(validated.output).toContain("stage 2, step 1 (op \"filter\"), field \"expression\"");
  });

  // On demand (FV_KILL_RESTART_TEST=1): its output reader stalls in some full CI runs (see the
  // known issues in docs/ARCHITECTURE.md). Kill and restart stays covered in npm test by the
  // at-least-once crash test in exactly-once.test.ts (5 kills, nothing lost).
  (process.env.FV_KILL_RESTART_TEST === "1" ? test : test.skip)("kill -9 mid-run and restart: every expected record comes out (at-least-once)", async () => {
    const name = uniqueName("crash");
    const input = `${name}-in`;
    const output = `${name}-out`;
    await createTopic(input, 4);
    await produce(trades(input, 0, 40_000));
    const file = writePipeline(filterPipeline(name, input, output));
    const expected = expectedIds(0, 40_000);

    // Small batches and frequent records, so the kill lands mid-run.
    const first = startCli(["run", file], { env: { STREAM_CONSUMERS: "2", STREAM_BATCH_SIZE: "100", STREAM_RECORD_INTERVAL_MS: "100" } });
    await waitFor(() => (lastRecord(first.records)?.metrics?.emitted ?? 0) > 2000, 120_000, "the first run to emit");
    const emittedBeforeKill = lastRecord(first.records)!.metrics!.emitted;
    first.child.kill("SIGKILL");
    expect(await first.exited).toBe("SIGKILL");

    const { code, run, out } = await runUntil(file, output, expected, { env: { STREAM_CONSUMERS: "2" } });
    expect(code).toBe(0);
    const m = lastRecord(run.records)!.metrics!;
    expect(m.consumed).toBe(m.emitted + m.dropped + m.poison);
    const ids = new Set(out.map((r) => json(r).id as number));
    expect([...ids].sort((a, b) => a - b)).toEqual(expected);
    expect(emittedBeforeKill).toBeLessThan(expected.length);
    console.log(`kill -9 after ${emittedBeforeKill} emitted, then restart: ${out.length} records out, ${out.length - ids.size} duplicates`);
  });
});

describe("the spine on Deno", () => {
  test("the same filter pipeline, a smaller run, with 2 consumers in workers", async () => {
    const name = uniqueName("deno");
    const input = `${name}-in`;
    const output = `${name}-out`;
    await createTopic(input, 4);
    await produce(trades(input, 0, 2000));
    const file = writePipeline(filterPipeline(name, input, output));
    const expected = expectedIds(0, 2000);
    const { code, run, out } = await runUntil(file, output, expected, { runtime: "deno", env: { STREAM_CONSUMERS: "2" } });
    expect(code).toBe(0);
    const m = lastRecord(run.records)!.metrics!;
    expect(lastRecord(run.records)!.status).toBe("STOPPED");
    expect(m.consumed).toBe(m.emitted + m.dropped + m.poison);
    expect(idsOf(out)).toEqual(expected);
  });
});
