import { afterEach, describe, expect, test } from "bun:test";
import * as v from "valibot";
import { CircuitBreaker, type BreakerState } from "../../src/compute/circuit-breaker.ts";
import { createComputeStep } from "../../src/compute/index.ts";
import { HttpStep, httpStepSchema } from "../../src/compute/http-step.ts";
import { compileTopology } from "../../src/topology/compile-topology.ts";
import { type ScoreService, startScoreService } from "../helpers/score-service.ts";

let service: ScoreService | undefined;
afterEach(async () => {
  await service?.close();
  service = undefined;
});

const at = { stage: 0, step: 1 };
const step = (fields: Record<string, unknown>, options: ConstructorParameters<typeof HttpStep>[1] = { location: at }) =>
  new HttpStep(v.parse(httpStepSchema, { op: "http", ...fields }), options);

describe("the http step", () => {
  test("each row gets the service's JSON answer in its column, in input order", async () => {
    service = await startScoreService({ latencyMs: 5 });
    const http = step({ url: `${service.url}/score/{id}`, column: "score" });
    const results = await http.processBatch([{ id: 1 }, { id: 2 }, { id: "a b" }], ["k1", "k2", null]);
    expect(results).toEqual([
      { rows: [{ id: 1, score: { id: 1, score: 2 } }] },
      { rows: [{ id: 2, score: { id: 2, score: 4 } }] },
      { rows: [{ id: "a b", score: { id: "a b", score: null } }] },
    ]);
    expect(service.calls.map((c) => c.id).sort()).toEqual(["1", "2", "a b"]);
    expect(http.counters.calls).toBe(3);
  });

  test("columns maps answer fields to columns; a field the answer lacks is null", async () => {
    service = await startScoreService();
    const http = step({ url: `${service.url}/score/{id}`, columns: { score: "fraud_score", missing: "other" } });
    expect(await http.processBatch([{ id: 21 }])).toEqual([{ rows: [{ id: 21, fraud_score: 42, other: null }] }]);
  });

  test("POST sends the body expression (or the row) as JSON, with headers taken from the environment", async () => {
    service = await startScoreService();
    const http = step(
      { url: `${service.url}/score/{id}`, method: "POST", body: "{ 'id': id, 'amount': price * qty }", headers: { Authorization: "Bearer ${SCORE_TOKEN}" }, column: "s" },
      { location: at, env: { SCORE_TOKEN: "t0k" } },
    );
    await http.processBatch([{ id: 3, price: 2.5, qty: 4 }]);
    expect(service.calls[0]).toMatchObject({ method: "POST", body: '{"id":3,"amount":10}' });
    expect(service.calls[0]!.headers.authorization).toBe("Bearer t0k");
    expect(service.calls[0]!.headers["content-type"]).toBe("application/json");
    const whole = step({ url: `${service.url}/score/{id}`, method: "PUT", column: "s" });
    await whole.processBatch([{ id: 4, note: "x" }]);
    expect(service.calls[1]).toMatchObject({ method: "PUT", body: '{"id":4,"note":"x"}' });
  });

  test("${NAME} in the url is filled from the environment, and its value is never read as a {column}", async () => {
    service = await startScoreService();
    const port = new URL(service.url).port;
    const http = step({ url: "http://127.0.0.1:${SCORE_PORT}/score/{id}${SUFFIX}", column: "s" }, { location: at, env: { SCORE_PORT: port, SUFFIX: "{id}" } });
    await http.processBatch([{ id: 5 }]);
    expect(service.calls[0]!.id).toBe("5{id}");
  });

  test("an environment variable that is not set is named at start, as a topology error", () => {
    expect(() => step({ url: "http://127.0.0.1:1/score/{id}", headers: { Authorization: "Bearer ${NOPE_TOKEN}" } }, { location: at, env: {} })).toThrow(
      'invalid topology: stage 1, step 2 (op "http"), field "headers.Authorization": the environment variable NOPE_TOKEN is not set',
    );
  });

  test("rows with the same key are called one after the other, in input order; other keys run at once, up to concurrency", async () => {
    service = await startScoreService({ latencyMs: 20 });
    const http = step({ url: `${service.url}/score/{id}`, column: "s", concurrency: 8 });
    const rows = Array.from({ length: 60 }, (_, i) => ({ id: i }));
    const keys = rows.map((r) => `k${r.id % 5}`);
    const results = await http.processBatch(rows, keys);
    expect(results.map((r) => ("rows" in r ? r.rows[0]!.id : null))).toEqual(rows.map((r) => r.id));
    for (let k = 0; k < 5; k++) {
      const calls = service.calls.filter((c) => Number(c.id) % 5 === k);
      expect(calls.map((c) => Number(c.id))).toEqual(rows.filter((r) => r.id % 5 === k).map((r) => r.id));
      for (let i = 1; i < calls.length; i++) expect(calls[i]!.at).toBeGreaterThanOrEqual(calls[i - 1]!.done);
    }
    // 5 keys: at most 5 at once, and more than one.
    expect(service.maxInFlight()).toBe(5);
  });

  test("concurrency bounds the calls in flight; orderBy none and a column list order by what they say", async () => {
    service = await startScoreService({ latencyMs: 15 });
    const rows = () => Array.from({ length: 40 }, (_, i) => ({ id: i, account: `a${i % 2}` }));
    await step({ url: `${service.url}/score/{id}`, column: "s", concurrency: 7, orderBy: "none" }).processBatch(rows(), rows().map(() => "same"));
    expect(service.maxInFlight()).toBe(7);
    await service.close();
    service = await startScoreService({ latencyMs: 15 });
    await step({ url: `${service.url}/score/{id}`, column: "s", concurrency: 7, orderBy: ["account"] }).processBatch(rows());
    expect(service.maxInFlight()).toBe(2);
    const a0 = service.calls.filter((c) => Number(c.id) % 2 === 0).map((c) => Number(c.id));
    expect(a0).toEqual(rows().filter((r) => r.account === "a0").map((r) => r.id));
  });

  test("a 408 is final like any 4xx but 429: poison at once, no retry", async () => {
    service = await startScoreService({ status: { "2": { code: 408, body: "slow" } } });
    const [result] = await step({ url: `${service.url}/score/{id}`, column: "s", retryBackoffMs: 1 }).processBatch([{ id: 2 }]);
    expect(result).toEqual({ poison: { reason: "http_error", message: expect.stringContaining("answered HTTP 408: slow") } });
    expect(service.countOf(2)).toBe(1);
  });

  test("503s are retried with backoff and counted; the row gets its answer", async () => {
    service = await startScoreService({ failFirst: { "7": 2 } });
    let retried = 0;
    const statuses: string[] = [];
    const http = step({ url: `${service.url}/score/{id}`, column: "s", retryBackoffMs: 1 }, { location: at, observer: { retried: () => retried++, call: (s) => statuses.push(s) } });
    expect(await http.processBatch([{ id: 7 }])).toEqual([{ rows: [{ id: 7, s: { id: 7, score: 14 } }] }]);
    expect(retried).toBe(2);
    expect(statuses).toEqual(["503", "503", "200"]);
    expect(service.countOf(7)).toBe(3);
  });

  test("a 4xx makes the row poison at once (http_error, with the status and the body's first 500 bytes); 429 is retried", async () => {
    service = await startScoreService({ status: { "9": { code: 404, body: "no such id " + "x".repeat(600) }, "10": { code: 429 } } });
    const http = step({ url: `${service.url}/score/{id}`, column: "s", retries: 2, retryBackoffMs: 1 });
    const [notFound, tooMany, fine] = await http.processBatch([{ id: 9 }, { id: 10 }, { id: 11 }]);
    expect(notFound).toEqual({ poison: { reason: "http_error", message: expect.stringContaining(`GET ${service.url}/score/9 answered HTTP 404: no such id xxx`) } });
    expect(("poison" in notFound! && notFound.poison.message.endsWith("x".repeat(489) + "…"))).toBe(true);
    expect(service.countOf(9)).toBe(1);
    expect(tooMany).toEqual({ poison: { reason: "http_error", message: expect.stringContaining("failed after 3 attempt(s): HTTP 429: status 429") } });
    expect(service.countOf(10)).toBe(3);
    expect(fine).toEqual({ rows: [{ id: 11, s: { id: 11, score: 22 } }] });
  });

  test("no answer within timeoutMs is retried, then poison; a url column that is null is poison without a call", async () => {
    service = await startScoreService({ latencyMs: 300 });
    const http = step({ url: `${service.url}/score/{id}`, column: "s", timeoutMs: 30, retries: 1, retryBackoffMs: 1 });
    const [slow, missing] = await http.processBatch([{ id: 1 }, { other: 1 }]);
    expect(slow).toEqual({ poison: { reason: "http_error", message: expect.stringContaining("failed after 2 attempt(s): no answer within 30 ms") } });
    expect(http.counters.timeouts).toBe(2);
    expect(missing).toEqual({ poison: { reason: "http_error", message: 'stage 1, step 2 (op "http"): the url needs column id, which is null or missing in this row' } });
  });

  test("a 2xx whose body is not JSON is poison", async () => {
    service = await startScoreService({ status: { "5": { code: 200, body: "<html>" } } });
    const [result] = await step({ url: `${service.url}/score/{id}`, column: "s" }).processBatch([{ id: 5 }]);
    expect(result).toEqual({ poison: { reason: "http_error", message: expect.stringContaining("answered 2xx with a body that is not JSON: <html>") } });
  });

  test("the breaker opens after breakerFailures failed calls in a row: rows go as circuit_open without a call, and a probe after the cool-down closes it", async () => {
    service = await startScoreService();
    service.down = true;
    const states: BreakerState[] = [];
    const http = step(
      { url: `${service.url}/score/{id}`, column: "s", retries: 0, breakerFailures: 3, breakerCooldownMs: 150, concurrency: 1 },
      { location: at, observer: { breaker: (s) => states.push(s) } },
    );
    const results = await http.processBatch(Array.from({ length: 6 }, (_, i) => ({ id: i })));
    expect(results.map((r) => ("poison" in r ? r.poison.reason : "ok"))).toEqual(["http_error", "http_error", "http_error", "circuit_open", "circuit_open", "circuit_open"]);
    expect(service.calls.length).toBe(3);
    expect(states).toEqual(["open"]);
    service.down = false;
    await new Promise((r) => setTimeout(r, 200));
    expect((await http.processBatch([{ id: 40 }, { id: 41 }])).map((r) => ("rows" in r ? "ok" : r.poison.reason))).toEqual(["ok", "ok"]);
    expect(states).toEqual(["open", "half-open", "closed"]);
  });

  test('onOpen = "wait" holds the rows until a probe succeeds: nothing is poison', async () => {
    service = await startScoreService();
    service.down = true;
    const http = step({ url: `${service.url}/score/{id}`, column: "s", retries: 20, breakerFailures: 1, breakerCooldownMs: 50, onOpen: "wait", concurrency: 1 });
    setTimeout(() => (service!.down = false), 300);
    const started = Date.now();
    const results = await http.processBatch([{ id: 1 }, { id: 2 }, { id: 3 }]);
    // The first failure opens the breaker: from then on every row waits for the service (each
    // probe uses one of the probing row's 20 retries: a few in 300 ms).
    expect(results.map((r) => ("rows" in r ? "ok" : r.poison.reason))).toEqual(["ok", "ok", "ok"]);
    expect(service.countOf(1)).toBeGreaterThanOrEqual(2);
    expect(Date.now() - started).toBeGreaterThanOrEqual(250);
  });
});

test("a stop interrupts rows held by an open breaker: the batch fails as retryable (read again by the next run), not as poison", async () => {
  service = await startScoreService();
  service.down = true;
  const http = step({ url: `${service.url}/score/{id}`, column: "s", retries: 5, breakerFailures: 1, breakerCooldownMs: 60_000, onOpen: "wait" });
  const held = http.processBatch([{ id: 1 }, { id: 2 }]);
  await new Promise((r) => setTimeout(r, 100));
  const started = Date.now();
  http.interrupt();
  const error = await held.then(() => undefined, (e: unknown) => e as { code: string; message: string });
  expect(error?.code).toBe("KAFKA_RETRYABLE");
  expect(error?.message).toContain("stopping while rows waited for the service");
  expect(Date.now() - started).toBeLessThan(1000);
  await http.close();
});

test('onOpen = "wait": a row that keeps failing as the probe is dead-lettered after its retries, and the stream goes on', async () => {
  service = await startScoreService({ status: { "13": { code: 500, body: "always" } } });
  const http = step({ url: `${service.url}/score/{id}`, column: "s", retries: 2, breakerFailures: 1, breakerCooldownMs: 20, onOpen: "wait", concurrency: 1, retryBackoffMs: 1 });
  const results = await http.processBatch([{ id: 13 }, { id: 14 }, { id: 15 }]);
  expect(results.map((r) => ("rows" in r ? "ok" : r.poison.reason))).toEqual(["http_error", "ok", "ok"]);
  expect(service.countOf(13)).toBe(3);
});

test("a stop also cuts short a retry's backoff; close lets rows held by the breaker go at once", async () => {
  service = await startScoreService();
  service.down = true;
  const backingOff = step({ url: `${service.url}/score/{id}`, column: "s", retries: 5, retryBackoffMs: 60_000, breakerFailures: 100 }, { location: at, random: () => 1 });
  const pending = backingOff.processBatch([{ id: 1 }]);
  await new Promise((r) => setTimeout(r, 100));
  const started = Date.now();
  backingOff.interrupt();
  expect((await pending.then(() => undefined, (e: { code: string }) => e))?.code).toBe("KAFKA_RETRYABLE");
  expect(Date.now() - started).toBeLessThan(1000);
  const held = step({ url: `${service.url}/score/{id}`, column: "s", retries: 5, breakerFailures: 1, breakerCooldownMs: 60_000, onOpen: "wait" });
  const waiting = held.processBatch([{ id: 1 }, { id: 2 }]);
  await new Promise((r) => setTimeout(r, 100));
  const closedAt = Date.now();
  await held.close();
  await waiting.then(() => undefined, () => undefined);
  expect(Date.now() - closedAt).toBeLessThan(1000);
});

describe("the circuit breaker", () => {
  test("closed → open after N failures in a row; a success in between starts the count again", async () => {
    let now = 0;
    const breaker = new CircuitBreaker({ failures: 2, cooldownMs: 100, now: () => now });
    breaker.failed();
    breaker.succeeded();
    breaker.failed();
    expect(breaker.state).toBe("closed");
    breaker.failed();
    expect(breaker.state).toBe("open");
    expect(await breaker.admit()).toEqual({ call: false, retryAt: 100 });
    now = 100;
    expect(await breaker.admit()).toEqual({ call: true });
    expect(breaker.state).toBe("half-open");
    // Others wait for the probe; its failure opens the breaker again.
    const waiting = breaker.admit();
    breaker.failed();
    expect(await waiting).toEqual({ call: false, retryAt: 200 });
    now = 200;
    expect(await breaker.admit()).toEqual({ call: true });
    breaker.succeeded();
    expect(breaker.state).toBe("closed");
    expect(breaker.opened).toBe(2);
  });

  test("a caller that ends the cool-down first takes its timer with it: a failed probe gets a whole new cool-down", async () => {
    let now = 0;
    const states: string[] = [];
    const breaker = new CircuitBreaker({ failures: 1, cooldownMs: 200, now: () => now, onChange: (s) => states.push(s) });
    breaker.failed(); // its timer: 200 ms from now
    await new Promise((r) => setTimeout(r, 100));
    now = 200; // the breaker's clock says the cool-down is over before that timer fires
    expect(await breaker.admit()).toEqual({ call: true });
    breaker.failed(); // the probe fails: a new cool-down, its timer 200 ms from now
    await new Promise((r) => setTimeout(r, 150)); // the first timer would have fired 50 ms ago
    expect(breaker.state).toBe("open");
    breaker.dispose();
    expect(states).toEqual(["open", "half-open", "open"]);
  });
});

describe("the http step in a topology", () => {
  const stage = (step: Record<string, unknown>) => ({ stages: [{ inputs: ["in"], output: "out", steps: [{ op: "filter", expression: "id > 0" }, { op: "http", ...step }] }] });

  test("it is a stage's compute step, with its defaults", () => {
    const compiled = compileTopology(stage({ url: "http://127.0.0.1:8080/score/{id}", column: "score" }));
    expect(compiled.stages[0]!.compute).toMatchObject({ op: "http", ref: "http://127.0.0.1:8080/score/{id}", step: 1 });
    expect(compiled.stages[0]!.compute!.def).toMatchObject({ method: "GET", concurrency: 100, orderBy: "key", timeoutMs: 2000, retries: 3, breakerFailures: 5, breakerCooldownMs: 10_000, onOpen: "deadLetter" });
  });

  test.each([
    [{ url: "ftp://x/{id}" }, 'field "url": url starts with http:// or https://'],
    [{ url: "http://x/{id}", method: "GET", body: "id" }, 'field "body": a GET sends no body'],
    [{ url: "http://x/{id}", column: "a", columns: { b: "c" } }, 'field "columns": set column (the whole answer in one column) or columns'],
    [{ url: "http://x/{a-b}" }, 'field "url": {a-b} is not a column name'],
    [{ url: "http://x/{id}", method: "POST", body: "{ a: }" }, 'field "body": syntax error'],
    [{ url: "http://x/{id}", concurrency: 0 }, 'field "concurrency": concurrency is at least 1'],
    [{ url: "http://x/{id}", orderBy: "partition" }, 'field "orderBy": orderBy is "key" (the message key), "none", or a list of columns'],
    [{ url: "http://x/{id}", onOpen: "skip" }, 'field "onOpen": onOpen is "deadLetter"'],
    [{ url: "http://x/{id}", retry: 3 }, 'field "retry"'],
  ])("%j is refused, naming the field", (fields, message) => {
    expect(() => compileTopology(stage(fields))).toThrow(message);
  });

  test("createComputeStep starts an http step without a transform registry", async () => {
    const started = await createComputeStep({ op: "http", url: "http://127.0.0.1:1/x/{id}" }, undefined, undefined, at);
    expect(started.op).toBe("http");
    expect(started.ref).toBe("http://127.0.0.1:1/x/{id}");
    await started.close();
  });
});
