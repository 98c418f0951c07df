/**
 * The admin app: what an operator, a probe or a scraper asks a running stream.
 *
 *   GET  /          live dashboard (self-contained page, polls /status every second)
 *   GET  /healthz   liveness: 200 {"status":"ok"} while the process answers
 *   GET  /readyz    readiness: 200 when partitions are assigned, state restored and the stream
 *                   flowing; 503 {"status":"not ready","reason":…} otherwise
 *   GET  /metrics   Prometheus text, format 0.0.4
 *   GET  /status    the build record, per-partition offset / lag / state size, per-stage figures
 *   POST /stop      ordered shutdown (Authorization: Bearer <STREAM_ADMIN_TOKEN>)
 *   GET  /state...  queryable state (runtime/admin/state-routes.ts, docs/queryable-state.md)
 *
 * With a token, every route but the probes (/healthz, /readyz) needs it, and /metrics too unless
 * `metricsOpen`; the dashboard page also takes it as `/?token=…` and sends it on its polls.
 * Bound to loopback, a request whose Host is not a loopback name or address gets 403: a web page
 * in a browser on this machine cannot read the admin server through a rebinding DNS name.
 *
 * The app is a plain Hono app: serve it with `serveAdmin` from runtime/serve.ts.
 */
import { Hono } from "hono";
import type { BuildRecord } from "../../src/index.ts";
import { PROMETHEUS_CONTENT_TYPE, type PartitionStatus } from "../../src/metrics/index.ts";
import { hostOf, isLoopback } from "./address.ts";
import { DASHBOARD_HTML } from "./dashboard.ts";
import { addStateRoutes, type StateRoutesOptions } from "./state-routes.ts";

export type { PartitionStatus };

/** The shape of one stage, as the build record lists it (`record.stages`) for the dashboard. */
export interface StageShape {
  index: number;
  inputs: string[];
  output: string;
  /** The ops of the stage's steps, in order. */
  steps: string[];
}

/** Live figures of one stage, when the loop has them. */
export interface StageStatus {
  index: number;
  consumed?: number;
  emitted?: number;
  dropped?: number;
  poison?: number;
}

/** What `/status` answers. `record.stages` (StageShape[]) draws the stage graph. */
export interface AdminStatus {
  record: BuildRecord;
  partitions: PartitionStatus[];
  stages?: StageStatus[];
}

export interface Readiness {
  ready: boolean;
  /** Why not, in words an operator acts on. */
  reason?: string;
}

export interface AdminAppOptions {
  status(): AdminStatus;
  /** Default: `readinessOf(status())`. A boolean false is explained from the status. */
  ready?(): boolean | Readiness;
  metricsText(): Promise<string> | string;
  /** Starts the ordered shutdown; called once, however many times /stop is posted. */
  stop(): void;
  /** STREAM_ADMIN_TOKEN: when set, every route but /healthz and /readyz needs `Authorization: Bearer <token>`. */
  token?: string;
  /** STREAM_ADMIN_METRICS_OPEN: /metrics answers without the token, as Prometheus scrapers expect. */
  metricsOpen?: boolean;
  /** Where the server listens (`host:port`): without a token, /stop is only taken on loopback. */
  bindAddress: string;
  /** Queryable state: the /state routes (runtime/admin/state-routes.ts). */
  state?: StateRoutesOptions;
}

/**
 * Ready when the build is RUNNING, owns at least one partition, restores none, and no http step's
 * circuit breaker is open.
 *
 * @example
 * readinessOf({ record: { id: "b", pipeline: "p", kind: "stream", status: "STARTING" }, partitions: [] });
 * // { ready: false, reason: "the build is STARTING, not RUNNING" }
 */
export function readinessOf(status: AdminStatus): Readiness {
  if (status.record.status !== "RUNNING") return { ready: false, reason: `the build is ${status.record.status}, not RUNNING` };
  if (status.partitions.length === 0) {
    return {
      ready: false,
      reason: "no partitions assigned to this process: the group is joining or rebalancing, or the group has more consumers than the inputs have partitions",
    };
  }
  const restoring = status.partitions.filter((p) => p.state === "restoring");
  if (restoring.length > 0) return { ready: false, reason: `restoring state of ${restoring.map((p) => `${p.topic}-${p.partition}`).join(", ")}` };
  const breakers = status.record.metrics?.httpBreakersOpen ?? 0;
  if (breakers > 0) {
    return {
      ready: false,
      reason: `${breakers} http step circuit breaker(s) open: the service failed too many calls in a row; rows go to the dead-letter topic as circuit_open (onOpen = "deadLetter") or the stream waits (onOpen = "wait") until the cool-down ends and a probe call is tried`,
    };
  }
  const waiting = Object.entries(status.record.metrics?.sinksWaiting ?? {});
  if (waiting.length > 0) {
    return { ready: false, reason: `the stream waits for ${waiting.map(([dataset, why]) => `sink "${dataset}" (${why})`).join("; ")}: it retries with backoff and goes on once the sink answers` };
  }
  return { ready: true };
}

/** Compares in time independent of where the strings differ (the length still shows). */
function sameSecret(given: string, expected: string): boolean {
  const a = new TextEncoder().encode(given);
  const b = new TextEncoder().encode(expected);
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i]! ^ b[i]!;
  return diff === 0;
}

/** JSON that tolerates the bigint offsets a Kafka client hands out. */
const toJson = (value: unknown): string =>
  JSON.stringify(value, (_key, v) => (typeof v === "bigint" ? (Number.isSafeInteger(Number(v)) ? Number(v) : v.toString()) : v));

/**
 * @example
 * const app = createAdminApp({ status, metricsText, stop: () => abort.abort(), token: env.STREAM_ADMIN_TOKEN, bindAddress: "127.0.0.1:8686" });
 * const server = await serveAdmin(app, { hostname: "127.0.0.1", port: 8686 });
 */
export function createAdminApp(options: AdminAppOptions): Hono {
  const app = new Hono();
  const token = options.token?.trim() || undefined;
  const loopbackOnly = isLoopback(options.bindAddress);
  let stopping = false;

  const noStore = { "cache-control": "no-store" };
  const json = (body: unknown, status: number, headers: Record<string, string> = {}) =>
    new Response(toJson(body), { status, headers: { "content-type": "application/json; charset=utf-8", ...noStore, ...headers } });

  // 1. On loopback, only requests for a loopback Host (DNS rebinding points a foreign name here).
  app.use("*", async (c, next) => {
    if (!loopbackOnly) return next();
    const host = c.req.header("host") ?? new URL(c.req.url).host;
    if (host && !isLoopback(host)) {
      return json({ error: `the admin server listens on loopback (${options.bindAddress}) and answers requests for a loopback Host only, not ${JSON.stringify(host)}` }, 403);
    }
    return next();
  });

  // 2. With a token, everything but the probes (and /metrics when left open) needs it.
  const open = new Set(["/healthz", "/readyz", ...(options.metricsOpen ? ["/metrics"] : [])]);
  app.use("*", async (c, next) => {
    if (!token || open.has(c.req.path)) return next();
    const header = c.req.header("authorization") ?? "";
    // The page, and a state watch (an EventSource sends no headers), also take it as ?token=.
    const inQuery = c.req.path === "/" || /^\/state\/[^/]+\/keys\/[^/]+\/watch$/.test(c.req.path);
    const given = /^Bearer\s+(.+)$/i.exec(header)?.[1]?.trim() ?? (inQuery ? c.req.query("token") : undefined);
    if (given && sameSecret(given, token)) return next();
    const how = c.req.path === "/" ? "the header Authorization: Bearer <STREAM_ADMIN_TOKEN>, or open /?token=<STREAM_ADMIN_TOKEN>" : "the header Authorization: Bearer <STREAM_ADMIN_TOKEN>";
    return json({ error: `${c.req.method} ${c.req.path} needs ${how}` }, 401, { "www-authenticate": 'Bearer realm="fv-streams admin"' });
  });

  app.get("/healthz", () => json({ status: "ok" }, 200));

  app.get("/readyz", () => {
    const answer = options.ready ? options.ready() : readinessOf(options.status());
    let readiness = typeof answer === "boolean" ? { ready: answer } : answer;
    if (!readiness.ready && !readiness.reason) {
      const derived = readinessOf(options.status());
      readiness = { ready: false, reason: derived.reason ?? "the stream is not flowing" };
    }
    return readiness.ready ? json({ status: "ready" }, 200) : json({ status: "not ready", reason: readiness.reason }, 503);
  });

  app.get("/metrics", async () => {
    const text = await options.metricsText();
    return new Response(text, { status: 200, headers: { "content-type": PROMETHEUS_CONTENT_TYPE, ...noStore } });
  });

  app.get("/status", () => json(options.status(), 200));

  app.post("/stop", (c) => {
    // With a token, step 2 checked it. Without one, /stop is taken on loopback only.
    if (!token) {
      if (!loopbackOnly) {
        const host = hostOf(options.bindAddress);
        const where = host === "0.0.0.0" || host === "::" || host === "" ? `${host || "0.0.0.0"} (every address)` : host;
        return json(
          { error: `POST /stop is refused: no STREAM_ADMIN_TOKEN is set and the admin server listens on ${where}, which is not loopback. Set STREAM_ADMIN_TOKEN and send it as Authorization: Bearer <token>, or bind STREAM_ADMIN_ADDR to 127.0.0.1.` },
          403,
        );
      }
      // Loopback without a token: only this machine reaches us (step 1 checked the Host), but so
      // does any web page open in its browser. Refuse what a browser sends cross-site: an Origin.
      const origin = c.req.header("origin");
      const originHost = origin ? (URL.canParse(origin) ? new URL(origin).host : origin) : undefined;
      if (originHost !== undefined && !isLoopback(originHost)) {
        return json({ error: "POST /stop without a token is only taken from this machine (loopback Host, no cross-site Origin)" }, 403);
      }
    }
    if (!stopping) {
      stopping = true;
      options.stop();
    }
    return json({ status: "stopping" }, 202);
  });

  app.get("/", () =>
    new Response(DASHBOARD_HTML, {
      headers: {
        "content-type": "text/html; charset=utf-8",
        ...noStore,
        // The page is one document: inline style and script, data from /status on this origin only.
        "content-security-policy": "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        "x-content-type-options": "nosniff",
      },
    }),
  );

  if (options.state) addStateRoutes(app, options.state);

  app.notFound(() => json({ error: `not found: the admin server answers GET /, /healthz, /readyz, /metrics, /status${options.state ? ", /state, /state/{stage}/keys/{key}, /state/{stage}/scan" : ""} and POST /stop` }, 404));
  app.onError((error) => json({ error: (error as Error).message ?? String(error) }, 500));
  return app;
}
