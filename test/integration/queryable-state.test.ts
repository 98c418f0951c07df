/**
 * Queryable state on a real broker: a windowed count run by two consumers (in Workers), read
 * through the admin server's /state routes while it runs: exact values per key, the scan, and a
 * watch that sees each change of a key in order.
 */
import { describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { adminUrlOf, lastRecord, startCli, waitFor } from "../helpers/cli.ts";
import { createTopic, produce, uniqueName } from "../helpers/kafka.ts";
import { MINUTE, windowedCountPipeline } from "../helpers/pipelines.ts";

const T0 = Date.UTC(2026, 0, 1);
const GROUPS = 20;

/** A 4-partition input holding `rows` (message keys m0, m1, ...) and a pipeline counting it per g in 1-minute windows. */
async function countedInput(prefix: string, rows: ReadonlyArray<Record<string, unknown>>) {
  const name = uniqueName(prefix);
  const input = `${name}-in`;
  await createTopic(input, 4);
  await produce(rows.map((r, n) => ({ topic: input, key: `m${n}`, value: JSON.stringify(r) })));
  return { input, file: windowedCountPipeline(name, input, `${name}-out`, "g") };
}

/** GET `admin + path`: its status and JSON body. */
async function getJson(admin: string, path: string, headers: Record<string, string> = {}) {
  const res = await fetch(admin + path, { headers });
  return { status: res.status, body: (await res.json()) as Record<string, any> };
}

describe("queryable state", () => {
  test("every key of a running windowed count reads its exact value; the scan lists each key once; a watch sees each change", async () => {
    // Group g<i> gets i + 1 rows, all in the first minute: its window stays open.
    const rows = Array.from({ length: GROUPS }, (_, i) => Array.from({ length: i + 1 }, (_, j) => ({ g: `g${i}`, qty: j + 1, ts: T0 + 1000 * j }))).flat();
    const { input, file } = await countedInput("query", rows);
    const run = startCli(["run", file], { env: { STREAM_CONSUMERS: "2" } });
    try {
      const admin = await adminUrlOf(run);
      const get = (path: string) => getJson(admin, path);
      const scanAll = async () => {
        const items: Array<Record<string, any>> = [];
        let cursor: string | null = "";
        while (cursor !== null) {
          const { status, body } = await get(`/state/1/scan?limit=7${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
          if (status !== 200) return [];
          items.push(...body.items);
          cursor = body.cursor;
        }
        return items;
      };
      const counted = (items: Array<Record<string, any>>) => items.reduce((sum, i) => sum + (i.windows[0]?.n ?? 0), 0);
      await waitFor(async () => counted(await scanAll()) === rows.length, 90_000, "every row counted in the state");

      // The scan: each key once, in key order, with its exact count.
      const items = await scanAll();
      const keys = Array.from({ length: GROUPS }, (_, i) => `g${i}`).sort();
      expect(items.map((i) => i.key.g)).toEqual(keys);
      // Each key by itself: its one open window, with the exact count and sum, where it lives and how far its state goes.
      const state = await get("/state");
      expect(state.body.stages.map((s: any) => ({ stage: s.stage, index: s.index, op: s.op, keyColumns: s.keyColumns, windowMs: s.windowMs, slideMs: s.slideMs }))).toEqual([{ stage: 1, index: 0, op: "windowedAggregate", keyColumns: ["g"], windowMs: MINUTE, slideMs: MINUTE }]);
      expect(state.body.stages[0].partitions.map((p: any) => p.partition)).toEqual([0, 1, 2, 3]);
      for (let i = 0; i < GROUPS; i++) {
        const { status, body } = await get(`/state/1/keys/g${i}`);
        expect(status).toBe(200);
        expect(body.windows).toEqual([{ windowStart: T0, windowEnd: T0 + MINUTE, g: `g${i}`, n: i + 1, qty: ((i + 1) * (i + 2)) / 2 }]);
        expect(body.owner.admin).toBe(admin);
        expect(body.position).toBeGreaterThan(0);
      }
      expect((await get("/state/1/keys/nobody")).status).toBe(404);
      expect((await get("/state/2/keys/g1")).status).toBe(400);

      // The watch: the current value first, then each new row of g3 as it lands.
      const controller = new AbortController();
      const events: number[] = [];
      const watching = (async () => {
        const res = await fetch(`${admin}/state/1/keys/g3/watch`, { signal: controller.signal });
        const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) return;
          buffer += value;
          let end: number;
          while ((end = buffer.indexOf("\n\n")) >= 0) {
            const event = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            const data = event.split("\n").find((l) => l.startsWith("data:"));
            if (data) events.push(JSON.parse(data.slice(5)).windows[0].n);
          }
        }
      })().catch(() => {});
      await waitFor(() => events.length === 1, 10_000, "the watch's first event");
      for (let k = 1; k <= 3; k++) {
        await produce([{ topic: input, key: `late-${k}`, value: JSON.stringify({ g: "g3", qty: 1, ts: T0 + 50_000 }) }]);
        await waitFor(() => events.length === k + 1, 30_000, `the watch's event for new row ${k}`);
      }
      // A burst, all in one batch: still one event per change, in order.
      await produce(Array.from({ length: 20 }, (_, k) => ({ topic: input, key: "burst", value: JSON.stringify({ g: "g3", qty: 1, ts: T0 + 50_000 }) })));
      await waitFor(() => events.length === 24, 30_000, "an event for each row of the burst");
      await new Promise((r) => setTimeout(r, 500));
      controller.abort();
      await watching;
      expect(events).toEqual(Array.from({ length: 24 }, (_, k) => 4 + k));
      expect(lastRecord(run.records)?.status).toBe("RUNNING");
    } finally {
      run.child.kill("SIGTERM");
    }
    expect(await run.exited).toBe(0);
  });

  test("two processes: a key held by B is read through A with its exact value; A's scan covers both; B down gives 503 naming it; no token, 401", async () => {
    const rows = Array.from({ length: GROUPS }, (_, i) => Array.from({ length: i + 1 }, (_, j) => ({ g: `g${i}`, qty: 1, ts: T0 + 1000 * j }))).flat();
    const { file } = await countedInput("query-two", rows);
    const env = { STREAM_SESSION_TIMEOUT_MS: "6000", STREAM_ADMIN_TOKEN: "s3cret" };
    const a = startCli(["run", file], { env: { ...env, STREAM_INSTANCE_ID: "query-a" } });
    const b = startCli(["run", file], { env: { ...env, STREAM_INSTANCE_ID: "query-b" } });
    try {
      const [adminA, adminB] = await Promise.all([adminUrlOf(a), adminUrlOf(b)]);
      const auth = { authorization: "Bearer s3cret" };
      const get = (admin: string, path: string, headers: Record<string, string> = auth) => getJson(admin, path, headers);
      const owns = (admin: string) => get(admin, "/state").then((r) => (r.status === 200 ? (r.body.stages[0].partitions as unknown[]).length : 0));
      await waitFor(async () => (await owns(adminA)) > 0 && (await owns(adminB)) > 0 && (await owns(adminA)) + (await owns(adminB)) === 4, 90_000, "A and B to share the partitions");
      const scan = async () => (await get(adminA, "/state/1/scan?limit=1000")).body.items as Array<Record<string, any>> | undefined;
      await waitFor(async () => ((await scan()) ?? []).reduce((sum, i) => sum + i.windows[0].n, 0) === rows.length, 90_000, "every row counted, read through A");
      const items = (await scan())!;
      expect(items.map((i) => i.key.g)).toEqual(Array.from({ length: GROUPS }, (_, i) => `g${i}`).sort());
      const owners = new Set<string>();
      for (let i = 0; i < GROUPS; i++) {
        const { status, body } = await get(adminA, `/state/1/keys/g${i}`);
        expect(status).toBe(200);
        expect(body.windows).toEqual([{ windowStart: T0, windowEnd: T0 + MINUTE, g: `g${i}`, n: i + 1, qty: i + 1 }]);
        owners.add(body.owner.admin);
      }
      // Some keys came from B, through A.
      expect([...owners].sort()).toEqual([adminA, adminB].sort());
      expect((await get(adminA, "/state/1/keys/g1", {})).status).toBe(401);

      // B dies: until the group moves its partitions, A names it for B's keys.
      const heldByB = items.find((i) => i.owner.admin === adminB)!.key.g;
      b.child.kill("SIGKILL");
      await b.exited;
      const down = await get(adminA, `/state/1/keys/${heldByB}`);
      expect(down.status).toBe(503);
      expect(down.body.error).toContain(adminB);
    } finally {
      a.child.kill("SIGTERM");
      b.child.kill("SIGKILL");
    }
    expect(await a.exited).toBe(0);
  });

  test("a read during a forced rebalance always gets an answer, marked stale while partitions move", async () => {
    const rows = Array.from({ length: GROUPS }, (_, i) => ({ g: `g${i}`, qty: 1, ts: T0 })).flatMap((r) => [r, r]);
    const { file } = await countedInput("query-move", rows);
    const env = { STREAM_SESSION_TIMEOUT_MS: "6000" };
    const a = startCli(["run", file], { env: { ...env, STREAM_INSTANCE_ID: "move-a" } });
    let b: ReturnType<typeof startCli> | undefined;
    try {
      const adminA = await adminUrlOf(a);
      const read = (key: string) => getJson(adminA, `/state/1/keys/${key}`);
      const keys = Array.from({ length: GROUPS }, (_, i) => `g${i}`);
      await waitFor(async () => (await Promise.all(keys.map(read))).every((r) => r.status === 200 && r.body.windows[0].n === 2), 90_000, "every key counted by A alone");
      // B joins: the group rebalances and half the partitions move to B, which restores them.
      b = startCli(["run", file], { env: { ...env, STREAM_INSTANCE_ID: "move-b" } });
      const adminB = await adminUrlOf(b);
      const seen: Array<{ status: number; stale: boolean; owner: string; n: number }> = [];
      const until = Date.now() + 60_000;
      while (Date.now() < until) {
        for (const r of await Promise.all(keys.map(read))) seen.push({ status: r.status, stale: r.body.stale === true, owner: r.body.owner?.admin, n: r.body.windows?.[0]?.n });
        if (seen.some((s) => s.stale) && seen.slice(-GROUPS).every((s) => !s.stale) && seen.slice(-GROUPS).some((s) => s.owner === adminB)) break;
        await new Promise((r) => setTimeout(r, 20));
      }
      // Never unanswerable, always the right count; stale while the partitions moved; B's keys from B in the end.
      expect(seen.filter((s) => s.status !== 200)).toEqual([]);
      expect(seen.filter((s) => s.n !== 2)).toEqual([]);
      expect(seen.some((s) => s.stale)).toBe(true);
      expect(seen.slice(-GROUPS).filter((s) => s.stale)).toEqual([]);
      expect(new Set(seen.slice(-GROUPS).map((s) => s.owner))).toEqual(new Set([adminA, adminB]));
    } finally {
      a.child.kill("SIGTERM");
      b?.child.kill("SIGTERM");
    }
    expect(await a.exited).toBe(0);
    expect(await b!.exited).toBe(0);
  });

  test("STREAM_STANDBY_REPLICAS=1: with the owner killed, its standby answers its keys, marked standby and stale, with the committed count", async () => {
    const rows = Array.from({ length: GROUPS }, (_, i) => Array.from({ length: 3 }, () => ({ g: `g${i}`, qty: 1, ts: T0 }))).flat();
    const { file } = await countedInput("query-standby", rows);
    const env = { STREAM_SESSION_TIMEOUT_MS: "6000", STREAM_STANDBY_REPLICAS: "1", STREAM_CHECKPOINT_INTERVAL_MS: "300" };
    const dirs = [0, 1].map((i) => mkdtempSync(join(tmpdir(), `fv-query-standby-${i}-`)));
    const a = startCli(["run", file], { env: { ...env, STREAM_INSTANCE_ID: "standby-a", STREAM_STATE_DIR: dirs[0]! } });
    const b = startCli(["run", file], { env: { ...env, STREAM_INSTANCE_ID: "standby-b", STREAM_STATE_DIR: dirs[1]! } });
    try {
      const [adminA, adminB] = await Promise.all([adminUrlOf(a), adminUrlOf(b)]);
      const get = (admin: string, path: string) => getJson(admin, path);
      // Every key counted (read through A); then, past the checkpoint that commits the counts
      // (300 ms) and the standby's next read (500 ms), A's standby copies of B's partitions caught up.
      await waitFor(async () => {
        const scan = await get(adminA, "/state/1/scan?limit=1000");
        return scan.status === 200 && scan.body.items.reduce((sum: number, i: any) => sum + i.windows[0].n, 0) === rows.length;
      }, 90_000, "every row counted");
      await new Promise((r) => setTimeout(r, 2000));
      await waitFor(async () => {
        const standbys = lastRecord(a.records)?.metrics?.standbyPartitions ?? [];
        const ofB = (lastRecord(b.records)?.metrics?.partitions ?? []).filter((p) => !p.topic.startsWith("fv-")).map((p) => p.partition);
        return ofB.length > 0 && ofB.every((p) => standbys.some((s) => s.partition === p && s.lag === 0));
      }, 60_000, "A's standby copies of B's partitions caught up");
      const items = (await get(adminA, "/state/1/scan?limit=1000")).body.items as Array<Record<string, any>>;
      const ofB = items.filter((i) => i.owner.admin === adminB).map((i) => i.key.g as string);
      expect(ofB.length).toBeGreaterThan(0);
      b.child.kill("SIGKILL");
      await b.exited;
      // Before the group moves B's partitions to A: A's standby copies answer B's keys.
      for (const key of ofB) {
        const { status, body } = await get(adminA, `/state/1/keys/${key}`);
        expect(status).toBe(200);
        // The owner's last checkpoints (watermark, offsets) may still be in the copy's lag; the count is all in.
        expect({ standby: body.standby, stale: body.stale, windows: body.windows }).toEqual({ standby: true, stale: true, windows: [{ windowStart: T0, windowEnd: T0 + MINUTE, g: key, n: 3, qty: 3 }] });
        expect(body.lag).toBeGreaterThanOrEqual(0);
        expect(body.owner.admin).toBe(adminA);
      }
    } finally {
      a.child.kill("SIGTERM");
      b.child.kill("SIGKILL");
    }
    expect(await a.exited).toBe(0);
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });
});
