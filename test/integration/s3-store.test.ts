/**
 * S3StateStore on the real S3-compatible server (SeaweedFS, started by scripts/s3.sh): every
 * operator kind's snapshot saved, loaded and restored into a fresh instance gives the same output
 * as the instance it came from; a snapshot the operator cannot capture fully is refused and
 * nothing is written; the AsyncStateStore contract; the errors a user meets; and the same round
 * trip on Deno and Node. Each run works in a bucket of its own, removed at the end.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { recoveryOf } from "../../src/errors.ts";
import * as v from "valibot";
import { type CompiledOperator, eventTimeOf, operatorSteps } from "../../src/ops/index.ts";
import { jsonBytes } from "../../src/state/async-store.ts";
import { AwsS3Client, s3OptionsFromEnv } from "../../src/state/aws-s3-client.ts";
import { S3StateStore } from "../../src/state/s3-store.ts";
import { compileOp, type Event, MemorySource, row, run, viaJson, wm } from "../ops/helpers.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));
const options = s3OptionsFromEnv(process.env);
const client = new AwsS3Client(options);
const bucket = `fv-test-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 7)}`;

beforeAll(async () => {
  // Installs the server the first time (a Go build of some minutes), then starts it if it is not up.
  const up = spawnSync("bash", [`${root}/scripts/s3.sh`, "up"], { encoding: "utf8" });
  if (up.status !== 0) throw new Error(`scripts/s3.sh up failed:\n${up.stdout}${up.stderr}`);
  expect(await client.ensureBucket(bucket)).toBe(true);
}, 900_000);

afterAll(async () => {
  await client.removeBucket(bucket);
  client.close();
});

const L = 0;
const R = 1;

interface Case {
  name: string;
  compiled: CompiledOperator;
  /** A script that fills, fires and evicts state: the snapshot is taken at every point of it. */
  events: Event[];
  /** Events that leave a value JSON cannot carry in the state. */
  poison: Event[];
}

/** Every operator kind of src/ops (operatorSteps), each mode that keeps its state differently. */
const cases: Case[] = [
  {
    name: "windowedAggregate (tumbling)",
    compiled: compileOp({
      op: "windowedAggregate",
      timeColumn: "ts",
      windowMs: 10,
      groupBy: ["g"],
      aggs: [
        { op: "count" }, { op: "sum", column: "x" }, { op: "avg", column: "x" }, { op: "min", column: "x" }, { op: "first", column: "x" },
        { op: "countDistinct", column: "x", exactUpTo: 2, alias: "approx" }, { op: "percentile", column: "x", q: 0.9, exactUpTo: 2, alias: "p90" },
        { op: "stddev", column: "x" }, { op: "argmax", column: "x" }, { op: "ema", column: "x", alpha: 0.3 },
      ],
    }),
    events: [
      row({ ts: 1, g: "a", x: 1.5 }), row({ ts: 3, g: "b", x: 2 }), row({ ts: 4, g: "a", x: 0.1 }), row({ ts: 6, g: "a", x: 7 }), wm(5),
      row({ ts: 2, g: "a", x: 4 }), row({ ts: 8, g: "b", x: null }), row({ ts: 12, g: "a", x: 3 }), wm(10), row({ ts: 4, g: "a", x: 9 }),
      row({ ts: 13, g: "c", x: 0.2 }), row({ ts: 11, g: "a", x: 5 }), wm(16), row({ ts: 18, g: "a", x: 1 }), wm(40),
    ],
    poison: [row({ ts: 1, g: "a", x: 1e308 }), row({ ts: 2, g: "a", x: 1e308 })],
  },
  {
    name: "windowedAggregate (hopping)",
    compiled: compileOp({ op: "windowedAggregate", timeColumn: "ts", windowMs: 10, slideMs: 5, groupBy: ["g"], aggs: [{ op: "count" }, { op: "sum", column: "x" }, { op: "last", column: "x" }, { op: "countDistinct", column: "x" }, { op: "sma", column: "x", n: 2 }] }),
    events: [
      row({ ts: 1, g: "a", x: 1 }), row({ ts: 3, g: "b", x: 2 }), wm(5), row({ ts: 2, g: "a", x: 4 }), row({ ts: 9, g: "a", x: 3 }), wm(10),
      row({ ts: 4, g: "a", x: 9 }), row({ ts: 12, g: "c", x: 0.2 }), wm(16), row({ ts: 18, g: "a", x: 1 }), wm(40),
    ],
    poison: [row({ ts: 1, g: "a", x: 1e308 }), row({ ts: 2, g: "a", x: 1e308 })],
  },
  {
    name: "windowedAggregate (hopping, emit update)",
    compiled: compileOp({ op: "windowedAggregate", timeColumn: "ts", windowMs: 10, slideMs: 5, groupBy: ["g"], emit: "update", aggs: [{ op: "count" }, { op: "sum", column: "x" }, { op: "argmax", column: "x" }] }),
    events: [
      row({ ts: 1, g: "a", x: 1 }), row({ ts: 3, g: "b", x: 2 }), wm(5), row({ ts: 2, g: "a", x: 4 }), row({ ts: 9, g: "a", x: 3 }), wm(10),
      row({ ts: 4, g: "a", x: 9 }), row({ ts: 12, g: "c", x: 0.2 }), wm(16), row({ ts: 18, g: "a", x: 1 }), wm(40),
    ],
    poison: [row({ ts: 1, g: "a", x: 1e308 }), row({ ts: 2, g: "a", x: 1e308 })],
  },
  {
    name: "windowedAggregate (sliding)",
    compiled: compileOp({ op: "windowedAggregate", timeColumn: "ts", windowMs: 10, sliding: true, groupBy: ["g"], aggs: [{ op: "count" }, { op: "last", column: "x" }, { op: "sma", column: "y", n: 2 }] }),
    events: [
      row({ ts: 1, g: "a", x: 1 }), row({ ts: 3, g: "b", x: 2 }), wm(2), row({ ts: 2, g: "a", x: 4 }), row({ ts: 9, g: "a", x: 3 }), wm(10),
      row({ ts: 12, g: "a", x: 9 }), row({ ts: 12, g: "c", x: 0.2 }), wm(16), row({ ts: 18, g: "a", x: 1 }), row({ ts: 30, g: "a", x: 2 }), wm(60),
    ],
    poison: [row({ ts: 1, g: "a", x: Number.NaN })],
  },
  {
    name: "windowedAggregate (sliding, emit update)",
    compiled: compileOp({ op: "windowedAggregate", timeColumn: "ts", windowMs: 10, sliding: true, emit: "update", groupBy: ["g"], aggs: [{ op: "count" }, { op: "first", column: "x" }, { op: "max", column: "y" }] }),
    events: [
      row({ ts: 1, g: "a", x: 1 }), row({ ts: 3, g: "b", x: 2 }), wm(2), row({ ts: 2, g: "a", x: 4 }), row({ ts: 9, g: "a", x: 3 }), wm(10),
      row({ ts: 12, g: "a", x: 9 }), wm(16), row({ ts: 18, g: "a", x: 1 }), wm(60),
    ],
    poison: [row({ ts: 1, g: "a", x: Number.NaN })],
  },
  {
    name: "sessionAggregate",
    compiled: compileOp({
      op: "sessionAggregate",
      timeColumn: "ts",
      gapMs: 10,
      groupBy: ["u"],
      aggs: [{ op: "count" }, { op: "sum", column: "x" }, { op: "avg", column: "x" }, { op: "last", column: "x" }, { op: "countDistinct", column: "x", exactUpTo: 1, alias: "approx" }, { op: "percentile", column: "x", q: 0.25, exactUpTo: 1, alias: "p25" }, { op: "variance", column: "x" }],
    }),
    events: [
      row({ ts: 0, u: "a", x: 1 }), row({ ts: 25, u: "a", x: 2 }), row({ ts: 3, u: "b", x: 0.3 }), wm(12), row({ ts: 14, u: "a", x: 4 }),
      row({ ts: 5, u: "b", x: 5 }), wm(16), row({ ts: 40, u: "b", x: 6 }), row({ ts: 1, u: "c", x: 7 }), wm(36), row({ ts: 44, u: "b", x: 0.1 }), wm(100),
    ],
    poison: [row({ ts: 1, u: "a", x: 1e308 }), row({ ts: 2, u: "a", x: 1e308 })],
  },
  {
    name: "sessionAggregate (emit update)",
    compiled: compileOp({ op: "sessionAggregate", timeColumn: "ts", gapMs: 10, groupBy: ["u"], emit: "update", aggs: [{ op: "count" }, { op: "sum", column: "x" }, { op: "variance", column: "x" }] }),
    events: [
      row({ ts: 0, u: "a", x: 1 }), row({ ts: 25, u: "a", x: 2 }), row({ ts: 3, u: "b", x: 0.3 }), wm(12), row({ ts: 14, u: "a", x: 4 }),
      row({ ts: 5, u: "b", x: 5 }), wm(16), row({ ts: 40, u: "b", x: 6 }), wm(100),
    ],
    poison: [row({ ts: 1, u: "a", x: 1e308 }), row({ ts: 2, u: "a", x: 1e308 })],
  },
  {
    name: "streamJoin (left)",
    compiled: compileOp({ op: "streamJoin", timeColumn: "ts", on: "id", withinMs: 5, type: "left", rightColumns: ["px"] }, 2),
    events: [
      row({ id: 1, ts: 0, q: 1 }, L), row({ id: 2, ts: 1, q: 2 }, L), row({ id: 1, ts: 4, px: 10 }, R), row({ id: 3, ts: 6, px: 11 }, R),
      wm(3), row({ id: 3, ts: 8, q: 3 }, L), row({ id: 2, ts: 2, q: 4 }, L), wm(7), row({ id: 1, ts: 9, px: 12 }, R),
      row({ id: 4, ts: 12, q: 5 }, L), row({ id: null, ts: 12, q: 6 }, L), wm(14), row({ id: 4, ts: 15, px: 13 }, R), wm(50),
    ],
    poison: [row({ id: 1, ts: 0, q: Number.NaN }, L)],
  },
  {
    name: "streamJoin (inner)",
    compiled: compileOp({ op: "streamJoin", timeColumn: "ts", leftKey: "a", rightKey: "b", withinMs: 3 }, 2),
    events: [
      row({ a: 1, ts: 0 }, L), row({ b: 1, ts: 2 }, R), row({ b: 1, ts: 3 }, R), wm(2), row({ a: 1, ts: 5 }, L),
      row({ a: 2, ts: 5 }, L), wm(6), row({ b: 2, ts: 7 }, R), row({ a: 1, ts: 4 }, L), wm(30),
    ],
    poison: [row({ a: 1, ts: 0, v: undefined }, L)],
  },
  {
    name: "tableJoin (processing time, left)",
    compiled: compileOp({ op: "tableJoin", on: "sym", timeColumn: "ts", type: "left", columns: ["px"] }, 2),
    events: [
      row({ sym: "a", px: 1 }, R), row({ ts: 1, sym: "a", q: 1 }, L), row({ ts: 2, sym: "b", q: 2 }, L), row({ sym: "b", px: 2 }, R), wm(1),
      row({ ts: 3, sym: "b", q: 3 }, L), row({ sym: "a", px: 5 }, R), row({ ts: 4, sym: "a", q: 4 }, L), wm(10), row({ ts: 5, sym: "c", q: 5 }, L),
    ],
    poison: [row({ sym: "a", px: Number.NaN }, R)],
  },
  {
    name: "tableJoin (as of event time)",
    compiled: compileOp({ op: "tableJoin", on: "sym", timeColumn: "ts", asOf: "eventTime", historyMs: 10 }, 2),
    events: [
      row({ ts: 0, sym: "a", px: 1 }, R), row({ ts: 5, sym: "a", px: 2 }, R), row({ ts: 3, sym: "a", q: 1 }, L), row({ ts: 7, sym: "a", q: 2 }, L),
      row({ ts: 30, sym: "a", px: 3 }, R), row({ ts: 6, sym: "a", q: 3 }, L), row({ ts: 31, sym: "a", q: 4 }, L), wm(10), row({ ts: 2, sym: "b", px: 9 }, R), row({ ts: 2, sym: "b", q: 5 }, L),
    ],
    poison: [row({ ts: 0, sym: "a", px: Number.NaN }, R)],
  },
  {
    name: "topN (running)",
    compiled: compileOp({ op: "topN", timeColumn: "ts", n: 2, by: "s", groupBy: ["g"], expireAfterMs: 20 }),
    events: [
      row({ ts: 0, g: "a", s: 1 }), row({ ts: 1, g: "a", s: 3 }), row({ ts: 2, g: "b", s: 1 }), row({ ts: 3, g: "a", s: 3 }),
      wm(10), row({ ts: 4, g: "a", s: 2 }), row({ ts: 5, g: "a", s: 4 }), wm(23), row({ ts: 30, g: "b", s: 0 }), row({ ts: 31, g: "a", s: 1 }), wm(60),
    ],
    poison: [row({ ts: 0, g: "a", s: 1, note: Number.POSITIVE_INFINITY })],
  },
  {
    name: "topN (windowed)",
    compiled: compileOp({ op: "topN", timeColumn: "ts", n: 2, by: "s", order: "asc", groupBy: ["g"], windowMs: 10 }),
    events: [
      row({ ts: 0, g: "a", s: 5 }), row({ ts: 1, g: "a", s: 3 }), row({ ts: 2, g: "b", s: 1 }), row({ ts: 3, g: "a", s: 3 }),
      row({ ts: 12, g: "a", s: 0 }), wm(10), row({ ts: 9, g: "a", s: 1 }), row({ ts: 14, g: "a", s: 2 }), row({ ts: 15, g: "a", s: -1 }), wm(30),
    ],
    poison: [row({ ts: 0, g: "a", s: 1, note: Number.NaN })],
  },
  {
    name: "topN (windowed, emit update)",
    compiled: compileOp({ op: "topN", timeColumn: "ts", n: 2, by: "s", groupBy: ["g"], windowMs: 10, emit: "update" }),
    events: [
      row({ ts: 0, g: "a", s: 5 }), row({ ts: 1, g: "a", s: 3 }), row({ ts: 2, g: "b", s: 1 }), row({ ts: 3, g: "a", s: 3 }),
      row({ ts: 12, g: "a", s: 0 }), wm(10), row({ ts: 9, g: "a", s: 1 }), row({ ts: 14, g: "a", s: 2 }), row({ ts: 15, g: "a", s: 9 }), wm(30),
    ],
    poison: [row({ ts: 0, g: "a", s: 1, note: Number.NaN })],
  },
  {
    name: "lastN (expiring)",
    compiled: compileOp({ op: "lastN", timeColumn: "ts", n: 3, groupBy: ["g"], expireAfterMs: 20 }),
    events: [
      row({ ts: 0, g: "a", x: 1 }), row({ ts: 1, g: "a", x: 2 }), row({ ts: 2, g: "b", x: 3 }), row({ ts: 3, g: "a", x: 4 }),
      row({ ts: 4, g: "a", x: 5 }), wm(21), row({ ts: 5, g: "a", x: 6 }), row({ ts: 6, g: "a", x: 7 }), wm(30), row({ ts: 7, g: "b", x: 8 }), wm(100),
    ],
    poison: [row({ ts: 0, g: "a", x: Number.NaN })],
  },
  {
    name: "lastN (one column)",
    compiled: compileOp({ op: "lastN", timeColumn: "ts", n: 2, column: "px", groupBy: ["sym"] }),
    events: [
      row({ ts: 1, sym: "A", px: 1 }), row({ ts: 2, sym: "A", px: 2 }), row({ ts: 3, sym: "B", px: 3 }), wm(2), row({ ts: 4, sym: "A", px: 4 }),
      row({ ts: 5, sym: "B", px: 5 }), row({ ts: 6, sym: "A", px: 6 }),
    ],
    poison: [row({ ts: 0, sym: "A", px: Number.POSITIVE_INFINITY })],
  },
];

/** A store of its own per test, under a prefix no other test uses. */
let stores = 0;
function freshStore(): S3StateStore {
  return new S3StateStore(client, bucket, `t${++stores}/`);
}

/** Feeds `events[0..cut)`, saves the snapshot to S3, restores it from S3 into a fresh instance, feeds both the rest. */
async function throughS3(store: S3StateStore, c: Case, cut: number) {
  const original = c.compiled.create();
  run(original, c.compiled, c.events.slice(0, cut));
  const snapshot = original.snapshot();
  const key = `${c.compiled.op}/cut-${cut}`;
  await store.save(key, snapshot);
  const loaded = await store.load(key);
  expect(loaded).toEqual(viaJson(snapshot));
  const restored = c.compiled.create();
  restored.restoreSnapshot(loaded!);
  const rest = c.events.slice(cut);
  return { original: run(original, c.compiled, rest), restored: run(restored, c.compiled, rest), key, snapshot };
}

describe.each(cases)("$name through S3", (c) => {
  test("save → load → restoreSnapshot at every point of the script: the restored instance gives exactly the rows the original gives", async () => {
    const store = freshStore();
    let compared = 0;
    for (let cut = 0; cut <= c.events.length; cut++) {
      const { original, restored } = await throughS3(store, c, cut);
      expect({ cut, ...restored }).toEqual({ cut, ...original });
      compared += original.rows.length;
    }
    // The comparison compared rows: the script fires after most cuts.
    expect(compared).toBeGreaterThan(c.events.length);
    expect((await client.listObjects(bucket, store.prefix)).length).toBe(c.events.length + 1);
  });

  test("the object holds the snapshot's JSON, byte for byte, under <prefix><key>.json", async () => {
    const store = freshStore();
    const { key, snapshot } = await throughS3(store, c, Math.floor(c.events.length / 2));
    expect(await client.listObjects(bucket, store.prefix)).toEqual([`${store.prefix}${key}.json`]);
    expect(await client.getObject(bucket, `${store.prefix}${key}.json`)).toEqual(jsonBytes(snapshot));
  });

  test("an operator holding state JSON cannot carry refuses the snapshot, and nothing is written", async () => {
    const store = freshStore();
    const op = c.compiled.create();
    run(op, c.compiled, c.poison);
    // As a program writes it: op.snapshot() throws before save is called.
    const error = await Promise.resolve().then(() => store.save("refused", op.snapshot())).catch((e) => e);
    expect(error.code).toBe("STATE_CORRUPTED");
    expect(error.message).toMatch(/NaN|Infinity|undefined/);
    expect(await client.listObjects(bucket, store.prefix)).toEqual([]);
    expect(await store.load("refused")).toBeUndefined();
  });
});

describe("spilling operators through S3", () => {
  test.each([
    ["windowedAggregate", compileOp({ op: "windowedAggregate", timeColumn: "ts", windowMs: 20, groupBy: ["g"], aggs: [{ op: "count" }, { op: "sum", column: "x" }] })],
    ["lastN", compileOp({ op: "lastN", timeColumn: "ts", n: 2, column: "x", groupBy: ["g"] })],
  ] as const)("a spilling %s's snapshot holds what its store holds too: restored from S3, it gives the rows of an instance that kept all in memory", async (_name, compiled) => {
    const store = freshStore();
    const rows = Array.from({ length: 60 }, (_, i) => row({ ts: i % 17, g: `k${i % 12}`, x: i }));
    const more = [...Array.from({ length: 20 }, (_, i) => row({ ts: 15 + (i % 9), g: `k${i % 15}`, x: 100 + i })), wm(19), wm(60)];
    const source = new MemorySource();
    const spilling = compiled.create();
    expect(spilling.spill!(source, 2)).toBe(true);
    const inMemory = compiled.create();
    for (const [i, e] of rows.entries()) {
      const event = e as { row: Record<string, unknown> };
      const time = eventTimeOf(event.row, compiled.timeColumn);
      spilling.process(event.row, time, 0);
      inMemory.process(event.row, time, 0);
      if (i % 10 === 9) {
        source.commit(spilling.drainChanges());
        spilling.settled!(spilling.drains!);
      }
    }
    expect(spilling.cacheStats!()!.resident).toBeLessThan(12);
    await store.save("spilled", spilling.snapshot());
    const restored = compiled.create();
    restored.restoreSnapshot((await store.load("spilled"))!);
    expect(run(restored, compiled, more)).toEqual(run(inMemory, compiled, more));
  });
});

describe("S3StateStore on the real server (AsyncStateStore)", () => {
  test("put and get keep the exact bytes; a missing key gets undefined; delete removes, and twice is no error", async () => {
    const store = freshStore();
    const all = Uint8Array.from({ length: 256 }, (_, i) => i);
    const big = Uint8Array.from({ length: 5 * 1024 * 1024 + 3 }, (_, i) => (i * 31) & 0xff);
    await store.put("all", all);
    await store.put("empty", new Uint8Array(0));
    await store.put("big", big);
    expect(await store.get("all")).toEqual(all);
    expect(await store.get("empty")).toEqual(new Uint8Array(0));
    expect((await store.get("big"))!.length).toBe(big.length);
    expect(Buffer.from((await store.get("big"))!).equals(Buffer.from(big))).toBe(true);
    expect(await store.get("missing")).toBeUndefined();
    await store.put("all", new Uint8Array([7]));
    expect(await store.get("all")).toEqual(new Uint8Array([7]));
    await store.delete("all");
    await store.delete("all");
    expect(await store.get("all")).toBeUndefined();
    expect(await store.list("")).toEqual(["big", "empty"]);
    expect(await client.listObjects(bucket, store.prefix)).toEqual([`${store.prefix}big.bin`, `${store.prefix}empty.bin`]);
  });

  test("a snapshot and a value under one key are two objects: save and put never meet, list gives values only", async () => {
    const store = freshStore();
    const snapshot = { version: 1, op: "lastN", watermark: 5, entries: [{ key: "meta", value: { v: 1, watermark: 5, seq: 0 } }] };
    await store.save("k", snapshot);
    await store.put("k", new Uint8Array([1, 2]));
    expect(await store.load("k")).toEqual(snapshot);
    expect(await store.get("k")).toEqual(new Uint8Array([1, 2]));
    expect(await store.list("")).toEqual(["k"]);
    expect(await client.listObjects(bucket, store.prefix)).toEqual([`${store.prefix}k.bin`, `${store.prefix}k.json`]);
  });

  test("list pages through the server's answers and gives the keys under a prefix, sorted, without the store's prefix", async () => {
    const paging = new AwsS3Client({ ...options, pageSize: 2 });
    try {
      const store = new S3StateStore(paging, bucket, `t${++stores}/`);
      const keys = ["sma/2", "sma/10", "sma/1", "sma/0", "sma/3", "sma/11", "ema/0", "smart", "ünï/cødé", "a b"];
      for (const key of keys) await store.put(key, new TextEncoder().encode(key));
      expect(await store.list("sma/")).toEqual(["sma/0", "sma/1", "sma/10", "sma/11", "sma/2", "sma/3"]);
      expect(await store.list("")).toEqual([...keys].sort());
      expect(await store.list("none/")).toEqual([]);
      const sibling = new S3StateStore(paging, bucket, store.prefix.slice(0, -1) + "x/");
      await sibling.put("sma/9", new Uint8Array([1]));
      expect(await store.list("sma/")).toEqual(["sma/0", "sma/1", "sma/10", "sma/11", "sma/2", "sma/3"]);
    } finally {
      paging.close();
    }
  });

  test("an object that is not a snapshot loads as STATE_CORRUPTED naming it", async () => {
    const store = freshStore();
    await client.putObject(bucket, `${store.prefix}bad.json`, new TextEncoder().encode("{not json"));
    await client.putObject(bucket, `${store.prefix}odd.json`, new TextEncoder().encode('{"hello":1}'));
    await expect(store.load("bad")).rejects.toMatchObject({ code: "STATE_CORRUPTED", message: `snapshot s3://${bucket}/${store.prefix}bad.json is not valid JSON` });
    await expect(store.load("odd")).rejects.toMatchObject({ code: "STATE_CORRUPTED" });
  });
});

describe("what a user meets when S3 is not as expected", () => {
  test("a bucket that does not exist: INVALID_SETTINGS (fatal), saying to create it", async () => {
    const store = new S3StateStore(client, `${bucket}-missing`, "p/");
    const error = await store.put("k", new Uint8Array([1])).catch((e) => e);
    expect(error.code).toBe("INVALID_SETTINGS");
    expect(recoveryOf(error)).toBe("fatal");
    expect(error.message).toBe(
      `could not write s3://${bucket}-missing/p/k.bin: the bucket "${bucket}-missing" does not exist; create it (AwsS3Client.ensureBucket, or \`aws s3 mb s3://${bucket}-missing\`) or name an existing bucket`,
    );
    await expect(store.get("k")).rejects.toMatchObject({ code: "INVALID_SETTINGS" });
    await expect(store.list("")).rejects.toMatchObject({ code: "INVALID_SETTINGS" });
  });

  test("a wrong secret: INVALID_SETTINGS (fatal), naming the variables to check", async () => {
    const wrong = new AwsS3Client({ ...options, secretAccessKey: "not-the-secret" });
    try {
      const error = await new S3StateStore(wrong, bucket, "p/").get("k").catch((e) => e);
      expect(error.code).toBe("INVALID_SETTINGS");
      expect(error.message).toContain("access denied");
      expect(error.message).toContain("FV_S3_ACCESS_KEY, FV_S3_SECRET_KEY");
    } finally {
      wrong.close();
    }
  });

  test("a server that does not answer: HOST_UNAVAILABLE (retryable)", async () => {
    const nowhere = new AwsS3Client({ ...options, endpoint: "http://127.0.0.1:1" });
    try {
      const error = await new S3StateStore(nowhere, bucket, "p/").save("k", { version: 1, op: "lastN", watermark: null, entries: [] }).catch((e) => e);
      expect(error.code).toBe("HOST_UNAVAILABLE");
      expect(recoveryOf(error)).toBe("retryable");
      expect(error.message).toStartWith(`could not write s3://${bucket}/p/k.json: the S3 service did not answer`);
    } finally {
      nowhere.close();
    }
  });

  test("a key the server would rewrite is refused before it is sent", async () => {
    const store = freshStore();
    expect((await store.put("a//b", new Uint8Array([1])).catch((e) => e)).code).toBe("INVALID_SETTINGS");
    expect(await store.list("")).toEqual([]);
  });

  test("ensureBucket is idempotent", async () => {
    expect(await client.ensureBucket(bucket)).toBe(false);
  });
});

/** The round trip as a module any runtime runs: put, get, list, delete, save, load, restore. */
function roundTripScript(src: string, ext: "ts" | "js"): string {
  return `
    const { AwsS3Client, s3OptionsFromEnv } = await import(${JSON.stringify(`${src}/state/aws-s3-client.${ext}`)});
    const { S3StateStore } = await import(${JSON.stringify(`${src}/state/s3-store.${ext}`)});
    const { operatorSteps } = await import(${JSON.stringify(`${src}/ops/index.${ext}`)});
    const env = globalThis.Deno ? Deno.env.toObject() : process.env;
    const client = new AwsS3Client({ ...s3OptionsFromEnv(env), pageSize: 1 });
    const store = new S3StateStore(client, ${JSON.stringify(bucket)}, env.FV_RT_PREFIX);
    const bytes = Uint8Array.from({ length: 256 }, (_, i) => i);
    await store.put("a/1", bytes);
    await store.put("a/2", new Uint8Array([1]));
    await store.put("b/1", new Uint8Array(0));
    const got = await store.get("a/1");
    const listed = await store.list("a/");
    await store.delete("a/2");
    const kind = operatorSteps.lastN;
    const compiled = kind.compile(${JSON.stringify(v.parse(operatorSteps.lastN!.schema, { op: "lastN", timeColumn: "ts", n: 2, column: "px", groupBy: ["sym"] }))}, { stage: 0, step: 0, inputs: 1 });
    const op = compiled.create();
    op.process({ ts: 1, sym: "A", px: 1 }, 1, 0);
    await store.save("lastN/0", op.snapshot());
    const fresh = compiled.create();
    fresh.restoreSnapshot(await store.load("lastN/0"));
    const rows = fresh.process({ ts: 2, sym: "A", px: 2 }, 2, 0).rows;
    const objects = await client.listObjects(${JSON.stringify(bucket)}, env.FV_RT_PREFIX);
    console.log(JSON.stringify({ same: got.length === 256 && got.every((b, i) => b === i), listed, after: await store.list(""), objects: objects.map((o) => o.slice(env.FV_RT_PREFIX.length)), missing: (await store.get("a/2")) === undefined, rows }));
    client.close();
  `;
}

const expectedRoundTrip = { same: true, listed: ["a/1", "a/2"], after: ["a/1", "b/1"], objects: ["a/1.bin", "b/1.bin", "lastN/0.json"], missing: true, rows: [{ sym: "A", last: [1, 2] }] };

describe("the same round trip on each runtime", () => {
  const src = `${root}src`;
  test("Bun", () => {
    const out = spawnSync(`${root}node_modules/.bin/bun`, ["run", "-"], { encoding: "utf8", input: roundTripScript(src, "ts"), env: { ...process.env, FV_RT_PREFIX: "rt-bun/" }, cwd: root });
    expect(out.stderr).toBe("");
    expect(JSON.parse(out.stdout)).toEqual(expectedRoundTrip);
  });

  test("Deno", () => {
    const out = spawnSync(`${root}node_modules/.bin/deno`, ["run", "-A", "--config", `${root}deno.json`, "-"], {
      encoding: "utf8",
      input: roundTripScript(src, "ts"),
      env: { ...process.env, FV_RT_PREFIX: "rt-deno/", NO_COLOR: "1" },
    });
    expect(out.stderr).toBe("");
    expect(JSON.parse(out.stdout)).toEqual(expectedRoundTrip);
  });

  test("Node (24, TypeScript sources through --experimental-transform-types)", () => {
    const out = spawnSync(`${root}node_modules/.bin/node`, ["--experimental-transform-types", "--no-warnings", "--input-type=module", "-e", roundTripScript(src, "ts")], {
      encoding: "utf8",
      env: { ...process.env, FV_RT_PREFIX: "rt-node/" },
      cwd: root,
    });
    expect(out.stderr).toBe("");
    expect(JSON.parse(out.stdout)).toEqual(expectedRoundTrip);
  });
});
