import { describe, expect, test } from "bun:test";
import type { BuildRecord } from "../../../src/index.ts";
import { MetricsRecorder } from "../../../src/metrics/index.ts";
import { isLoopback, parseAdminAddress } from "../../../runtime/admin/address.ts";
import { type AdminAppOptions, type AdminStatus, createAdminApp } from "../../../runtime/admin/app.ts";
import { createMetricsText } from "../../../runtime/admin/metrics-text.ts";
import { parsePrometheusText, sampleValue } from "../../metrics/prom-text.ts";

/** A stream whose status the test moves by hand. */
function fakeStream() {
  const record: BuildRecord = { id: "b1", pipeline: "demo", kind: "stream", status: "STARTING", startedAt: new Date().toISOString() };
  const status: AdminStatus = { record, partitions: [] };
  const recorder = new MetricsRecorder();
  let stops = 0;
  const options = (extra: Partial<AdminAppOptions> = {}): AdminAppOptions => ({
    status: () => status,
    metricsText: createMetricsText({ sources: () => ({ record: status.record, snapshot: recorder.snapshot(), partitions: status.partitions }) }),
    stop: () => stops++,
    bindAddress: "127.0.0.1:8686",
    ...extra,
  });
  return { status, recorder, options, stops: () => stops };
}

const running = (status: AdminStatus) => {
  status.record = {
    ...status.record,
    status: "RUNNING",
    metrics: {
      consumed: 1234, emitted: 600, dropped: 600, poison: 34, poisonByReason: { invalid_json: 30, type_error: 4 }, deadLettered: 34, commits: 9,
      transactionsCommitted: 0, transactionsAborted: 0, checkpointFailures: 0, checkpointTimeouts: 0, restarts: 0, stallRestarts: 0, late: 0, repartitioned: 0, restoredRecords: 0, restoreMs: 0, stateKeys: 0, stateBytes: 0,
      guarantee: "at-least-once", kafkaClient: "platformatic", consumers: 1, partitions: [{ topic: "trades", partition: 0 }], recordsPerSecond: 120, restoreRecordsPerSecond: 0, restoredFromStore: 0, standbyPartitions: [],
    },
  };
};

describe("the admin app", () => {
  test("/healthz says ok while the process answers", async () => {
    const app = createAdminApp(fakeStream().options());
    const res = await app.request("/healthz");
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ status: "ok" });
  });

  test("/readyz is 503 with the reason until partitions are assigned, state restored and the build running", async () => {
    const s = fakeStream();
    const app = createAdminApp(s.options());
    const ready = async () => {
      const res = await app.request("/readyz");
      return { code: res.status, body: (await res.json()) as { status: string; reason?: string } };
    };
    expect(await ready()).toEqual({ code: 503, body: { status: "not ready", reason: "the build is STARTING, not RUNNING" } });
    running(s.status);
    expect((await ready()).body.reason).toContain("no partitions assigned");
    s.status.partitions = [{ topic: "trades", partition: 0, state: "restoring" }, { topic: "trades", partition: 1, state: "running" }];
    expect(await ready()).toEqual({ code: 503, body: { status: "not ready", reason: "restoring state of trades-0" } });
    s.status.partitions[0]!.state = "running";
    expect(await ready()).toEqual({ code: 200, body: { status: "ready" } });
    s.status.record = { ...s.status.record, status: "STOPPED" };
    expect((await ready()).code).toBe(503);
  });

  test("/readyz asks the stream's own ready() when given, and explains a plain false", async () => {
    let flowing = false;
    const s = fakeStream();
    running(s.status);
    s.status.partitions = [{ topic: "trades", partition: 0 }];
    const app = createAdminApp(s.options({ ready: () => flowing }));
    const res = await app.request("/readyz");
    expect(res.status).toBe(503);
    expect(await res.json()).toEqual({ status: "not ready", reason: "the stream is not flowing" });
    flowing = true;
    expect((await app.request("/readyz")).status).toBe(200);
    const withReason = createAdminApp(s.options({ ready: () => ({ ready: false, reason: "no poll for 30 s" }) }));
    expect(await (await withReason.request("/readyz")).json()).toEqual({ status: "not ready", reason: "no poll for 30 s" });
  });

  test("/metrics is Prometheus text whose counters equal the build record's", async () => {
    const s = fakeStream();
    running(s.status);
    s.status.partitions = [{ topic: "trades", partition: 0, offset: 1234, lag: 66 }];
    s.recorder.rebalanced();
    const res = await createAdminApp(s.options()).request("/metrics");
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8");
    const families = parsePrometheusText(await res.text());
    const m = s.status.record.metrics!;
    expect(sampleValue(families, "fv_records_consumed_total")).toBe(m.consumed);
    expect(sampleValue(families, "fv_records_emitted_total")).toBe(m.emitted);
    expect(sampleValue(families, "fv_records_dropped_total")).toBe(m.dropped);
    expect(sampleValue(families, "fv_records_dead_lettered_total")).toBe(m.deadLettered);
    expect(sampleValue(families, "fv_checkpoint_commits_total")).toBe(m.commits);
    for (const [reason, n] of Object.entries(m.poisonByReason)) expect(sampleValue(families, "fv_poison_records_total", { reason })).toBe(n);
    expect(sampleValue(families, "fv_partition_lag", { topic: "trades", partition: "0" })).toBe(66);
    expect(sampleValue(families, "fv_rebalances_total")).toBe(1);
    // prom-client's process metrics follow ours.
    expect(sampleValue(families, "process_resident_memory_bytes")).toBeGreaterThan(0);
  });

  test("/status is the build record with partitions, offsets as numbers even when the loop has bigints", async () => {
    const s = fakeStream();
    running(s.status);
    s.status.partitions = [{ topic: "trades", partition: 0, offset: 10n as unknown as number, lag: 2, stateBytes: 512 }];
    s.status.stages = [{ index: 0, consumed: 10, emitted: 5 }];
    const res = await createAdminApp(s.options()).request("/status");
    expect(res.status).toBe(200);
    const body = (await res.json()) as AdminStatus;
    expect(body.record.metrics?.consumed).toBe(1234);
    expect(body.partitions).toEqual([{ topic: "trades", partition: 0, offset: 10, lag: 2, stateBytes: 512 }]);
    expect(body.stages).toEqual([{ index: 0, consumed: 10, emitted: 5 }]);
  });

  test("POST /stop is refused without a token when the admin server listens beyond loopback", async () => {
    const s = fakeStream();
    const app = createAdminApp(s.options({ bindAddress: "0.0.0.0:8686" }));
    const res = await app.request("/stop", { method: "POST" });
    expect(res.status).toBe(403);
    expect(((await res.json()) as { error: string }).error).toContain("STREAM_ADMIN_TOKEN");
    expect(s.stops()).toBe(0);
  });

  test("POST /stop with a token configured needs that bearer token, then stops once", async () => {
    const s = fakeStream();
    const app = createAdminApp(s.options({ bindAddress: "0.0.0.0:8686", token: "s3cret" }));
    expect((await app.request("/stop", { method: "POST" })).status).toBe(401);
    expect((await app.request("/stop", { method: "POST", headers: { authorization: "Bearer wrong!" } })).status).toBe(401);
    expect(s.stops()).toBe(0);
    const ok = await app.request("/stop", { method: "POST", headers: { authorization: "Bearer s3cret" } });
    expect(ok.status).toBe(202);
    expect(await ok.json()).toEqual({ status: "stopping" });
    expect((await app.request("/stop", { method: "POST", headers: { authorization: "bearer s3cret" } })).status).toBe(202);
    expect(s.stops()).toBe(1);
  });

  test("POST /stop on a loopback address is taken without a token, but not from a cross-site page", async () => {
    for (const bindAddress of ["127.0.0.1:8686", "localhost:0", "[::1]:8686", "127.3.2.1:9"]) {
      const s = fakeStream();
      const app = createAdminApp(s.options({ bindAddress }));
      expect((await app.request("http://127.0.0.1:8686/stop", { method: "POST" })).status).toBe(202);
      expect(s.stops()).toBe(1);
    }
    const s = fakeStream();
    const app = createAdminApp(s.options());
    const fromPage = await app.request("http://127.0.0.1:8686/stop", { method: "POST", headers: { origin: "https://evil.example" } });
    expect(fromPage.status).toBe(403);
    const rebound = await app.request("http://evil.example:8686/stop", { method: "POST" });
    expect(rebound.status).toBe(403);
    expect(s.stops()).toBe(0);
  });

  test("with STREAM_ADMIN_TOKEN every route but /healthz and /readyz needs it; the dashboard page also takes ?token=", async () => {
    const s = fakeStream();
    const app = createAdminApp(s.options({ bindAddress: "0.0.0.0:8686", token: "s3cret" }));
    const bearer = { authorization: "Bearer s3cret" };
    for (const path of ["/healthz", "/readyz"]) expect((await app.request(path)).status).not.toBe(401);
    for (const path of ["/", "/status", "/metrics", "/nope"]) {
      const refused = await app.request(path);
      expect({ path, status: refused.status }).toEqual({ path, status: 401 });
      expect(((await refused.json()) as { error: string }).error).toContain(`GET ${path} needs the header Authorization: Bearer <STREAM_ADMIN_TOKEN>`);
      expect((await app.request(path, { headers: { authorization: "Bearer wrong" } })).status).toBe(401);
    }
    for (const path of ["/", "/status", "/metrics"]) expect((await app.request(path, { headers: bearer })).status).toBe(200);
    expect((await app.request("/?token=s3cret")).status).toBe(200);
    expect((await app.request("/status?token=s3cret")).status).toBe(401); // only the page takes it in the URL
    expect(((await (await app.request("/")).json()) as { error: string }).error).toContain("or open /?token=<STREAM_ADMIN_TOKEN>");
  });

  test("STREAM_ADMIN_METRICS_OPEN leaves /metrics open to a scraper without the token, and nothing else", async () => {
    const s = fakeStream();
    const app = createAdminApp(s.options({ bindAddress: "0.0.0.0:8686", token: "s3cret", metricsOpen: true }));
    expect((await app.request("/metrics")).status).toBe(200);
    expect((await app.request("/status")).status).toBe(401);
    expect((await app.request("/")).status).toBe(401);
  });

  test("bound to loopback, a request whose Host is not a loopback name or address gets 403 on every route", async () => {
    const s = fakeStream();
    const app = createAdminApp(s.options());
    for (const path of ["/", "/status", "/metrics", "/healthz", "/readyz"]) {
      const rebound = await app.request(`http://evil.example:8686${path}`);
      expect({ path, status: rebound.status }).toEqual({ path, status: 403 });
      expect((await app.request(`http://localhost:8686${path}`)).status).not.toBe(403);
    }
    expect(((await (await app.request("http://evil.example:8686/status")).json()) as { error: string }).error).toBe(
      'the admin server listens on loopback (127.0.0.1:8686) and answers requests for a loopback Host only, not "evil.example:8686"',
    );
    // Off loopback the Host is whatever name the network uses.
    expect((await createAdminApp(s.options({ bindAddress: "0.0.0.0:8686" })).request("http://stream-1.example:8686/status")).status).toBe(200);
  });

  test("POST /stop refused off loopback names the address it listens on and the fix", async () => {
    const app = createAdminApp(fakeStream().options({ bindAddress: "0.0.0.0:0" }));
    expect(((await (await app.request("/stop", { method: "POST" })).json()) as { error: string }).error).toBe(
      "POST /stop is refused: no STREAM_ADMIN_TOKEN is set and the admin server listens on 0.0.0.0 (every address), which is not loopback. Set STREAM_ADMIN_TOKEN and send it as Authorization: Bearer <token>, or bind STREAM_ADMIN_ADDR to 127.0.0.1.",
    );
  });

  test("GET / is a self-contained dashboard that polls status", async () => {
    const res = await createAdminApp(fakeStream().options()).request("/");
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toContain("text/html");
    expect(res.headers.get("content-security-policy")).toContain("default-src 'none'");
    const html = await res.text();
    expect(html).toContain('fetch("status"');
    expect(html).toContain("setTimeout(poll, 1000)");
    expect(html).not.toMatch(/<(script|link|img)[^>]+(src|href)=/); // no external assets
    expect(html).not.toContain("innerHTML");
  });

  test("an unknown path answers 404 listing the routes", async () => {
    const res = await createAdminApp(fakeStream().options()).request("/nope");
    expect(res.status).toBe(404);
    expect(((await res.json()) as { error: string }).error).toContain("/readyz");
  });
});

describe("the admin address", () => {
  test("STREAM_ADMIN_ADDR reads host:port, [v6]:port, :port and off", () => {
    expect(parseAdminAddress(undefined)).toEqual({ hostname: "127.0.0.1", port: 8686 });
    expect(parseAdminAddress("0.0.0.0:9000")).toEqual({ hostname: "0.0.0.0", port: 9000 });
    expect(parseAdminAddress("[::1]:0")).toEqual({ hostname: "::1", port: 0 });
    expect(parseAdminAddress(":8686")).toEqual({ hostname: "0.0.0.0", port: 8686 });
    expect(parseAdminAddress("off")).toBeUndefined();
    expect(() => parseAdminAddress("8686")).toThrow(/STREAM_ADMIN_ADDR="8686": use host:port/);
    expect(() => parseAdminAddress("127.0.0.1:70000")).toThrow(/STREAM_ADMIN_ADDR/);
  });

  test("loopback is localhost, 127.0.0.0/8 and ::1, with or without a port", () => {
    for (const a of ["localhost", "localhost:8686", "127.0.0.1", "127.255.0.9:1", "[::1]:8686", "::1", "::ffff:127.0.0.1"]) expect(isLoopback(a)).toBe(true);
    for (const a of ["0.0.0.0:8686", "10.0.0.1", "[::]:8686", "128.0.0.1", "127.0.0.256", "evil.example", "localhost.evil.example"]) expect(isLoopback(a)).toBe(false);
  });
});
