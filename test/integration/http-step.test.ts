/**
 * The http step through the real broker, against a local scoring service this test starts:
 * exact output, per-key order on every key, retries counted, 4xx poison dead-lettered, the
 * circuit breaker opening (readiness 503, circuit_open dead letters) and closing, and kill -9
 * under exactly-once.
 */
import { afterEach, describe, expect, test } from "bun:test";
import type { InboundRecord, OutboundRecord } from "../../src/kafka/port.ts";
import { adminUrlOf, type CliRun, lastRecord, logsOf, startCli, waitFor } from "../helpers/cli.ts";
import { collect, createTopic, header, json, produce, uniqueName } from "../helpers/kafka.ts";
import { pipelineFile, type Step } from "../helpers/pipelines.ts";
import { type ScoreService, startScoreService } from "../helpers/score-service.ts";

const KEYS = 40;
/** Row i: key k<i % KEYS>, and its place among its key's rows (`seq`). */
const row = (i: number) => ({ id: i, seq: Math.floor(i / KEYS), amount: i % 17 });
const records = (topic: string, from: number, to: number): OutboundRecord[] =>
  Array.from({ length: to - from }, (_, j) => ({ topic, key: `k${(from + j) % KEYS}`, value: JSON.stringify(row(from + j)) }));

let service: ScoreService | undefined;
const runs: CliRun[] = [];
afterEach(async () => {
  for (const run of runs.splice(0)) if (run.child.exitCode === null) run.child.kill("SIGKILL");
  await service?.close();
  service = undefined;
});

async function setUp(prefix: string, step: Record<string, unknown>, rows: number) {
  const name = uniqueName(prefix);
  const [input, output, dlq] = ["in", "out", "dlq"].map((t) => `${name}-${t}`) as [string, string, string];
  await createTopic(input, 4);
  await produce(records(input, 0, rows));
  const file = pipelineFile({
    name,
    datasets: { orders: { topic: input, deadLetter: dlq }, scored: { topic: output } },
    transforms: [{ inputs: ["orders"], output: "scored", steps: [{ op: "filter", expression: "amount >= 0" }, { op: "http", url: `${service!.url}/score/{id}`, ...step } as Step] }],
  });
  return { name, input, output, dlq, file };
}

const start = (file: string, env: Record<string, string> = {}) => {
  const run = startCli(["run", file], { env: { STREAM_BATCH_SIZE: "500", ...env } });
  runs.push(run);
  return run;
};

async function statusOf(admin: string) {
  return (await (await fetch(`${admin}/status`)).json()) as { record: { metrics?: Record<string, number> & { poisonByReason: Record<string, number> } } };
}

type Reader = ReturnType<typeof collect>;

/**
 * Reads `topics` while `body` runs (each reader stopped after); a failure prints the last log
 * lines of the run `runOf` names then (a test may start the CLI again).
 */
async function reading(topics: string[], runOf: () => CliRun, body: (...readers: Reader[]) => Promise<void>): Promise<void> {
  const readers = topics.map((topic) => collect(topic));
  try {
    await body(...readers);
  } catch (error) {
    console.log(logsOf(runOf(), 40));
    throw error;
  } finally {
    for (const reader of readers) await reader.stop();
  }
}

/** Every key's calls came in input order, each after the previous one of its key was answered. */
function checkOrder(s: ScoreService) {
  const byKey = new Map<number, typeof s.calls>();
  for (const call of s.calls) {
    const k = Number(call.id) % KEYS;
    byKey.set(k, [...(byKey.get(k) ?? []), call]);
  }
  let checked = 0;
  for (const calls of byKey.values()) {
    for (let i = 1; i < calls.length; i++) {
      expect(Number(calls[i]!.id)).toBeGreaterThanOrEqual(Number(calls[i - 1]!.id));
      expect(calls[i]!.at).toBeGreaterThanOrEqual(calls[i - 1]!.done);
      checked++;
    }
  }
  return { keys: byKey.size, checked };
}

describe("the http step through the real broker", () => {
  test("exact output; per-key order on every key; 503s retried and counted; a 404 is poison, dead-lettered with its status and body", async () => {
    const n = 2000;
    const failFirst = Object.fromEntries([3, 77, 500, 1999].map((id) => [String(id), 2]));
    service = await startScoreService({ latencyMs: 10, failFirst, status: { "42": { code: 404, body: "no score for 42" }, "1042": { code: 410, body: "gone" } } });
    const { output, dlq, file } = await setUp("http-exact", { column: "score", concurrency: 64, retryBackoffMs: 5 }, n);
    const run = start(file);
    const admin = await adminUrlOf(run);
    await reading([output, dlq], () => run, async (out, dead) => {
      await waitFor(() => out.records.length >= n - 2 && dead.records.length >= 2, 90_000, "every row scored or dead-lettered");
      await new Promise((r) => setTimeout(r, 1000));
      const got = out.records.map(json);
      expect(got.length).toBe(n - 2);
      expect(new Set(got.map((r) => r.id)).size).toBe(n - 2);
      for (const r of got) expect(r).toEqual({ ...row(r.id), score: { id: r.id, score: r.id * 2 } });
      // Per key, the output is in input order too (same key, same partition).
      const seqs = new Map<string, number>();
      for (const r of out.records as InboundRecord[]) {
        const key = new TextDecoder().decode(r.key!);
        const seq = json(r).seq;
        expect(seq).toBeGreaterThan(seqs.get(key) ?? -1);
        seqs.set(key, seq);
      }
      const order = checkOrder(service!);
      expect(order.keys).toBe(KEYS);
      console.log(`http exact: ${got.length} scored, ${order.checked} consecutive same-key calls checked, max in flight ${service!.maxInFlight()}`);
      expect(service!.maxInFlight()).toBeGreaterThan(1);

      const letters = (dead.records as InboundRecord[]).map((r) => ({ id: json(r).id, reason: header(r, "fv.error.reason"), message: header(r, "fv.error.message") }));
      expect(letters.map((l) => l.id).sort((a, b) => a - b)).toEqual([42, 1042]);
      for (const l of letters) expect(l.reason).toBe("http_error");
      expect(letters.find((l) => l.id === 42)!.message).toContain(`GET ${service!.url}/score/42 answered HTTP 404: no score for 42`);
      expect(letters.find((l) => l.id === 1042)!.message).toContain("HTTP 410: gone");

      await waitFor(async () => (await statusOf(admin)).record.metrics?.httpCalls === n + 8, 10_000, "the build record to count every call");
      const m = (await statusOf(admin)).record.metrics!;
      expect(m.httpRetries).toBe(8);
      expect(m.httpInFlight).toBe(0);
      expect(m.httpBreakersOpen).toBe(0);
      expect(m.poisonByReason.http_error).toBe(2);
      const metrics = await (await fetch(`${admin}/metrics`)).text();
      expect(metrics).toContain('fv_http_calls_total{stage="0",step="1",status="503"} 8');
      expect(metrics).toContain('fv_http_calls_total{stage="0",step="1",status="200"} 1998');
      expect(metrics).toContain('fv_http_retries_total{stage="0",step="1"} 8');
      expect(metrics).toMatch(/fv_http_call_duration_seconds_count\{stage="0",step="1"\} 2008/);
      run.child.kill("SIGTERM");
      expect(await run.exited).toBe(0);
    });
  }, 150_000);

  test("the breaker opens while the service is down (rows dead-lettered as circuit_open, /readyz 503) and closes when it is back", async () => {
    service = await startScoreService({ latencyMs: 2 });
    const first = 400;
    const { input, output, dlq, file } = await setUp("http-breaker", { column: "score", concurrency: 16, retries: 1, retryBackoffMs: 5, breakerFailures: 5, breakerCooldownMs: 1500 }, first);
    const run = start(file);
    const admin = await adminUrlOf(run);
    await reading([output, dlq], () => run, async (out, dead) => {
      await waitFor(() => out.records.length >= first, 60_000, "the first rows scored");
      expect((await fetch(`${admin}/readyz`)).status).toBe(200);
      service!.down = true;
      await produce(records(input, first, first + 400));
      await waitFor(async () => (await fetch(`${admin}/readyz`)).status === 503, 30_000, "/readyz to report the open breaker");
      const notReady = (await (await fetch(`${admin}/readyz`)).json()) as { reason: string };
      expect(notReady.reason).toContain("http step circuit breaker(s) open");
      await waitFor(() => out.records.length + dead.records.length >= first + 400, 60_000, "the rows sent while down to be dead-lettered");
      const reasons = (dead.records as InboundRecord[]).map((r) => header(r, "fv.error.reason"));
      expect(reasons.filter((r) => r === "circuit_open").length).toBeGreaterThan(300);
      expect(reasons.every((r) => r === "circuit_open" || r === "http_error")).toBe(true);

      // Back: once the cool-down is over the breaker is half-open (ready again), and the next row's call closes it.
      service!.down = false;
      await waitFor(async () => (await fetch(`${admin}/readyz`)).status === 200, 30_000, "/readyz to be ready again after the cool-down");
      await produce(records(input, first + 400, first + 800));
      await waitFor(() => out.records.length + dead.records.length >= first + 800, 60_000, "the rows after the service came back");
      await new Promise((r) => setTimeout(r, 500));
      // Every row once: scored, or dead-lettered while the service was down; the last 400 all scored.
      const ids = [...out.records, ...dead.records].map((r) => json(r as InboundRecord).id).sort((a, b) => a - b);
      expect(ids).toEqual([...Array(first + 800).keys()]);
      const scored = new Set(out.records.map((r) => json(r).id));
      expect([...Array(400).keys()].every((i) => scored.has(first + 400 + i) && scored.has(i))).toBe(true);
      expect(run.lines.some((l) => l.includes("the circuit breaker is open"))).toBe(true);
      expect(run.lines.some((l) => l.includes("the circuit breaker is half-open"))).toBe(true);
      expect(run.lines.some((l) => l.includes("the circuit breaker closed"))).toBe(true);
      const m = (await statusOf(admin)).record.metrics!;
      expect(m.httpBreakersOpen).toBe(0);
      expect(m.poisonByReason.circuit_open).toBe(reasons.filter((r) => r === "circuit_open").length);
      run.child.kill("SIGTERM");
      expect(await run.exited).toBe(0);
    });
  }, 150_000);

  test('onOpen = "wait" holds the stream while the service is down (nothing dead-lettered); a stop then is ordered, and the next run calls again', async () => {
    service = await startScoreService({ latencyMs: 2 });
    service.down = true;
    const n = 300;
    const { output, dlq, file } = await setUp("http-wait", { column: "score", retries: 3, breakerFailures: 3, breakerCooldownMs: 1000, onOpen: "wait" }, n);
    let run = start(file);
    await reading([output, dlq], () => run, async (out, dead) => {
      const admin = await adminUrlOf(run);
      await waitFor(async () => (await fetch(`${admin}/readyz`)).status === 503 && run.lines.some((l) => l.includes("the circuit breaker is open")), 30_000, "the breaker to open and hold");
      await new Promise((r) => setTimeout(r, 1500));
      expect(out.records.length).toBe(0);
      expect(dead.records.length).toBe(0);
      // Stopped while held: an ordered stop (exit 0), nothing committed for the held batch.
      const stopAt = Date.now();
      run.child.kill("SIGTERM");
      expect(await run.exited).toBe(0);
      expect(Date.now() - stopAt).toBeLessThan(15_000);
      expect(lastRecord(run.records)?.metrics?.emitted).toBe(0);
      service!.down = false;
      run = start(file);
      await waitFor(() => out.records.length >= n, 60_000, "every row once the service is back");
      await new Promise((r) => setTimeout(r, 1000));
      expect(out.records.map((r) => json(r).id).sort((a, b) => a - b)).toEqual([...Array(n).keys()]);
      expect(dead.records.length).toBe(0);
      run.child.kill("SIGTERM");
      expect(await run.exited).toBe(0);
    });
  }, 150_000);

  test("kill -9 mid-run under exactly-once: each row is in the output once; the service saw the uncommitted rows twice", async () => {
    const n = 6000;
    service = await startScoreService({ latencyMs: 15 });
    const { output, file } = await setUp("http-eos", { column: "score", concurrency: 100 }, n);
    const env = { STREAM_EXACTLY_ONCE: "true", STREAM_CHECKPOINT_INTERVAL_MS: "300" };
    let run = start(file, env);
    await reading([output], () => run, async (out) => {
      await waitFor(() => out.records.length >= n / 4 && service!.calls.length < n * 0.8, 60_000, "a quarter of the rows out");
      run.child.kill("SIGKILL");
      await run.exited;
      const calledBefore = service!.calls.length;
      run = start(file, env);
      await waitFor(() => out.records.length >= n, 90_000, "every row out");
      await new Promise((r) => setTimeout(r, 1500));
      const ids = out.records.map((r) => json(r).id);
      expect(ids.length).toBe(n);
      expect(new Set(ids).size).toBe(n);
      for (const r of out.records.map(json)) expect(r.score).toEqual({ id: r.id, score: r.id * 2 });
      const twice = [...Array(n).keys()].filter((id) => service!.countOf(id) > 1).length;
      expect([...Array(n).keys()].every((id) => service!.countOf(id) >= 1)).toBe(true);
      console.log(`http kill -9: ${calledBefore} calls before the kill, ${service!.calls.length} in all; ${twice} rows called twice (at-least-once toward the service!), 0 duplicates in the output`);
      run.child.kill("SIGTERM");
      expect(await run.exited).toBe(0);
      expect(lastRecord(run.records)?.metrics?.transactionsCommitted).toBeGreaterThan(0);
    });
  }, 180_000);
});
