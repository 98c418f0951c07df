import { afterEach, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Hono } from "hono";
import { type BuildRecord, BuildSignal, FvError, type LogLevel } from "../../../src/index.ts";
import { HttpHost, type HttpHostOptions } from "../../../runtime/hosts/http-host.ts";
import { createPlatformApp, createPlatformState, type PlatformOptions, type PlatformState } from "../../../runtime/platform/server.ts";
import { type Served, serveAdmin } from "../../../runtime/serve.ts";

const PIPELINE = `
name = "demo"
[brokers]
default = "kafka-1:9092,kafka-2:9092"
[datasets.trades]
topic = "demo-trades"
[datasets.trades.policy]
deadLetter = "demo-trades-dlq"
[[transforms]]
inputs = ["trades"]
output = "large-trades"
[[transforms.steps]]
op = "filter"
expression = "price > 100"
`;

const record = (status: BuildRecord["status"], consumed = 0): BuildRecord => ({
  id: "build-1",
  pipeline: "demo",
  kind: "stream",
  status,
  metrics: { consumed } as BuildRecord["metrics"],
});

/** A running reference platform on a free port, with what the test needs to stop and restart it. */
interface Platform {
  url: string;
  state: PlatformState;
  stop(): Promise<void>;
  /** Serves again on the same port, with the same builds. */
  restart(): Promise<void>;
}

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function startPlatform(options: Omit<PlatformOptions, "state" | "dir"> = {}): Promise<Platform> {
  const dir = mkdtempSync(join(tmpdir(), "fv-platform-"));
  writeFileSync(join(dir, "demo.toml"), PIPELINE);
  writeFileSync(join(dir, "broken.toml"), "name = ");
  const state = createPlatformState();
  const app = createPlatformApp({ ...options, dir, state });
  let server: Served | undefined = await serveAdmin(app, { hostname: "127.0.0.1", port: 0 });
  const port = server.port;
  const platform: Platform = {
    url: `http://127.0.0.1:${port}`,
    state,
    stop: async () => {
      await server?.close();
      server = undefined;
    },
    restart: async () => {
      server = await serveAdmin(app, { hostname: "127.0.0.1", port });
    },
  };
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }), () => platform.stop());
  return platform;
}

function hostFor(url: string, options: Partial<HttpHostOptions> = {}) {
  const logs: Array<[LogLevel, string]> = [];
  const host = new HttpHost({ baseUrl: url, backoffMs: 5, timeoutMs: 2000, log: (level, message) => logs.push([level, message]), ...options });
  return { host, logs };
}

/** A platform played by a function, for answers the reference platform would never give. */
async function fakePlatform(handler: (c: { path: string; method: string }) => Response | Promise<Response>) {
  const app = new Hono();
  app.all("*", (c) => handler({ path: new URL(c.req.url).pathname, method: c.req.method }));
  const server = await serveAdmin(app, { hostname: "127.0.0.1", port: 0 });
  cleanups.push(() => server.close());
  return `http://127.0.0.1:${server.port}`;
}

describe("the HTTP host against the reference platform", () => {
  test("answers the topology and the topic binding of a pipeline file", async () => {
    const platform = await startPlatform();
    const { host } = hostFor(platform.url + "/");
    expect(await host.topology("demo")).toEqual({
      stages: [{ inputs: ["trades"], output: "large-trades", steps: [{ op: "filter", expression: "price > 100" }] }],
    });
    expect(await host.resolveTopic("trades")).toEqual({
      apiName: "trades", topic: "demo-trades", brokers: "kafka-1:9092,kafka-2:9092", policy: { deadLetter: "demo-trades-dlq" }, source: "kafka", sink: "kafka",
    });
    // A dataset no file lists maps to a topic of its own name on the platform's brokers.
    expect(await host.resolveTopic("large-trades")).toMatchObject({ topic: "large-trades", brokers: "127.0.0.1:9092", policy: {} });
  });

  test("the heartbeat says Continue until the build is stopped on the platform, then Stop", async () => {
    const platform = await startPlatform();
    const { host } = hostFor(platform.url);
    expect(await host.heartbeat("build-1")).toBe(BuildSignal.Continue);
    const res = await fetch(`${platform.url}/builds/build-1/stop`, { method: "POST" });
    expect(res.status).toBe(202);
    expect(await host.heartbeat("build-1")).toBe(BuildSignal.Stop);
    expect(await host.heartbeat("build-2")).toBe(BuildSignal.Continue);
    expect(platform.state.builds.get("build-1")!.heartbeats).toBe(2);
  });

  test("the build record is stored and the latest one is read back", async () => {
    const platform = await startPlatform();
    const { host } = hostFor(platform.url);
    await host.putRecord("build-1", record("STARTING"));
    await host.putRecord("build-1", record("RUNNING", 42));
    const res = await fetch(`${platform.url}/builds/build-1/record`);
    expect(await res.json()).toEqual(record("RUNNING", 42));
    expect(platform.state.builds.get("build-1")!.records).toBe(2);
    expect(await host.flush()).toBe(true);
  });

  test("records put at the same time arrive in order: the platform keeps the newest", async () => {
    const platform = await startPlatform();
    const { host } = hostFor(platform.url);
    await Promise.all([1, 2, 3, 4, 5].map((n) => host.putRecord("build-1", record("RUNNING", n))));
    expect(platform.state.builds.get("build-1")!.record!.metrics!.consumed).toBe(5);
  });

  test("a stopped platform means ContinueUnreachable; the kept record is re-sent once it is back", async () => {
    const platform = await startPlatform();
    const { host, logs } = hostFor(platform.url, { retries: 1 });
    await host.putRecord("build-1", record("RUNNING", 1));
    await platform.stop();

    expect(await host.heartbeat("build-1")).toBe(BuildSignal.ContinueUnreachable);
    await host.putRecord("build-1", record("RUNNING", 2)); // resolves: kept, not lost
    await host.putRecord("build-1", record("STOPPED", 3)); // the latest replaces it
    expect(host.pendingRecord("build-1")).toEqual(record("STOPPED", 3));
    expect(await host.flush()).toBe(false);
    expect(logs.filter(([level]) => level === "warn")).toHaveLength(1); // one warning per outage, not one per call
    expect(logs[0]![1]).toContain("the control plane is unreachable");

    await platform.restart();
    expect(await host.heartbeat("build-1")).toBe(BuildSignal.Continue);
    expect(await host.flush()).toBe(true);
    expect(host.pendingRecord("build-1")).toBeUndefined();
    const res = await fetch(`${platform.url}/builds/build-1/record`);
    expect(await res.json()).toEqual(record("STOPPED", 3));
    expect(logs.at(-1)).toEqual(["info", `the control plane at ${platform.url} answers again; sending the kept build record`]);
  });

  test("a platform unreachable at start fails with HOST_UNAVAILABLE naming the URL and what to do", async () => {
    const platform = await startPlatform();
    await platform.stop();
    const { host } = hostFor(platform.url, { retries: 2 });
    const error = await host.topology("demo").then(() => undefined, (e: unknown) => e);
    expect(error).toBeInstanceOf(FvError);
    expect((error as FvError).code).toBe("HOST_UNAVAILABLE");
    expect((error as Error).message).toContain(`did not answer GET ${platform.url}/pipelines/demo/topology`);
    expect((error as Error).message).toContain("after 3 attempt(s)");
    expect((error as Error).message).toContain("--control-plane");
    await expect(host.resolveTopic("trades")).rejects.toThrow(/HOST_UNAVAILABLE|did not answer GET .*\/datasets\/trades/);
  });

  test("an unknown pipeline and a broken pipeline file are told apart", async () => {
    const platform = await startPlatform();
    const { host } = hostFor(platform.url);
    await expect(host.topology("nope")).rejects.toThrow(/has no pipeline "nope": GET .*\/pipelines\/nope\/topology answered 404/);
    await expect(host.topology("broken")).rejects.toThrow(/HTTP 422: .*broken.toml: not valid TOML/);
  });

  test("a platform with a token refuses a stream without it, and says which variable to set", async () => {
    const platform = await startPlatform({ token: "t0k3n" });
    await expect(hostFor(platform.url).host.topology("demo")).rejects.toThrow(/set FV_CONTROL_PLANE_TOKEN to a token it accepts \(none is set\)/);
    const host = HttpHost.fromEnv(platform.url, { FV_CONTROL_PLANE_TOKEN: "t0k3n" });
    expect((await host.topology("demo")).stages).toHaveLength(1);
    expect(await host.heartbeat("b")).toBe(BuildSignal.Continue);
  });
});

describe("the HTTP host checks every answer", () => {
  test("a binding without brokers fails naming the endpoint and the field", async () => {
    const url = await fakePlatform(() => Response.json({ topic: "t", policy: {} }));
    const error = await hostFor(url).host.resolveTopic("events").then(() => undefined, (e: unknown) => e);
    expect(error).toBeInstanceOf(FvError);
    expect((error as FvError).code).toBe("INVALID_SETTINGS");
    expect((error as Error).message).toBe(`the control plane answered GET ${url}/datasets/events with an invalid body: field "brokers": missing field "brokers"`);
    expect((error as FvError).context.field).toBe("brokers");
  });

  test("a topology with a malformed step fails naming the step's field", async () => {
    const url = await fakePlatform(() => Response.json({ stages: [{ inputs: ["a"], output: "b", steps: [{ expression: "x > 1" }] }] }));
    await expect(hostFor(url).host.topology("p")).rejects.toThrow(/GET .*\/pipelines\/p\/topology with an invalid body: field "stages.0.steps.0.op"/);
  });

  test("an answer that is not JSON fails as an invalid body", async () => {
    const url = await fakePlatform(() => new Response("<html>proxy error</html>", { status: 200 }));
    await expect(hostFor(url).host.topology("p")).rejects.toThrow(/invalid body: field "\(body\)"/);
  });

  test("a heartbeat answering an unknown signal is ContinueUnreachable, with a warning naming the field", async () => {
    const url = await fakePlatform(() => Response.json({ signal: "Pause" }));
    const { host, logs } = hostFor(url);
    expect(await host.heartbeat("b1")).toBe(BuildSignal.ContinueUnreachable);
    expect(logs[0]![1]).toContain(`POST ${url}/builds/b1/heartbeat with an invalid body: field "signal": must be "Continue" or "Stop"`);
  });

  test("5xx and 429 answers are retried with backoff; other 4xx are not", async () => {
    let calls = 0;
    const url = await fakePlatform(({ path }) => {
      calls++;
      if (path.startsWith("/pipelines")) return calls < 3 ? new Response("busy", { status: calls === 1 ? 503 : 429 }) : Response.json({ stages: [] });
      return new Response("no such build", { status: 400 });
    });
    const { host } = hostFor(url);
    expect(await host.topology("p")).toEqual({ stages: [] });
    expect(calls).toBe(3);
    calls = 0;
    await expect(host.putRecord("b1", record("RUNNING"))).rejects.toThrow(/refused the build record: PUT .*\/builds\/b1\/record answered HTTP 400: no such build/);
    expect(calls).toBe(1);
    expect(host.pendingRecord("b1")).toBeUndefined(); // refused for good: not kept
  });

  test("a request that takes too long counts as unreachable", async () => {
    const url = await fakePlatform(() => new Promise<Response>((resolve) => setTimeout(() => resolve(Response.json({ signal: "Continue" })), 500)));
    const { host, logs } = hostFor(url, { timeoutMs: 50 });
    expect(await host.heartbeat("b1")).toBe(BuildSignal.ContinueUnreachable);
    expect(logs[0]![1]).toContain("no answer within 50 ms");
  });

  test("a base URL that is not http(s) is refused at once", () => {
    expect(() => new HttpHost({ baseUrl: "platform:8700" })).toThrow(/not an http\(s\) URL/);
  });
});
