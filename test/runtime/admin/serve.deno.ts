/**
 * Run by serve.test.ts as `deno run -A`: serves the admin app with runtime/serve.ts on Deno,
 * fetches it, closes, and prints what it saw as one JSON line.
 */
import { createAdminApp } from "../../../runtime/admin/app.ts";
import { createMetricsText } from "../../../runtime/admin/metrics-text.ts";
import { currentRuntime, serveAdmin } from "../../../runtime/serve.ts";

const record = { id: "b1", pipeline: "demo", kind: "stream" as const, status: "RUNNING" as const };
const app = createAdminApp({
  status: () => ({ record, partitions: [{ topic: "t", partition: 0 }] }),
  metricsText: createMetricsText({ sources: () => ({ record }) }),
  stop: () => {},
  bindAddress: "127.0.0.1:0",
});
const server = await serveAdmin(app, { hostname: "127.0.0.1", port: 0 });
const base = `http://127.0.0.1:${server.port}`;
const health = await fetch(`${base}/healthz`);
const ready = await fetch(`${base}/readyz`);
const metrics = await fetch(`${base}/metrics`);
const metricsText = await metrics.text();
const result = {
  runtime: currentRuntime(),
  port: server.port,
  health: { status: health.status, body: await health.json() },
  ready: ready.status,
  metricsType: metrics.headers.get("content-type"),
  hasBuildInfo: metricsText.includes('fv_build_info{pipeline="demo",build="b1"'),
  hasProcessMetrics: metricsText.includes("process_resident_memory_bytes"),
};
await server.close();
let refused = false;
try {
  await fetch(`${base}/healthz`);
} catch {
  refused = true;
}
console.log(JSON.stringify({ ...result, refusedAfterClose: refused }));
