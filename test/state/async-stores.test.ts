/**
 * The async store contracts: FileStateStore's get/put/delete/list on real files, the Deduplicator's
 * durable window over any AsyncStateStore, and StoreCheckpointer's order (snapshot, then cursor).
 */
import { afterEach, describe, expect, test } from "bun:test";
import { appendFileSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { FvError } from "../../src/errors.ts";
import { FileStateStore } from "../../src/ops/index.ts";
import { type AsyncStateStore, CursorsIn } from "../../src/state/async-store.ts";
import { StoreCheckpointer } from "../../src/state/checkpointer.ts";
import { Deduplicator } from "../../src/state/deduplicator.ts";
import { nodeFiles } from "../../src/state/node-files.ts";
import { compileOp, row, run, wm } from "../ops/helpers.ts";

const bytes = (text: string) => new TextEncoder().encode(text);
const text = (value: Uint8Array | undefined) => (value === undefined ? undefined : new TextDecoder().decode(value));

/** An AsyncStateStore in a Map that records each call, and can be told to fail or hang. */
function memoryStore() {
  const data = new Map<string, Uint8Array>();
  const calls: string[] = [];
  let fail: string | undefined;
  let hang: string | undefined;
  const store: AsyncStateStore & { data: Map<string, Uint8Array>; calls: string[]; failOn(key?: string): void; hangOn(key?: string): void } = {
    data,
    calls,
    failOn: (key) => void (fail = key),
    hangOn: (key) => void (hang = key),
    get: (key) => (calls.push(`get ${key}`), Promise.resolve(data.get(key))),
    put: (key, value) => {
      calls.push(`put ${key}`);
      if (fail !== undefined && key.startsWith(fail)) return Promise.reject(new FvError("HOST_UNAVAILABLE", `cannot write ${key}`));
      if (hang !== undefined && key.startsWith(hang)) return new Promise(() => {});
      data.set(key, value);
      return Promise.resolve();
    },
    delete: (key) => (calls.push(`delete ${key}`), data.delete(key), Promise.resolve()),
    list: (prefix) => (calls.push(`list ${prefix}`), Promise.resolve([...data.keys()].filter((k) => k.startsWith(prefix)).sort())),
  };
  return store;
}

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});
const tempDir = () => {
  const dir = mkdtempSync(join(tmpdir(), "fv-async-store-"));
  dirs.push(dir);
  return dir;
};

describe("FileStateStore as an AsyncStateStore", () => {
  test("put, get, list by prefix (sorted, keys as given), delete; a missing key is undefined and deleting it is not an error", async () => {
    const dir = tempDir();
    const store = new FileStateStore(join(dir, "store"), nodeFiles());
    await store.put("orders/p1/000002", bytes("two"));
    await store.put("orders/p1/000001", bytes("one"));
    await store.put("orders/p10/000001", bytes("ten"));
    await store.put("other.key", bytes("x"));
    expect(text(await store.get("orders/p1/000001"))).toBe("one");
    expect(await store.get("nothing")).toBeUndefined();
    expect(await store.list("orders/p1/")).toEqual(["orders/p1/000001", "orders/p1/000002"]);
    expect(await store.list("")).toEqual(["orders/p1/000001", "orders/p1/000002", "orders/p10/000001", "other.key"]);
    await store.delete("orders/p1/000001");
    await store.delete("never-there");
    expect(await store.list("orders/")).toEqual(["orders/p1/000002", "orders/p10/000001"]);
    // One file per key, written through a .tmp file and renamed: none left behind.
    expect(readdirSync(join(dir, "store")).filter((f) => f.endsWith(".tmp"))).toEqual([]);
  });

  test("without byte access the async methods say what to pass", async () => {
    const store = new FileStateStore("/x", { readFile: async () => undefined, writeFile: async () => {} });
    await expect(store.get("k")).rejects.toThrow("FileStateStore.get needs files that read and write bytes, list and remove");
  });
});

describe("Deduplicator", () => {
  test("a replay through it delivers each id once; a new instance (a restart) reads the durable window", async () => {
    const store = memoryStore();
    const delivered: string[] = [];
    const deliver = async (dedup: Deduplicator, ids: string[]) => {
      for (const id of ids) {
        if (!(await dedup.isNew(id))) continue;
        delivered.push(id);
        await dedup.remember(id);
      }
    };
    const first = new Deduplicator(store, "sink/p0").withWindow(100);
    await deliver(first, ["a", "b", "c"]);
    // The process dies; the source is replayed from before "a", with "d" new.
    const second = new Deduplicator(store, "sink/p0").withWindow(100);
    await deliver(second, ["a", "b", "c", "d", "a"]);
    expect(delivered).toEqual(["a", "b", "c", "d"]);
    // Another namespace has its own window.
    expect(await new Deduplicator(store, "sink/p1").isNew("a")).toBe(true);
  });

  test("keeps the latest `window` ids: older segments are deleted from the store and forgotten", async () => {
    const store = memoryStore();
    const dedup = new Deduplicator(store, "w").withWindow(16); // segments of 2 ids
    for (let i = 0; i < 40; i++) await dedup.remember([`id${i}`]);
    const segments = await store.list("w/");
    // Ids are the lines; "\u0000v2" heads each segment and "\u0000" settles the ids above it.
    const held = segments.flatMap((k) => text(store.data.get(k))!.split("\n").filter(Boolean).map((line) => JSON.parse(line) as string).filter((id) => !id.startsWith("\u0000")));
    // At least the last 16 ids, and less than a segment more.
    expect(held.length).toBeGreaterThanOrEqual(16);
    expect(held.length).toBeLessThan(16 + 2);
    expect(held.slice(-16)).toEqual(Array.from({ length: 16 }, (_, i) => `id${24 + i}`));
    expect(await dedup.isNew("id39")).toBe(false);
    expect(await dedup.isNew("id24")).toBe(false);
    expect(await dedup.isNew("id0")).toBe(true);
    // After a restart, the same.
    const again = new Deduplicator(store, "w").withWindow(16);
    expect(await again.isNew("id24")).toBe(false);
    expect(await again.isNew("id0")).toBe(true);
  });

  test("remember writes only the open segment; a batch of ids is one write", async () => {
    const store = memoryStore();
    const dedup = new Deduplicator(store, "n", { window: 800 }); // segments of 100 ids
    await dedup.remember(Array.from({ length: 50 }, (_, i) => `x${i}`));
    await dedup.remember(Array.from({ length: 50 }, (_, i) => `y${i}`));
    await dedup.remember(["z"]);
    expect(store.calls.filter((c) => c.startsWith("put"))).toEqual(["put n/000000000001", "put n/000000000001", "put n/000000000002"]);
  });

  test("rememberNow (a file store) appends, durable when it returns; forget takes ids back; a torn last line is left out; a store without appendNow cannot", async () => {
    const dir = tempDir();
    const store = new FileStateStore(join(dir, "w"), nodeFiles());
    const dedup = new Deduplicator(store, "sink/p0");
    expect(dedup.canRememberNow).toBe(false); // the window is not read yet
    expect(await dedup.isNew("a")).toBe(true);
    expect(dedup.canRememberNow).toBe(true);
    dedup.rememberNow(["a", "b"]);
    dedup.settleNow();
    // Synchronously on disk: a second reader (a restart) sees them at once.
    expect(await new Deduplicator(store, "sink/p0").isNew("a")).toBe(false);
    dedup.rememberNow(["c\nd"]);
    dedup.settleNow();
    expect(readFileSync(join(dir, "w", "sink%2Fp0%2F000000000001.bin"), "utf8")).toBe('"\\u0000v2"\n"a"\n"b"\n"\\u0000"\n"c\\nd"\n"\\u0000"\n');
    await dedup.forget(["b"]);
    expect(await dedup.isNew("b")).toBe(true);
    expect(await new Deduplicator(store, "sink/p0").isNew("b")).toBe(true);
    expect(await new Deduplicator(store, "sink/p0").isNew("c\nd")).toBe(false);
    // A write cut short leaves a last line without its break: the ids before it still count.
    appendFileSync(join(dir, "w", "sink%2Fp0%2F000000000001.bin"), '"e');
    const after = new Deduplicator(store, "sink/p0");
    expect([await after.isNew("a"), await after.isNew("e")]).toEqual([false, true]);
    const remote = new Deduplicator(memoryStore(), "n");
    await remote.isNew("x");
    expect(remote.canRememberNow).toBe(false);
    expect(() => remote.rememberNow(["x"])).toThrow("rememberNow needs a store with appendNow");
  });

  test("ids written ahead and never settled (the process stopped between) are in doubt at the next load, and stay so across restarts until resolved", async () => {
    const dir = tempDir();
    const store = new FileStateStore(join(dir, "w"), nodeFiles());
    const open = async () => {
      const dedup = new Deduplicator(store, "sink/p0");
      await dedup.open();
      return dedup;
    };
    const first = await open();
    expect(first.inDoubt).toEqual([]);
    first.rememberNow(["a", "b"]);
    first.settleNow();
    first.rememberNow(["c", "d"]); // written ahead; the process dies before the request is handed on
    const second = await open();
    expect(second.inDoubt).toEqual(["c", "d"]);
    expect([await second.isNew("a"), await second.isNew("c"), await second.isNew("e")]).toEqual([false, false, true]);
    // The next run writes and settles a segment of its own, and dies before dealing with c and d: still in doubt.
    second.rememberNow(["e"]);
    second.settleNow();
    const third = await open();
    expect(third.inDoubt).toEqual(["c", "d"]);
    await third.resolve(["c"]);
    expect((await open()).inDoubt).toEqual(["d"]);
    await third.resolve(["d"]);
    const fourth = await open();
    expect(fourth.inDoubt).toEqual([]);
    expect(await fourth.isNew("c")).toBe(false);
    // A new segment's first request, cut off before it was settled: all of it in doubt.
    fourth.rememberNow(["f", "g"]);
    const fifth = await open();
    expect(fifth.inDoubt).toEqual(["f", "g"]);
    await fifth.resolve(["f", "g"]);
    // forget takes the pending ids back: what is left is settled.
    fifth.rememberNow(["h"]);
    await fifth.forget(["h"]);
    const sixth = await open();
    expect(sixth.inDoubt).toEqual([]);
    expect(await sixth.isNew("h")).toBe(true);
  });

  test("an id in doubt that has left the window is no longer in doubt (it is new again)", async () => {
    const dir = tempDir();
    const store = new FileStateStore(join(dir, "w"), nodeFiles());
    const first = new Deduplicator(store, "n", { window: 16 }); // segments of 2 ids
    await first.open();
    first.rememberNow(["x", "y"]); // never settled
    const second = new Deduplicator(store, "n", { window: 16 });
    await second.open();
    expect(second.inDoubt).toEqual(["x", "y"]);
    for (let i = 0; i < 20; i++) {
      second.rememberNow([`id${i}`]);
      second.settleNow();
      await second.prune();
    }
    const third = new Deduplicator(store, "n", { window: 16 });
    await third.open();
    expect(third.inDoubt).toEqual([]);
    expect(await third.isNew("x")).toBe(true);
    expect(await store.get("n/doubt")).toBeUndefined();
  });

  test("an older version's segment (ids only) is read as settled; the markers are JSON strings, which an older reader takes for ids no row has", async () => {
    const store = memoryStore();
    await store.put("old/000000000001", new TextEncoder().encode('"a"\n"b"\n'));
    const dedup = new Deduplicator(store, "old");
    await dedup.open();
    expect(dedup.inDoubt).toEqual([]);
    expect([await dedup.isNew("a"), await dedup.isNew("b"), await dedup.isNew("c")]).toEqual([false, false, true]);
    await dedup.remember(["c"]);
    const lines = text(store.data.get("old/000000000002"))!.split("\n").filter(Boolean);
    expect(lines.map((line) => typeof JSON.parse(line))).toEqual(["string", "string", "string"]);
  });

  test("remember and forget rewrite the segment settled: remember's ids are delivered already", async () => {
    const store = memoryStore();
    const dedup = new Deduplicator(store, "r");
    await dedup.remember(["a", "b"]);
    expect(text(store.data.get("r/000000000001"))).toBe('"\\u0000v2"\n"a"\n"b"\n"\\u0000"\n');
    await dedup.forget(["b"]);
    expect(text(store.data.get("r/000000000001"))).toBe('"\\u0000v2"\n"a"\n"\\u0000"\n');
    const again = new Deduplicator(store, "r");
    await again.open();
    expect(again.inDoubt).toEqual([]);
  });

  test("a window that is not a whole number above 0 is refused", () => {
    expect(() => new Deduplicator(memoryStore(), "n").withWindow(0)).toThrow("at least 1");
    expect(() => new Deduplicator(memoryStore(), "n", { window: 1.5 })).toThrow("whole number");
  });
});

describe("StoreCheckpointer", () => {
  const compiled = compileOp({ op: "lastN", timeColumn: "ts", n: 2, column: "px", groupBy: ["sym"] });

  test("writes the snapshot first and the cursor last; restore gives both back, restore-equivalent", async () => {
    const store = memoryStore();
    const checkpoints = new StoreCheckpointer(store, new CursorsIn(store), { deadlineMs: 1000, maxConsecutiveFailures: 3 });
    const op = compiled.create();
    run(op, "ts", [row({ ts: 1, sym: "A", px: 1 }), row({ ts: 2, sym: "A", px: 2 }), row({ ts: 3, sym: "A", px: 3 })]);
    await checkpoints.commit("prices/lastN/0", op.snapshot(), { "prices/0": "3" });
    expect(store.calls.map((c) => c.replace(/\/[^/]+$/, (id) => (c.startsWith("put snapshots/") ? "/<id>" : id)))).toEqual([
      "put snapshots/prices/lastN/0/<id>", "put cursors/prices/lastN/0", "list snapshots/prices/lastN/0/",
    ]);
    const saved = await checkpoints.restore("prices/lastN/0");
    expect(saved?.cursor).toEqual({ "prices/0": "3" });
    const fresh = compiled.create();
    fresh.restoreSnapshot(saved!.snapshot);
    const more = [row({ ts: 4, sym: "A", px: 4 }), wm(10)];
    expect(run(fresh, "ts", more)).toEqual(run(op, "ts", more));
    expect(checkpoints.counters).toEqual({ commits: 1, failures: 0, timeouts: 0 });
    expect(await checkpoints.restore("never")).toBeUndefined();
  });

  test("committing a key keeps the snapshots of keys below it (\"a\" and \"a/b\")", async () => {
    const store = memoryStore();
    const checkpoints = new StoreCheckpointer(store, new CursorsIn(store), { deadlineMs: 1000, maxConsecutiveFailures: 3 });
    const op = compiled.create();
    run(op, "ts", [row({ ts: 1, sym: "A", px: 1 })]);
    await checkpoints.commit("a/b", op.snapshot(), { "t/0": "1" });
    await checkpoints.commit("a", op.snapshot(), { "t/0": "1" });
    await checkpoints.commit("a", op.snapshot(), { "t/0": "2" });
    await checkpoints.commit("a", op.snapshot(), { "t/0": "3" });
    expect((await checkpoints.restore("a/b"))?.cursor).toEqual({ "t/0": "1" });
    expect((await checkpoints.restore("a"))?.cursor).toEqual({ "t/0": "3" });
    // "a" keeps its last two (a cursor write that timed out may land late naming the one before);
    // the first went. "a/b" keeps its one.
    expect((await store.list("snapshots/")).map((k) => k.replace(/\/[^/]+$/, ""))).toEqual(["snapshots/a", "snapshots/a", "snapshots/a/b"]);
  });

  test("a snapshot that fails to write leaves the old cursor; a hung one times out; failures in a row open the circuit", async () => {
    const store = memoryStore();
    const events: string[] = [];
    const metrics = { checkpointCommitted: () => void events.push("committed"), checkpointFailed: (kind: string) => void events.push(`failed ${kind}`) };
    const checkpoints = new StoreCheckpointer(store, new CursorsIn(store), { deadlineMs: 50, maxConsecutiveFailures: 3, metrics });
    const op = compiled.create();
    run(op, "ts", [row({ ts: 1, sym: "A", px: 1 })]);
    await checkpoints.commit("k", op.snapshot(), { "t/0": "1" });
    const first = await checkpoints.restore("k");
    store.failOn("snapshots/");
    await expect(checkpoints.commit("k", op.snapshot(), { "t/0": "2" })).rejects.toThrow("cannot write snapshots/k");
    expect((await checkpoints.restore("k"))?.cursor).toEqual({ "t/0": "1" });
    // A crash between the two writes: the new snapshot is there, its cursor is not. The reader
    // still gets the old cursor with the old snapshot, never the new snapshot with the old cursor.
    store.failOn("cursors/");
    run(op, "ts", [row({ ts: 2, sym: "A", px: 2 })]);
    await expect(checkpoints.commit("k", op.snapshot(), { "t/0": "2" })).rejects.toThrow("cannot write cursors/k");
    expect(await checkpoints.restore("k")).toEqual(first);
    store.failOn(undefined);
    store.hangOn("cursors/");
    const opened = await checkpoints.commit("k", op.snapshot(), { "t/0": "3" }).catch((e: FvError) => e);
    expect((opened as FvError).code).toBe("CHECKPOINT_CIRCUIT_OPEN");
    expect((opened as FvError).message).toContain('checkpoint step "cursor" took longer than 50 ms');
    expect(checkpoints.counters).toEqual({ commits: 1, failures: 3, timeouts: 1 });
    expect(events).toEqual(["committed", "failed error", "failed error", "failed timeout"]);
  });

  test("a snapshot JSON cannot carry (NaN) is refused before anything is written", async () => {
    const store = memoryStore();
    const checkpoints = new StoreCheckpointer(store, new CursorsIn(store), { deadlineMs: 1000, maxConsecutiveFailures: 3 });
    const snapshot = { version: 1, op: "lastN", entries: [["k", Number.NaN]] } as never;
    await expect(checkpoints.commit("k", snapshot, {})).rejects.toThrow("which JSON cannot carry");
    expect(store.calls).toEqual([]);
  });
});
