import { describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { createAdminApp } from "../../../runtime/admin/app.ts";
import { serveAdmin as serveOnNode } from "../../../runtime/node/serve.ts";
import { currentRuntime, type ServeAdmin, serveAdmin } from "../../../runtime/serve.ts";
import { DENO, ROOT } from "../../helpers/cli.ts";

const app = () =>
  createAdminApp({
    status: () => ({ record: { id: "b1", pipeline: "demo", kind: "stream", status: "RUNNING" }, partitions: [] }),
    metricsText: () => "",
    stop: () => {},
    bindAddress: "127.0.0.1:0",
  });

async function servesThenReleases(serve: ServeAdmin) {
  const server = await serve(app(), { hostname: "127.0.0.1", port: 0 });
  expect(server.port).toBeGreaterThan(0);
  const res = await fetch(`http://127.0.0.1:${server.port}/healthz`);
  expect(res.status).toBe(200);
  expect(await res.json()).toEqual({ status: "ok" });
  // The keep-alive connection of that fetch must not hold close() open.
  await server.close();
  await server.close(); // idempotent
  await expect(fetch(`http://127.0.0.1:${server.port}/healthz`)).rejects.toThrow();
}

describe("serving the admin app", () => {
  test("runtime/serve.ts picks Bun.serve on Bun, serves on a free port and closes", async () => {
    expect(currentRuntime()).toBe("bun");
    await servesThenReleases(serveAdmin);
  });

  test("the Node adapter (@hono/node-server) serves and closes", async () => {
    await servesThenReleases(serveOnNode);
  });

  test("runtime/serve.ts picks Deno.serve on Deno, serves health, readiness and metrics, and closes", () => {
    const result = spawnSync(DENO, ["run", "-A", join(ROOT, "test/runtime/admin/serve.deno.ts")], {
      cwd: ROOT,
      encoding: "utf8",
      env: { ...process.env, NO_COLOR: "1" },
      timeout: 60_000,
    });
    expect(result.stderr).toBe("");
    expect(result.status).toBe(0);
    const seen = JSON.parse(result.stdout.trim().split("\n").pop()!);
    expect(seen.runtime).toBe("deno");
    expect(seen.port).toBeGreaterThan(0);
    expect(seen.health).toEqual({ status: 200, body: { status: "ok" } });
    expect(seen.ready).toBe(200); // RUNNING, one partition assigned
    expect(seen.metricsType).toBe("text/plain; version=0.0.4; charset=utf-8");
    expect(seen.hasBuildInfo).toBe(true);
    expect(seen.hasProcessMetrics).toBe(true);
    expect(seen.refusedAfterClose).toBe(true);
  });
});
