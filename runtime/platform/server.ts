#!/usr/bin/env bun
/**
 * A small reference platform: the HTTP side of docs/control-plane.md, enough to run
 * `fv-streams run --control-plane URL` against, and what the HttpHost tests talk to.
 *
 *   bun runtime/platform/server.ts --dir pipelines/ [--store store.json] [--port 8700]
 *       [--hostname 127.0.0.1] [--brokers 127.0.0.1:9092]
 *   deno run -A runtime/platform/server.ts --dir pipelines/
 *
 * FV_PLATFORM_TOKEN, when set, is the bearer token every request must carry (the streams set
 * the same value as FV_CONTROL_PLANE_TOKEN). Builds live in memory: a restart forgets them.
 */
import { readFileSync } from "node:fs";
import process from "node:process";
import { Hono } from "hono";
import * as v from "valibot";
import { type BuildRecord, BuildSignal, FvError } from "../../src/index.ts";
import { serveAdmin } from "../serve.ts";
import { bindingOf, type Catalog, wireBinding, combinedCatalog, parsePlatformStore, type PlatformStore, storeCatalog, tomlFolderCatalog } from "./catalog.ts";

/** What the platform knows of one build. */
export interface BuildEntry {
  id: string;
  /** Set by POST /builds/{id}/stop: the next heartbeat answers Stop. */
  stopRequested: boolean;
  heartbeats: number;
  lastHeartbeatAt?: string;
  /** The latest record PUT, and how many were. */
  record?: BuildRecord;
  records: number;
}

/** The platform's builds. Pass the same state to a restarted app to keep them (tests do). */
export interface PlatformState {
  builds: Map<string, BuildEntry>;
}

export const createPlatformState = (): PlatformState => ({ builds: new Map() });

export interface PlatformOptions {
  /** A folder of pipeline TOML files. */
  dir?: string;
  /** Pipelines and datasets as JSON (asked before the folder). */
  store?: PlatformStore;
  /** Brokers of a dataset that names none. Default 127.0.0.1:9092. */
  brokers?: string;
  /** When set, every request needs `Authorization: Bearer <token>`. */
  token?: string;
  state?: PlatformState;
}

const recordSchema = v.looseObject({
  id: v.optional(v.string()),
  pipeline: v.string(),
  kind: v.literal("stream", 'must be "stream"'),
  status: v.picklist(["STARTING", "RUNNING", "STOPPED", "FAILED"], "must be STARTING, RUNNING, STOPPED or FAILED"),
});

/**
 * @example
 * const state = createPlatformState();
 * const app = createPlatformApp({ dir: "examples", state });
 * const server = await serveAdmin(app, { hostname: "127.0.0.1", port: 0 });
 */
export function createPlatformApp(options: PlatformOptions): Hono {
  if (!options.dir && !options.store) throw new FvError("INVALID_SETTINGS", "the platform needs a folder of pipeline files (--dir) or a JSON store (--store)");
  const brokers = options.brokers ?? "127.0.0.1:9092";
  const catalogs: Catalog[] = [];
  if (options.store) catalogs.push(storeCatalog(options.store, brokers));
  if (options.dir) catalogs.push(tomlFolderCatalog(options.dir, brokers));
  const catalog = combinedCatalog(catalogs);
  const state = options.state ?? createPlatformState();
  const token = options.token?.trim() || undefined;

  const build = (id: string): BuildEntry => {
    let entry = state.builds.get(id);
    if (!entry) state.builds.set(id, (entry = { id, stopRequested: false, heartbeats: 0, records: 0 }));
    return entry;
  };

  const app = new Hono();
  app.use(async (c, next) => {
    if (token && c.req.header("authorization") !== `Bearer ${token}`) {
      return c.json({ error: "this platform needs Authorization: Bearer <token> (the stream's FV_CONTROL_PLANE_TOKEN)" }, 401);
    }
    await next();
  });

  app.get("/pipelines", (c) => c.json({ pipelines: catalog.pipelines() }));

  app.get("/pipelines/:id/topology", (c) => {
    const id = c.req.param("id");
    try {
      const topology = catalog.topology(id);
      return topology ? c.json(topology) : c.json({ error: `no pipeline "${id}" here; known: ${catalog.pipelines().join(", ") || "none"}` }, 404);
    } catch (error) {
      return c.json({ error: (error as Error).message }, 422);
    }
  });

  app.get("/datasets/:name", (c) => {
    const name = c.req.param("name");
    return c.json(wireBinding(catalog.binding(name) ?? bindingOf(name, undefined, brokers)));
  });

  app.post("/builds/:id/heartbeat", (c) => {
    const entry = build(c.req.param("id"));
    entry.heartbeats++;
    entry.lastHeartbeatAt = new Date().toISOString();
    return c.json({ signal: entry.stopRequested ? BuildSignal.Stop : BuildSignal.Continue });
  });

  app.post("/builds/:id/stop", (c) => {
    build(c.req.param("id")).stopRequested = true;
    return c.json({ status: "stop requested: the next heartbeat answers Stop" }, 202);
  });

  app.put("/builds/:id/record", async (c) => {
    let body: unknown;
    try {
      body = await c.req.json();
    } catch {
      return c.json({ error: "the body must be a JSON build record" }, 400);
    }
    const parsed = v.safeParse(recordSchema, body);
    if (!parsed.success) {
      const issue = parsed.issues[0]!;
      return c.json({ error: `invalid build record: field "${v.getDotPath(issue) ?? "(body)"}": ${issue.message}` }, 422);
    }
    const entry = build(c.req.param("id"));
    entry.record = parsed.output as BuildRecord;
    entry.records++;
    return c.body(null, 204);
  });

  app.get("/builds/:id/record", (c) => {
    const record = state.builds.get(c.req.param("id"))?.record;
    return record ? c.json(record) : c.json({ error: `no record of build "${c.req.param("id")}" yet` }, 404);
  });

  app.get("/builds", (c) =>
    c.json({
      builds: [...state.builds.values()].map((b) => ({
        id: b.id,
        pipeline: b.record?.pipeline,
        status: b.record?.status,
        stopRequested: b.stopRequested,
        heartbeats: b.heartbeats,
        lastHeartbeatAt: b.lastHeartbeatAt,
        records: b.records,
      })),
    }),
  );

  app.notFound((c) => c.json({ error: `not found: ${c.req.method} ${new URL(c.req.url).pathname}` }, 404));
  app.onError((error, c) => c.json({ error: (error as Error).message }, 500));
  return app;
}

const USAGE = `usage: server.ts --dir DIR [--store FILE] [--port 8700] [--hostname 127.0.0.1] [--brokers 127.0.0.1:9092]
  FV_PLATFORM_TOKEN   bearer token every request must carry (optional)`;

async function main(argv: string[]): Promise<number> {
  const flags = new Map<string, string>();
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i]!;
    if (flag === "--help" || flag === "-h") {
      process.stderr.write(USAGE + "\n");
      return 0;
    }
    const value = argv[i + 1];
    if (!["--dir", "--store", "--port", "--hostname", "--brokers"].includes(flag) || value === undefined) {
      process.stderr.write(`${value === undefined ? `${flag} needs a value` : `unknown flag ${flag}`}\n${USAGE}\n`);
      return 2;
    }
    flags.set(flag, value);
    i++;
  }
  const port = Number(flags.get("--port") ?? "8700");
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    process.stderr.write(`--port must be a port number (0-65535), not ${flags.get("--port")}\n`);
    return 2;
  }
  const storePath = flags.get("--store");
  const store = storePath ? parsePlatformStore(JSON.parse(readFileSync(storePath, "utf8")), storePath) : undefined;
  const app = createPlatformApp({ dir: flags.get("--dir"), store, brokers: flags.get("--brokers"), token: process.env.FV_PLATFORM_TOKEN });
  const hostname = flags.get("--hostname") ?? "127.0.0.1";
  const server = await serveAdmin(app, { hostname, port });
  process.stderr.write(`fv-streams platform on http://${hostname.includes(":") ? `[${hostname}]` : hostname}:${server.port} (${[flags.get("--dir"), storePath].filter(Boolean).join(", ")})\n`);
  const stop = () => void server.close().then(() => process.exit(0));
  process.on("SIGINT", stop);
  process.on("SIGTERM", stop);
  return -1; // keep serving
}

if (import.meta.main) {
  main(process.argv.slice(2)).then(
    (code) => code >= 0 && process.exit(code),
    (error) => {
      process.stderr.write(`platform: ${(error as Error)?.message ?? String(error)}\n`);
      process.exit(1);
    },
  );
}
