/**
 * The /state routes over real operators (a windowed count and a lastN), behind loops faked as
 * run-stream hands them to the admin server: each loop answers for the partitions it holds.
 */
import { describe, expect, test } from "bun:test";
import { createAdminApp } from "../../../runtime/admin/app.ts";
import type { Operator } from "../../../src/ops/index.ts";
import { localState, type StateAnswer, type StateQuery, type StateStage } from "../../../src/loop/state-query.ts";
import { compileOp, row, run } from "../../ops/helpers.ts";

const STAGES: StateStage[] = [
  { stage: 1, index: 0, op: "windowedAggregate", keyColumns: ["sym"], queryable: true, windowMs: 10, slideMs: 10 },
  { stage: 2, index: 1, op: "lastN", keyColumns: ["sym", "venue"], queryable: true },
  { stage: 3, index: 2, op: "streamJoin", keyColumns: ["id"], queryable: false },
];

/** A loop holding one operator per (stage index, partition), at a given position. */
function loop(tasks: Array<{ stage: number; partition: number; op: Operator; position: number }>, standbys: Array<{ stage: number; partition: number; lag: number }> = []) {
  return {
    query: async (q: StateQuery): Promise<StateAnswer> => {
      const mine = tasks.filter((t) => t.stage === q.stage);
      if (q.kind === "read") return { kind: "read", reads: mine.map((t) => ({ partition: t.partition, rows: t.op.read!(q.group), position: t.position })).filter((r) => r.rows.length > 0) };
      if (q.kind === "groups") return { kind: "groups", groups: mine.flatMap((t) => [...t.op.groups!()].map((group) => ({ partition: t.partition, group }))) };
      return { kind: "partitions", partitions: mine.map((t) => ({ partition: t.partition, position: t.position })), standbys: standbys.filter((s) => s.stage === q.stage).map(({ partition, lag }) => ({ partition, lag })) };
    },
  };
}

function setup(token?: string) {
  const counts = [0, 1].map(() => compileOp({ op: "windowedAggregate", timeColumn: "ts", windowMs: 10, groupBy: ["sym"], aggs: [{ op: "count" }] }).create());
  run(counts[0]!, "ts", [row({ ts: 1, sym: "A" }), row({ ts: 2, sym: "A" }), row({ ts: 12, sym: "A" }), row({ ts: 3, sym: "C" })]);
  run(counts[1]!, "ts", [row({ ts: 4, sym: "B" }), row({ ts: 5, sym: 7 })]);
  const last = compileOp({ op: "lastN", timeColumn: "ts", n: 2, column: "px", groupBy: ["sym", "venue"] }).create();
  run(last, "ts", [row({ ts: 1, sym: "A", venue: "x", px: 1 }), row({ ts: 2, sym: "A", venue: "x", px: 2 })]);
  const loops = [
    loop([{ stage: 0, partition: 0, op: counts[0]!, position: 40 }, { stage: 1, partition: 0, op: last, position: 7 }]),
    loop([{ stage: 0, partition: 1, op: counts[1]!, position: 12 }], [{ stage: 0, partition: 9, lag: 3 }]),
  ];
  const state = localState(STAGES, () => loops, undefined, "pod-a");
  const app = createAdminApp({
    status: () => ({ record: { id: "b", pipeline: "p", kind: "stream", status: "RUNNING" }, partitions: [] }),
    metricsText: () => "",
    stop: () => {},
    bindAddress: "127.0.0.1:8686",
    ...(token ? { token } : {}),
    state: { state: () => state, self: () => "http://127.0.0.1:8686" },
  });
  const get = async (path: string, headers: Record<string, string> = {}) => {
    const res = await app.request(path, { headers });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  };
  return { get, app };
}

describe("GET /state", () => {
  test("lists the stateful stages and the partitions this process holds", async () => {
    const { body } = await setup().get("/state");
    expect(body.stages).toEqual([
      { ...STAGES[0], partitions: [{ partition: 0, position: 40 }, { partition: 1, position: 12 }], standbys: [{ partition: 9, lag: 3 }] },
      { ...STAGES[1], partitions: [{ partition: 0, position: 7 }], standbys: [] },
      { ...STAGES[2], partitions: [], standbys: [] },
    ]);
  });

  test("one key: every open window, its partition and position; a number key by its JSON, a string by its text", async () => {
    const { get } = setup();
    expect(await get("/state/1/keys/A")).toEqual({
      status: 200,
      body: {
        stage: 1, key: { sym: "A" },
        value: [{ windowStart: 0, windowEnd: 10, sym: "A", count: 2 }, { windowStart: 10, windowEnd: 20, sym: "A", count: 1 }],
        windows: [{ windowStart: 0, windowEnd: 10, sym: "A", count: 2 }, { windowStart: 10, windowEnd: 20, sym: "A", count: 1 }],
        owner: { process: "pod-a", admin: "http://127.0.0.1:8686" }, partition: 0, position: 40, standby: false, stale: false,
      },
    });
    expect((await get("/state/1/keys/A?from=10")).body.windows).toEqual([{ windowStart: 10, windowEnd: 20, sym: "A", count: 1 }]);
    expect((await get("/state/1/keys/7")).body).toMatchObject({ key: { sym: 7 }, partition: 1, windows: [{ windowStart: 0, windowEnd: 10, sym: 7, count: 1 }] });
    expect((await get('/state/1/keys/"B"')).body).toMatchObject({ key: { sym: "B" }, partition: 1 });
    expect((await get("/state/1/keys/Z")).status).toBe(404);
  });

  test("a composite key as ?k=<col>:<value> or as its JSON list", async () => {
    const { get } = setup();
    const expected = { stage: 2, key: { sym: "A", venue: "x" }, value: { sym: "A", venue: "x", last: [1, 2] }, partition: 0, position: 7 };
    expect((await get("/state/2/keys/-?k=sym:A&k=venue:x")).body).toMatchObject(expected);
    expect((await get(`/state/2/keys/${encodeURIComponent('["A","x"]')}`)).body).toMatchObject(expected);
    expect((await get("/state/2/keys/-?k=sym:A&k=venue:y")).status).toBe(404);
  });

  test("read-your-writes: minPosition at or below the state's position answers; above it, 409 after waitMs", async () => {
    const { get } = setup();
    expect((await get("/state/1/keys/A?minPosition=40")).status).toBe(200);
    const late = await get("/state/1/keys/A?minPosition=41&waitMs=100");
    expect(late.status).toBe(409);
    expect(late.body.error).toContain("below minPosition 41");
  });

  test("scan: every key once, in key order, page by page with the cursor", async () => {
    const { get } = setup();
    const all = await get("/state/1/scan");
    expect((all.body.items as Array<{ key: unknown }>).map((i) => i.key)).toEqual([{ sym: 7 }, { sym: "A" }, { sym: "B" }, { sym: "C" }]);
    expect(all.body.cursor).toBeNull();
    const keys: unknown[] = [];
    let cursor = "";
    for (let page = 0; page < 5; page++) {
      const { body } = await get(`/state/1/scan?limit=1${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
      keys.push(...(body.items as Array<{ key: unknown }>).map((i) => i.key));
      if (body.cursor === null) break;
      cursor = body.cursor as string;
    }
    expect(keys).toEqual([{ sym: 7 }, { sym: "A" }, { sym: "B" }, { sym: "C" }]);
    expect((await get("/state/1/scan?prefix=B")).body.items).toEqual([{ key: { sym: "B" }, partition: 1, position: 12, owner: { process: "pod-a", admin: "http://127.0.0.1:8686" }, value: [{ windowStart: 0, windowEnd: 10, sym: "B", count: 1 }], windows: [{ windowStart: 0, windowEnd: 10, sym: "B", count: 1 }] }]);
  });

  test("bad input: 400 naming the parameter; the token guards every /state route", async () => {
    const { get } = setup();
    const bad = async (path: string, words: string) => {
      const res = await get(path);
      expect(res.status).toBe(400);
      expect(res.body.error).toContain(words);
    };
    await bad("/state/9/keys/A", "stage 9 has no state");
    await bad("/state/x/keys/A", "is not a stage number");
    await bad("/state/3/keys/A", "cannot be read by key");
    await bad("/state/2/keys/A", "does not give the 2 key columns");
    await bad("/state/2/keys/-?k=sym:A", "no value for key column(s) venue");
    await bad("/state/2/keys/-?k=side:A&k=venue:x", "not a key column");
    await bad("/state/1/scan?limit=0", "limit=");
    await bad("/state/1/scan?limit=100001", "limit=");
    await bad("/state/1/keys/A?from=soon", "from=");
    const guarded = setup("s3cret");
    expect((await guarded.get("/state")).status).toBe(401);
    expect((await guarded.get("/state/1/keys/A")).status).toBe(401);
    expect((await guarded.get("/state/1/keys/A", { authorization: "Bearer s3cret" })).status).toBe(200);
    // An EventSource sends no headers: a watch (and only a watch) takes the token as ?token=.
    expect((await guarded.get("/state/1/keys/A?token=s3cret")).status).toBe(401);
    const watch = await guarded.app.request("/state/1/keys/A/watch?token=s3cret");
    expect(watch.status).toBe(200);
    expect(watch.headers.get("content-type")).toContain("text/event-stream");
    const reader = watch.body!.pipeThrough(new TextDecoderStream()).getReader();
    let first = "";
    while (!first.includes("\n\n")) first += (await reader.read()).value ?? "";
    await reader.cancel();
    expect(first).toContain("event: value");
    expect(JSON.parse(first.split("\n").find((l) => l.startsWith("data:"))!.slice(5)).windows).toEqual([{ windowStart: 0, windowEnd: 10, sym: "A", count: 2 }, { windowStart: 10, windowEnd: 20, sym: "A", count: 1 }]);
  });
});
