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

const windowed = (stage: StateStage) => stage.windowMs !== undefined || stage.gapMs !== undefined;

/** What one key's answer carries besides its provenance. */
function valueBody(stage: StateStage, rows: Row[]): Record<string, unknown> {
  // `value` always: a windowed stage's is its list of windows, also given as `windows`.
  return windowed(stage) ? { value: rows, windows: rows } : { value: rows[0] ?? null };
}

/**
 * Reads a key here: from the tasks this process holds, or (`from`) also those it let go of lately,
 * or only its standby copies. A plain-text key that reads nothing is tried as the string it was
 * written as.
 */
async function readKey(state: LocalState, stage: StateStage, key: unknown[], pathKey: string, fromK: boolean, from: "held" | "retired" | "standby" = "held"): Promise<{ key: unknown[]; read: StateRead } | undefined> {
  const candidates = [key];
  if (!fromK && stage.keyColumns.length === 1 && typeof key[0] !== "string") candidates.push([pathKey]);
  for (const candidate of candidates) {
    const answers = await state.ask({ kind: "read", stage: stage.stage - 1, group: candidate, ...(from === "retired" ? { retired: true } : from === "standby" ? { standby: true } : {}) });
    const reads = answers.flatMap((a) => a.reads);
    const read = reads.find((r) => !r.stale) ?? reads.sort((a, b) => (a.lag ?? 0) - (b.lag ?? 0))[0];
    if (read) return { key: candidate, read };
  }
  return undefined;
}

/** Marks a request one process forwarded to another: it is answered from local state only (a hop limit of 1). */
export const FORWARDED_HEADER = "x-fv-forwarded";
/** On a forwarded read: where the peer may answer from besides what it holds: `retired` or `standby` (stale). */
export const FROM_HEADER = "x-fv-from";
/** How long a peer has to answer a forwarded read. */
const PEER_TIMEOUT_MS = 2_000;

type PeerAnswer = { admin: string; status: number; body: Record<string, unknown> } | { admin: string; error: string };

/** Asks every peer the same route (local state only there), with this request's token. */
async function askPeers(c: Context, state: LocalState, path: string, from: "held" | "retired" | "standby" = "held", skip: ReadonlySet<string> = new Set()): Promise<PeerAnswer[]> {
  const peers = (await state.peers()).filter((p) => !skip.has(p.admin));
  // A watch opened by the dashboard (an EventSource) carries the token as ?token=: it goes on as a header.
  const token = c.req.query("token");
  const authorization = c.req.header("authorization") ?? (token ? `Bearer ${token}` : undefined);
  const headers: Record<string, string> = { [FORWARDED_HEADER]: "1", ...(from !== "held" ? { [FROM_HEADER]: from } : {}), ...(authorization ? { authorization } : {}) };
  return Promise.all(peers.map(async (peer): Promise<PeerAnswer> => {
    try {
      const res = await fetch(peer.admin + path, { headers, signal: AbortSignal.timeout(PEER_TIMEOUT_MS) });
      return { admin: peer.admin, status: res.status, body: (await res.json()) as Record<string, unknown> };
    } catch (error) {
      const e = error as Error;
      return { admin: peer.admin, error: e.name === "TimeoutError" ? `no answer within ${PEER_TIMEOUT_MS} ms` : e.message };
    }
  }));
}

/** The path and query of this request, to ask a peer the same. */
const pathOf = (c: Context) => {
  const url = new URL(c.req.url);
  return url.pathname + url.search;
};

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
  const owner = () => ({ process: options.state()?.instance || options.self(), admin: options.self() });
  const forwarded = (c: Context) => c.req.header(FORWARDED_HEADER) !== undefined;

  /**
   * A key's answer: from this process, else from the peer that holds it, else (while partitions
   * move) from a process that let go of it lately, marked stale; 404 / 503 when none can.
   */
  const lookup = async (c: Context, state: LocalState, stage: StateStage, key: unknown[], pathKey: string, ks: string[], path: string): Promise<{ status: number; body: Record<string, unknown> }> => {
    const answer = (found: { key: unknown[]; read: StateRead }) => ({
      status: 200,
      body: {
        stage: stage.stage, key: keyObject(stage, found.key), ...valueBody(stage, found.read.rows), owner: owner(), partition: found.read.partition, position: found.read.position,
        standby: found.read.standby === true, ...(found.read.standby ? { lag: found.read.lag ?? null } : {}), stale: found.read.stale === true, read: found.read,
      },
    });
    const missing = { status: 404, body: { error: `stage ${stage.stage} holds no state for key ${JSON.stringify(keyObject(stage, key))}${forwarded(c) ? " in this process" : " in any process of the pipeline"}`, stage: stage.stage, key: keyObject(stage, key), owner: owner() } };
    const asked = c.req.header(FROM_HEADER);
    const local = await readKey(state, stage, key, pathKey, ks.length > 0, forwarded(c) && (asked === "retired" || asked === "standby") ? asked : "held");
    if (local) return answer(local);
    if (forwarded(c)) return missing;
    const found = (answers: PeerAnswer[]) => answers.find((a) => "status" in a && (a.status === 200 || a.status === 409)) as { status: number; body: Record<string, unknown> } | undefined;
    // 1. The process that holds the key now.
    const held = await askPeers(c, state, path);
    const hit = found(held);
    if (hit) return { status: hit.status, body: hit.body };
    const down = held.filter((a) => "error" in a || a.status >= 500);
    const gone = new Set(down.map((a) => a.admin));
    // 2. Nobody holds it now: its partition is moving, and the process that let go of it answers,
    //    stale. Not when a process did not answer: it may hold the key, and a copy let go of
    //    before it took the key over would be older than what it holds.
    if (down.length === 0) {
      const mine = await readKey(state, stage, key, pathKey, ks.length > 0, "retired");
      if (mine) return answer(mine);
      const old = found(await askPeers(c, state, path, "retired"));
      if (old) return { status: old.status, body: old.body };
    }
    // 3. A standby copy (STREAM_STANDBY_REPLICAS), kept up to date from the changelog: stale, with its lag.
    const copy = await readKey(state, stage, key, pathKey, ks.length > 0, "standby");
    if (copy) return answer(copy);
    const remote = found(await askPeers(c, state, path, "standby", gone));
    if (remote) return { status: remote.status, body: remote.body };
    // 4. A process that did not answer may hold it: say which.
    if (down.length > 0) {
      const why = down.map((a) => `${a.admin} (${"error" in a ? a.error : `HTTP ${a.status}`})`).join(", ");
      return { status: 503, body: { error: `key ${JSON.stringify(keyObject(stage, key))} is not held here, and these processes of the pipeline did not answer: ${why}`, unreachable: down.map((a) => a.admin) } };
    }
    return missing;
  };

  app.get("/state", wrap(async (_c, state) => {
    const stages = await Promise.all(state.stages.map(async (stage) => {
      const answers = await state.ask({ kind: "partitions", stage: stage.stage - 1 });
      const partitions = answers.flatMap((a) => a.partitions).sort((a, b) => a.partition - b.partition);
      const standbys = answers.flatMap((a) => a.standbys).sort((a, b) => a.partition - b.partition);
      return { ...stage, partitions, standbys };
    }));
    return json({ owner: owner(), peers: (await state.peers()).map((p) => p.admin), stages }, 200);
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
      const { status, body } = await lookup(c, state, stage, key, pathKey, ks, pathOf(c));
      const read = body.read as StateRead | undefined;
      delete body.read;
      if (status !== 200 || !read) return json(body, status);
      if (minPosition === undefined || (read.position ?? -1) >= minPosition) {
        return json({ ...body, ...valueBody(stage, inRange(read.rows, from, to)) }, 200);
      }
      if (Date.now() >= until) {
        return json({ error: `the state of key ${JSON.stringify(keyObject(stage, key))} is at position ${read.position}, below minPosition ${minPosition}, after waiting ${waitMs} ms`, position: read.position, partition: read.partition, owner: owner() }, 409);
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
    const matching = answers.flatMap((a) => a.groups)
      .map((g) => ({ ...g, text: keyText(g.group) }))
      .filter((g) => g.text.startsWith(prefix) && (cursor === "" || g.text > cursor))
      .sort((a, b) => (a.text < b.text ? -1 : a.text > b.text ? 1 : a.partition - b.partition));
    const page = matching.slice(0, limit);
    let items: Array<Record<string, unknown> & { text: string }> = await Promise.all(page.map(async (g) => {
      const answer = await state.ask({ kind: "read", stage: stage.stage - 1, group: [...g.group] });
      const read = answer.flatMap((a) => a.reads).find((r) => r.partition === g.partition);
      return { text: g.text, key: keyObject(stage, g.group), partition: g.partition, position: read?.position ?? null, owner: owner(), ...valueBody(stage, read?.rows ?? []) };
    }));
    let more = matching.length > limit;
    // Across the group: every other process's page of the same scan, merged in key order.
    if (!forwarded(c)) {
      const peers = await askPeers(c, state, pathOf(c));
      const down = peers.filter((a) => "error" in a || a.status !== 200);
      if (down.length > 0) {
        const why = down.map((a) => `${a.admin} (${"error" in a ? a.error : `HTTP ${a.status}`})`).join(", ");
        return json({ error: `a scan reads every process of the pipeline, and these did not answer: ${why}`, unreachable: down.map((a) => a.admin) }, 503);
      }
      for (const answer of peers) {
        if (!("status" in answer)) continue;
        for (const item of answer.body.items as Array<Record<string, unknown>>) items.push({ ...item, text: keyText(stage.keyColumns.map((c) => (item.key as Record<string, unknown>)[c])) });
        if (answer.body.cursor !== null) more = true;
      }
      items.sort((a, b) => (a.text < b.text ? -1 : a.text > b.text ? 1 : (a.partition as number) - (b.partition as number)));
      if (items.length > limit) more = true;
      items = items.slice(0, limit);
    }
    const next = more && items.length > 0 ? items[items.length - 1]!.text : null;
    return json({ stage: stage.stage, items: items.map(({ text: _text, ...item }) => item), cursor: next, owner: owner() }, 200);
  }));

  app.get("/state/:stage/keys/:key/watch", wrap(async (c, state) => {
    const stage = stageOf(state, c.req.param("stage") ?? "");
    const pathKey = c.req.param("key") ?? "";
    const ks = c.req.queries("k") ?? [];
    const key = keyOf(stage, pathKey, ks);
    const interval = options.watchIntervalMs ?? 100;
    // A key held elsewhere is read there (the plain read route, not its watch) at each tick.
    const readPath = pathOf(c).replace(/\/watch(\?|$)/, "$1");
    return streamSSE(c, async (stream) => {
      let last: string | undefined;
      let id = 0;
      const send = async (status: number, body: Record<string, unknown>) => {
        delete body.read;
        // Provenance moves with every batch; an event goes out when the value itself changed.
        const text = JSON.stringify(status === 200 ? { windows: body.windows, value: body.value } : { status });
        if (text === last) return;
        last = text;
        await stream.writeSSE({ event: status === 200 ? "value" : status === 404 ? "missing" : "error", id: String(id++), data: JSON.stringify(status === 200 ? body : { ...body, status }) });
      };
      // Each change a row makes to the key in this process, as it happens, in order.
      const pushed: Array<{ group: unknown[]; read: StateRead }> = [];
      let wake: (() => void) | undefined;
      const groups = ks.length === 0 && stage.keyColumns.length === 1 && typeof key[0] !== "string" ? [key, [pathKey]] : [key];
      const ends = groups.map((group) => state.watch(stage.stage - 1, group, (read) => {
        pushed.push({ group, read });
        wake?.();
      }));
      try {
        while (!stream.aborted && !stream.closed) {
          while (pushed.length > 0) {
            const { group, read } = pushed.shift()!;
            await send(200, { stage: stage.stage, key: keyObject(stage, group), ...valueBody(stage, read.rows), owner: owner(), partition: read.partition, position: read.position, standby: false, stale: false });
          }
          // A look too: what no row here changed (a window that closed, a key held elsewhere or moving).
          const { status, body } = await lookup(c, options.state() ?? state, stage, key, pathKey, ks, readPath);
          if (pushed.length === 0) await send(status, body);
          await Promise.race([stream.sleep(interval), new Promise<void>((resolve) => (wake = resolve))]);
          wake = undefined;
        }
      } finally {
        for (const end of ends) end();
      }
    });
  }));
}

/** A key in scan order: a one-column string key by its text, any other by its JSON. */
function keyText(group: readonly unknown[]): string {
  return group.length === 1 && typeof group[0] === "string" ? group[0] : JSON.stringify(group.length === 1 ? group[0] : group);
}
