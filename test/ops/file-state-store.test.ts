import { describe, expect, test } from "bun:test";
import { mkdtemp, readFile, rename, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { FileStateStore, type OperatorSnapshot, type TextFiles } from "../../src/ops/index.ts";
import { compileOp, row, run, wm } from "./helpers.ts";

/** Files in a Map, recording every call. */
function memoryFiles(withRename: boolean): TextFiles & { files: Map<string, string>; calls: string[] } {
  const files = new Map<string, string>();
  const calls: string[] = [];
  const fs: TextFiles & { files: Map<string, string>; calls: string[] } = {
    files,
    calls,
    readFile: (path) => {
      calls.push(`read ${path}`);
      return Promise.resolve(files.get(path));
    },
    writeFile: (path, text) => {
      calls.push(`write ${path}`);
      files.set(path, text);
      return Promise.resolve();
    },
  };
  if (withRename) {
    fs.rename = (from, to) => {
      calls.push(`rename ${from} ${to}`);
      files.set(to, files.get(from)!);
      files.delete(from);
      return Promise.resolve();
    };
  }
  return fs;
}

const compiled = compileOp({ op: "lastN", timeColumn: "ts", n: 2, column: "px", groupBy: ["sym"] });

function sampleSnapshot(): OperatorSnapshot {
  const op = compiled.create();
  run(op, "ts", [row({ ts: 1, sym: "A", px: 1 }), row({ ts: 2, sym: "A", px: 2 }), row({ ts: 3, sym: "A", px: 3 }), wm(2)]);
  return op.snapshot();
}

describe("FileStateStore", () => {
  test("saves a snapshot as JSON and loads the same snapshot back; a key never saved loads as undefined", async () => {
    const fs = memoryFiles(false);
    const store = new FileStateStore("/state/", fs);
    const snapshot = sampleSnapshot();
    await store.save("prices/lastN/0", snapshot);
    expect(await store.load("prices/lastN/0")).toEqual(snapshot);
    expect(await store.load("other")).toBeUndefined();
    expect([...fs.files.keys()]).toEqual(["/state/prices%2FlastN%2F0.json"]);
  });

  test("keys become safe file names: no slash, no dot-dot", () => {
    const store = new FileStateStore("/state", memoryFiles(false));
    expect(store.pathOf("../../etc/passwd")).toBe("/state/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd.json");
    expect(store.pathOf("a b")).toBe("/state/a%20b.json");
  });

  test("with rename, a save writes a temporary file and renames it over the old one", async () => {
    const fs = memoryFiles(true);
    const store = new FileStateStore("/s", fs);
    await store.save("k", sampleSnapshot());
    expect(fs.calls).toEqual(["write /s/k.json.tmp", "rename /s/k.json.tmp /s/k.json"]);
    expect([...fs.files.keys()]).toEqual(["/s/k.json"]);
  });

  test("refuses to save a snapshot holding NaN rather than let JSON turn it into null", async () => {
    const fs = memoryFiles(false);
    const store = new FileStateStore("/s", fs);
    const snapshot = { ...sampleSnapshot(), watermark: Number.NaN };
    await expect(store.save("k", snapshot)).rejects.toMatchObject({ code: "STATE_CORRUPTED" });
    expect(fs.files.size).toBe(0);
  });

  test("a file that is not JSON, or not a snapshot, loads as STATE_CORRUPTED", async () => {
    const fs = memoryFiles(false);
    const store = new FileStateStore("/s", fs);
    fs.files.set(store.pathOf("bad"), "{not json");
    fs.files.set(store.pathOf("odd"), JSON.stringify({ hello: 1 }));
    await expect(store.load("bad")).rejects.toMatchObject({ code: "STATE_CORRUPTED" });
    await expect(store.load("odd")).rejects.toMatchObject({ code: "STATE_CORRUPTED" });
  });

  test("on a real directory (node:fs/promises), a restored operator carries on where the saved one stopped", async () => {
    const dir = await mkdtemp(join(tmpdir(), "fv-state-"));
    try {
      const store = new FileStateStore(dir, {
        readFile: (path) => readFile(path, "utf8").catch((error) => (error as { code?: string }).code === "ENOENT" ? undefined : Promise.reject(error)),
        writeFile: (path, text) => writeFile(path, text),
        rename,
      });
      const first = compiled.create();
      run(first, "ts", [row({ ts: 1, sym: "A", px: 1 }), row({ ts: 2, sym: "A", px: 2 }), row({ ts: 3, sym: "A", px: 3 })]);
      await store.save("lastN/0", first.snapshot());
      expect(await store.load("missing")).toBeUndefined();
      const second = compiled.create();
      second.restoreSnapshot((await store.load("lastN/0"))!);
      expect(second.process({ ts: 4, sym: "A", px: 4 }, 4, 0).rows).toEqual(first.process({ ts: 4, sym: "A", px: 4 }, 4, 0).rows);
      expect(second.process({ ts: 5, sym: "A", px: 5 }, 5, 0).rows).toEqual([{ sym: "A", last: [4, 5] }]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
