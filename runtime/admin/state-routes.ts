/**
 * Queryable state on the admin server (docs/queryable-state.md):
 *
 *   GET /state                                the stateful stages, and the partitions this process holds
 *   GET /state/{stage}/keys/{key}             one key's current value; ?k=<col>:<value> (repeated) for a
 *                                             composite key, ?from=&to= (event time, ms) for windows,
 *                                             ?minPosition=&waitMs= for read-your-writes
 *   GET /state/{stage}/scan?prefix=&limit=&cursor=   keys in key order, with their values
 *   GET /state/{stage}/keys/{key}/watch       Server-Sent Events: the value, then each change
 *
 * `{stage}` is 1-based. Each answer says where it came from (`owner`: this process and its admin
 * URL), the `partition` and the `position`: the next input offset of that partition the state
 * reflects. These routes sit behind the app's token check (STREAM_ADMIN_TOKEN).
 */
import type { Context, Hono } from "hono";
import { streamSSE } from "hono/streaming";
import type { Row } from "../../src/expr/index.ts";
import { inRange, type LocalState, type StateRead, type StateStage } from "../../src/loop/state-query.ts";

export interface StateRoutesOptions {
  /** The state of this process's loops, once the stream runs (undefined before, or in a build that is not running). */
  state(): LocalState | undefined;
  /** This process's admin URL, as answers name their owner. */
  self(): string;
  /** How often a watch looks for a change (default 100 ms). */
  watchIntervalMs?: number;
}

const MAX_SCAN_LIMIT = 10_000;
const DEFAULT_SCAN_LIMIT = 100;
const MAX_WAIT_MS = 30_000;

class BadRequest extends Error {}

/** A value as given in a URL: JSON when it parses (42, "x", true, [..]), else the text itself. */
function parseValue(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

function integerParam(c: Context, name: string, min: number, max: number): number | undefined {
  const raw = c.req.query(name);
  if (raw === undefined || raw === "") return undefined;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min || n > max) throw new BadRequest(`${name}=${JSON.stringify(raw)} is not an integer from ${min} to ${max}`);
  return n;
}

function numberParam(c: Context, name: string): number | undefined {
  const raw = c.req.query(name);
  if (raw === undefined || raw === "") return undefined;
  const n = Number(raw);
  if (!Number.isFinite(n)) throw new BadRequest(`${name}=${JSON.stringify(raw)} is not a number (event time in epoch ms)`);
  return n;
}

/** The stage a route names, which must exist and be queryable. */
function stageOf(state: LocalState, raw: string): StateStage {
  const n = Number(raw);
  const stateful = state.stages.map((s) => s.stage);
  if (!/^\d+$/.test(raw) || !Number.isInteger(n) || n < 1) throw new BadRequest(`stage ${JSON.stringify(raw)} is not a stage number (1-based); the stateful stages are ${stateful.join(", ") || "none"}`);
  const stage = state.stages.find((s) => s.stage === n);
  if (!stage) throw new BadRequest(`stage ${n} has no state: the stateful stages of this pipeline are ${stateful.join(", ") || "none"}`);
  if (!stage.queryable) throw new BadRequest(`stage ${n} (${stage.op}) buffers rows rather than keeping a value per key: it cannot be read by key`);
  return stage;
}

/**
 * The group key a request names: `?k=<col>:<value>` once per key column, or the path's {key}:
 * the key's JSON (a list of values in column order, or one value for a one-column key), or the
 * plain text of a one-column key.
 */
export function keyOf(stage: StateStage, pathKey: string, ks: string[]): unknown[] {
  const columns = stage.keyColumns;
  if (ks.length > 0) {
    const values = new Map<string, unknown>();
    for (const k of ks) {
      const colon = k.indexOf(":");
      if (colon <= 0) throw new BadRequest(`k=${JSON.stringify(k)} is not <column>:<value>`);
      const column = k.slice(0, colon);
      if (!columns.includes(column)) throw new BadRequest(`k names column ${JSON.stringify(column)}, which is not a key column of stage ${stage.stage} (its key columns: ${columns.join(", ") || "none"})`);
      values.set(column, parseValue(k.slice(colon + 1)));
    }
    const missing = columns.filter((c) => !values.has(c));
    if (missing.length > 0) throw new BadRequest(`k gives no value for key column(s) ${missing.join(", ")} of stage ${stage.stage}`);
    return columns.map((c) => values.get(c));
  }
  if (columns.length === 0) return [];
  const parsed = parseValue(pathKey);
  if (columns.length === 1) return [Array.isArray(parsed) && parsed.length === 1 ? parsed[0] : parsed];
  if (!Array.isArray(parsed) || parsed.length !== columns.length) {
    throw new BadRequest(`key ${JSON.stringify(pathKey)} does not give the ${columns.length} key columns of stage ${stage.stage} (${columns.join(", ")}): send the key's JSON list, e.g. ${JSON.stringify(columns.map((c) => `<${c}>`))}, or ?k=<column>:<value> for each`);
  }
  return parsed;
}

/** The key's values as an object by column. */
const keyObject = (stage: StateStage, key: readonly unknown[]) => Object.fromEntries(stage.keyColumns.map((c, i) => [c, key[i]]));

const windowed = (stage: StateStage) => stage.window !== undefined || stage.session !== undefined;

/** What one key's answer carries besides its provenance. */
function valueBody(stage: StateStage, rows: Row[]): Record<string, unknown> {
  return windowed(stage) ? { windows: rows } : { value: rows[0] ?? null };
}

/** Reads a key here; a plain-text key that reads nothing is tried as the string it was written as. */
async function readKey(state: LocalState, stage: StateStage, key: unknown[], pathKey: string, fromK: boolean): Promise<{ key: unknown[]; read: StateRead } | undefined> {
  const candidates = [key];
  if (!fromK && stage.keyColumns.length === 1 && typeof key[0] !== "string") candidates.push([pathKey]);
  for (const candidate of candidates) {
    const answers = await state.ask({ kind: "read", stage: stage.stage - 1, group: candidate });
    const read = answers.flatMap((a) => a.reads)[0];
    if (read) return { key: candidate, read };
  }
  return undefined;
}

export function addStateRoutes(app: Hono, options: StateRoutesOptions): void {
  const json = (body: unknown, status: number) =>
    new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json; charset=utf-8", "cache-control": "no-store" } });
  const wrap = (handler: (c: Context, state: LocalState) => Promise<Response>) => async (c: Context) => {
    const state = options.state();
    if (!state) return json({ error: "the stream is not running yet: state is readable once its consumers have started" }, 503);
    try {
      return await handler(c, state);
    } catch (error) {
      if (error instanceof BadRequest) return json({ error: error.message }, 400);
      throw error;
    }
  };
  const owner = () => ({ process: options.self(), admin: options.self() });

  app.get("/state", wrap(async (_c, state) => {
    const stages = await Promise.all(state.stages.map(async (stage) => {
      const answers = await state.ask({ kind: "partitions", stage: stage.stage - 1 });
      const partitions = answers.flatMap((a) => a.partitions).sort((a, b) => a.partition - b.partition);
      return { ...stage, partitions };
    }));
    return json({ owner: owner(), stages }, 200);
  }));

  app.get("/state/:stage/keys/:key", wrap(async (c, state) => {
    const stage = stageOf(state, c.req.param("stage") ?? "");
    const pathKey = c.req.param("key") ?? "";
    const ks = c.req.queries("k") ?? [];
    const key = keyOf(stage, pathKey, ks);
    const from = numberParam(c, "from");
    const to = numberParam(c, "to");
    const minPosition = integerParam(c, "minPosition", 0, Number.MAX_SAFE_INTEGER);
    const waitMs = integerParam(c, "waitMs", 0, MAX_WAIT_MS) ?? 0;
    const until = Date.now() + waitMs;
    for (;;) {
      const found = await readKey(state, stage, key, pathKey, ks.length > 0);
      if (!found) {
        if (minPosition === undefined || Date.now() >= until) return json({ error: `stage ${stage.stage} holds no state for key ${JSON.stringify(keyObject(stage, key))} in this process`, stage: stage.stage, key: keyObject(stage, key), owner: owner() }, 404);
      } else if (minPosition === undefined || (found.read.position ?? -1) >= minPosition) {
        const rows = inRange(found.read.rows, from, to);
        return json({ stage: stage.stage, key: keyObject(stage, found.key), ...valueBody(stage, rows), owner: owner(), partition: found.read.partition, position: found.read.position, standby: false, stale: false }, 200);
      } else if (Date.now() >= until) {
        return json({ error: `the state of key ${JSON.stringify(keyObject(stage, key))} is at position ${found.read.position}, below minPosition ${minPosition}, after waiting ${waitMs} ms`, position: found.read.position, partition: found.read.partition, owner: owner() }, 409);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }));

  app.get("/state/:stage/scan", wrap(async (c, state) => {
    const stage = stageOf(state, c.req.param("stage") ?? "");
    const prefix = c.req.query("prefix") ?? "";
    const limit = integerParam(c, "limit", 1, MAX_SCAN_LIMIT) ?? DEFAULT_SCAN_LIMIT;
    const cursor = c.req.query("cursor") ?? "";
    // Key order: a one-column string key by its text, any other by its JSON; the cursor is the last key's.
    const answers = await state.ask({ kind: "groups", stage: stage.stage - 1 });
    const keyText = (group: readonly unknown[]) => (group.length === 1 && typeof group[0] === "string" ? group[0] : JSON.stringify(group.length === 1 ? group[0] : group));
    const matching = answers.flatMap((a) => a.groups)
      .map((g) => ({ ...g, text: keyText(g.group) }))
      .filter((g) => g.text.startsWith(prefix) && (cursor === "" || g.text > cursor))
      .sort((a, b) => (a.text < b.text ? -1 : a.text > b.text ? 1 : a.partition - b.partition));
    const page = matching.slice(0, limit);
    const items = await Promise.all(page.map(async (g) => {
      const answer = await state.ask({ kind: "read", stage: stage.stage - 1, group: [...g.group] });
      const read = answer.flatMap((a) => a.reads).find((r) => r.partition === g.partition);
      return { key: keyObject(stage, g.group), partition: g.partition, position: read?.position ?? null, ...valueBody(stage, read?.rows ?? []) };
    }));
    const next = matching.length > limit ? page[page.length - 1]!.text : null;
    return json({ stage: stage.stage, items, cursor: next, owner: owner() }, 200);
  }));

  app.get("/state/:stage/keys/:key/watch", wrap(async (c, state) => {
    const stage = stageOf(state, c.req.param("stage") ?? "");
    const pathKey = c.req.param("key") ?? "";
    const ks = c.req.queries("k") ?? [];
    const key = keyOf(stage, pathKey, ks);
    const interval = options.watchIntervalMs ?? 100;
    return streamSSE(c, async (stream) => {
      let last: string | undefined;
      let id = 0;
      while (!stream.aborted && !stream.closed) {
        const current = options.state() ?? state;
        const found = await readKey(current, stage, key, pathKey, ks.length > 0);
        const body = found
          ? { stage: stage.stage, key: keyObject(stage, found.key), ...valueBody(stage, found.read.rows), owner: owner(), partition: found.read.partition, position: found.read.position, standby: false, stale: false }
          : { stage: stage.stage, key: keyObject(stage, key), value: null, owner: owner() };
        // The provenance moves with every batch; an event goes out when the value itself changed.
        const value = JSON.stringify(found ? valueBody(stage, found.read.rows) : null);
        if (value !== last) {
          last = value;
          await stream.writeSSE({ event: "value", id: String(id++), data: JSON.stringify(body) });
        }
        await stream.sleep(interval);
      }
    });
  }));
}
