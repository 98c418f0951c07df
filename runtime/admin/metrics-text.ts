/**
 * The text `GET /metrics` answers: fv-streams' own families (src/metrics, read from the build
 * record, the Workers' recorder snapshots and the partition status at scrape time), followed
 * by prom-client's process metrics (CPU, resident memory, open fds, event-loop lag, GC, heap).
 *
 * prom-client loads and runs on Bun, Deno and Node alike, but it is built on node: modules
 * (cluster, perf_hooks, v8, fs), so it lives here in runtime/ and never in src/. It is not the
 * recorder of fv_* metrics: its registry is one thread's, and with STREAM_CONSUMERS > 1 the
 * counting happens in Workers, which record into plain-data snapshots (src/metrics/recorder.ts).
 */
import { collectDefaultMetrics, Registry } from "prom-client";
import { prometheusText, type ScrapeSources } from "../../src/metrics/index.ts";

export interface MetricsTextOptions {
  /** What to expose, read at every scrape. */
  sources(): ScrapeSources | Promise<ScrapeSources>;
  /** Append prom-client's process metrics (default true). */
  processMetrics?: boolean;
}

/**
 * @example
 * const metricsText = createMetricsText({ sources: () => ({ record: current, snapshot: merged(), partitions }) });
 * createAdminApp({ ..., metricsText });
 */
export function createMetricsText(options: MetricsTextOptions): () => Promise<string> {
  let registry: Registry | undefined;
  if (options.processMetrics !== false) {
    // A registry of our own: nothing lands in prom-client's global one (no module singletons).
    registry = new Registry();
    collectDefaultMetrics({ register: registry });
  }
  return async () => {
    const own = prometheusText(await options.sources());
    return registry ? own + (await registry.metrics()) : own;
  };
}
