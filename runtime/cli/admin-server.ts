/**
 * The admin server of one `fv-streams run`: the admin app (runtime/admin/app.ts) fed with the
 * live build record, served on STREAM_ADMIN_ADDR for as long as the build runs.
 *
 *   STREAM_ADMIN_ADDR    host:port, [v6]:port or off   default 127.0.0.1:8686 (port 0: a free one)
 *   STREAM_ADMIN_TOKEN   bearer token POST /stop needs; without it /stop is loopback-only
 */
import type { BuildRecord, Logger } from "../../src/index.ts";
import type { PartitionStatus } from "../../src/metrics/index.ts";
import { parseAdminAddress } from "../admin/address.ts";
import { type AdminStatus, createAdminApp } from "../admin/app.ts";
import { createMetricsText } from "../admin/metrics-text.ts";
import type { MetricsSnapshot } from "../../src/metrics/index.ts";
import { serveAdmin } from "../serve.ts";

export interface AdminServerOptions {
  env: Record<string, string | undefined>;
  /** The record before the build reports one (STARTING). */
  initial: BuildRecord;
  /** Starts the ordered shutdown (POST /stop). */
  stop(): void;
  log: Logger;
}

export interface AdminServer {
  /** `http://host:port`, with the port actually listened on. */
  readonly url: string;
  /** The latest build record (and metric events): what /status, /readyz and /metrics answer from. */
  update(record: BuildRecord, metrics?: MetricsSnapshot): void;
  close(): Promise<void>;
}

/** The partitions a record says this process owns, as /status lists them. */
function partitionsOf(record: BuildRecord): PartitionStatus[] {
  const owned = record.metrics?.partitions ?? [];
  // The loop reports ownership, the next offset to process, lag (refreshed every 2 s) and state size.
  return owned.map((p) => ({
    topic: p.topic,
    partition: p.partition,
    state: p.restoring ? ("restoring" as const) : ("running" as const),
    ...(p.offset !== undefined ? { offset: p.offset } : {}),
    ...(p.lag !== undefined ? { lag: p.lag } : {}),
    ...(p.stateBytes !== undefined ? { stateBytes: p.stateBytes } : {}),
  }));
}

/**
 * Starts the admin server, or returns undefined when STREAM_ADMIN_ADDR is `off`. A bad address
 * or one already in use throws, naming STREAM_ADMIN_ADDR: a stream without its probes would be
 * restarted by its orchestrator anyway, so it is better not to start.
 *
 * @example
 * const admin = await startAdminServer({ env: process.env, initial, stop: () => abort.abort(), log });
 * await runStream(host, pipeline, build, initial, { onRecord: (r) => admin?.update(r) });
 * await admin?.close();
 */
export async function startAdminServer(options: AdminServerOptions): Promise<AdminServer | undefined> {
  const address = parseAdminAddress(options.env.STREAM_ADMIN_ADDR);
  if (!address) return undefined;
  let record = options.initial;
  let metrics: MetricsSnapshot | undefined;
  const status = (): AdminStatus => ({ record, partitions: partitionsOf(record) });
  const bindAddress = `${address.hostname.includes(":") ? `[${address.hostname}]` : address.hostname}:${address.port}`;
  const app = createAdminApp({
    status,
    metricsText: createMetricsText({ sources: () => ({ record, partitions: partitionsOf(record), ...(metrics ? { snapshot: metrics } : {}) }) }),
    stop: options.stop,
    token: options.env.STREAM_ADMIN_TOKEN,
    bindAddress,
  });
  let served;
  try {
    served = await serveAdmin(app, address);
  } catch (error) {
    const e = error as { code?: string; message?: string };
    throw new Error(
      `the admin server cannot listen on STREAM_ADMIN_ADDR=${bindAddress}: ${e.code ?? e.message ?? String(error)}. ` +
        `Set STREAM_ADMIN_ADDR to a free host:port (port 0 picks one), or to off.`,
      { cause: error },
    );
  }
  // 0.0.0.0 and :: listen everywhere; the URL a person on this machine opens is loopback.
  const shown = address.hostname === "0.0.0.0" ? "127.0.0.1" : address.hostname === "::" ? "[::1]" : address.hostname.includes(":") ? `[${address.hostname}]` : address.hostname;
  const url = `http://${shown}:${served.port}`;
  options.log("info", `admin listening on ${url}`, { url, dashboard: `${url}/`, stopNeedsToken: Boolean(options.env.STREAM_ADMIN_TOKEN?.trim()) });
  return {
    url,
    update(next, snapshot) {
      record = next;
      if (snapshot) metrics = snapshot;
    },
    close: () => served.close(),
  };
}
