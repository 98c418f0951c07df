/**
 * The admin server of one `fv-streams run`: the admin app (runtime/admin/app.ts) fed with the
 * live build record, served on STREAM_ADMIN_ADDR for as long as the build runs.
 *
 *   STREAM_ADMIN_ADDR    host:port, [v6]:port or off   default 127.0.0.1:8686 (port 0: a free one)
 *   STREAM_ADMIN_TOKEN   bearer token every route but /healthz and /readyz needs; without it
 *                        /stop is loopback-only
 *   STREAM_ADMIN_METRICS_OPEN  true: /metrics answers without the token   default false
 *   STREAM_ADMIN_ADVERTISE     the URL other processes of the pipeline reach this admin server at
 *                        (state reads are forwarded there)   default: the bound URL (the host
 *                        name when bound to every address)
 */
import { hostname } from "node:os";
import type { BuildRecord, Logger } from "../../src/index.ts";
import type { PartitionStatus } from "../../src/metrics/index.ts";
import { FvError } from "../../src/index.ts";
import { isLoopback, parseAdminAddress } from "../admin/address.ts";
import { type AdminStatus, createAdminApp } from "../admin/app.ts";
import { createMetricsText } from "../admin/metrics-text.ts";
import type { MetricsSnapshot } from "../../src/metrics/index.ts";
import type { LocalState } from "../../src/loop/state-query.ts";
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
  /** `http://host:port` as bound, with the port actually listened on (`http://0.0.0.0:41234` for every address). */
  readonly url: string;
  /** The URL to open on this machine: `url`, or its loopback form when bound to every address. */
  readonly localUrl: string;
  /**
   * The URL the pipeline's other processes reach this one at (queryable state forwarding):
   * STREAM_ADMIN_ADVERTISE, else `url`, with this host's name when bound to every address.
   */
  readonly advertised: string;
  /** The latest build record (and metric events): what /status, /readyz and /metrics answer from. */
  update(record: BuildRecord, metrics?: MetricsSnapshot): void;
  /** What the /state routes read, once the stream's loops run. */
  setState(state: LocalState): void;
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
    ...(p.stateKeys !== undefined ? { stateKeys: p.stateKeys } : {}),
    ...(p.storeKeys !== undefined ? { storeKeys: p.storeKeys } : {}),
    ...(p.storeBytesOnDisk !== undefined ? { storeBytesOnDisk: p.storeBytesOnDisk } : {}),
    ...(p.cacheKeys !== undefined ? { cacheKeys: p.cacheKeys, cacheHitRate: p.cacheHitRate ?? null } : {}),
    ...(p.restore ? { restore: p.restore } : {}),
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
  const token = options.env.STREAM_ADMIN_TOKEN?.trim() || undefined;
  const metricsOpen = (options.env.STREAM_ADMIN_METRICS_OPEN ?? "").trim() || "false";
  if (metricsOpen !== "true" && metricsOpen !== "false") {
    throw new FvError("INVALID_SETTINGS", `invalid setting STREAM_ADMIN_METRICS_OPEN=${JSON.stringify(metricsOpen)}: STREAM_ADMIN_METRICS_OPEN must be true or false`, {
      context: { field: "STREAM_ADMIN_METRICS_OPEN" },
    });
  }
  let record = options.initial;
  let metrics: MetricsSnapshot | undefined;
  let state: LocalState | undefined;
  let self = "";
  const status = (): AdminStatus => ({ record, partitions: partitionsOf(record) });
  const bindAddress = `${address.hostname.includes(":") ? `[${address.hostname}]` : address.hostname}:${address.port}`;
  const app = createAdminApp({
    status,
    metricsText: createMetricsText({ sources: () => ({ record, partitions: partitionsOf(record), ...(metrics ? { snapshot: metrics } : {}) }) }),
    stop: options.stop,
    token,
    metricsOpen: metricsOpen === "true",
    bindAddress,
    state: { state: () => state, self: () => self },
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
  const bracketed = address.hostname.includes(":") ? `[${address.hostname}]` : address.hostname;
  const bound = `http://${bracketed}:${served.port}`;
  // 0.0.0.0 and :: listen on every address; the URL a person on this machine opens is loopback.
  const everywhere = address.hostname === "0.0.0.0" || address.hostname === "::";
  const url = everywhere ? `http://${address.hostname === "::" ? "[::1]" : "127.0.0.1"}:${served.port}` : bound;
  const advertised = options.env.STREAM_ADMIN_ADVERTISE?.trim() || (everywhere ? `http://${hostname()}:${served.port}` : bound);
  self = advertised;
  const stop = token ? "token" : isLoopback(address.hostname) ? "loopback" : "refused";
  const stopSays = {
    token: "every route but /healthz and /readyz needs STREAM_ADMIN_TOKEN" + (metricsOpen === "true" ? " (/metrics is open: STREAM_ADMIN_METRICS_OPEN)" : ""),
    loopback: "POST /stop is taken from this machine without a token",
    refused: "POST /stop is refused (no STREAM_ADMIN_TOKEN, and this is not loopback); reads are open to the network",
  }[stop];
  const dashboard = `${url}/${token ? "?token=<STREAM_ADMIN_TOKEN>" : ""}`;
  const where = everywhere ? `${bound} (every address; on this machine: ${dashboard})` : dashboard;
  options.log("info", `admin listening on ${where}; ${stopSays}`, { url, bind: `${bracketed}:${served.port}`, dashboard, stop });
  return {
    url: bound,
    localUrl: url,
    advertised,
    update(next, snapshot) {
      record = next;
      if (snapshot) metrics = snapshot;
    },
    setState(next) {
      state = next;
    },
    close: () => served.close(),
  };
}
