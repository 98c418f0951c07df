/**
 * S3StateStore over an in-memory S3Client (the store's own rules: object keys, JSON, checks and
 * errors), and AwsS3Client over a stand-in for the SDK client (paging, missing objects, how
 * failures are sorted). test/integration/s3-store.test.ts runs the store on the real server.
 */
import { describe, expect, test } from "bun:test";
import { readFile } from "node:fs/promises";
import { type Recovery, recoveryOf } from "../../src/errors.ts";
import type { OperatorSnapshot } from "../../src/ops/index.ts";
import { CursorsIn, jsonBytes } from "../../src/state/async-store.ts";
import { AwsS3Client, LOCAL_S3, s3FailureOf, s3OptionsFromEnv } from "../../src/state/aws-s3-client.ts";
import { type S3Client, S3ClientError, type S3FailureKind, S3StateStore } from "../../src/state/s3-store.ts";
import { compileOp, row, run, wm } from "../ops/helpers.ts";

/** What `fn` returns as a promise, or its throw as a rejection (an async call without an await). */
function settle<T>(fn: () => T): Promise<T> {
  try {
    return Promise.resolve(fn());
  } catch (error) {
    return Promise.reject(error);
  }
}

/** Buckets of objects in Maps, recording every call; `fail` makes the next calls throw. */
function memoryS3(buckets: string[] = ["b"]) {
  const objects = new Map<string, Map<string, Uint8Array>>(buckets.map((name) => [name, new Map()]));
  const calls: string[] = [];
  let failure: unknown;
  const bucketOf = (name: string) => {
    if (failure !== undefined) throw failure;
    const bucket = objects.get(name);
    if (bucket === undefined) throw new S3ClientError("no-bucket", `The specified bucket does not exist (NoSuchBucket, HTTP 404)`);
    return bucket;
  };
  const client: S3Client = {
    putObject: (bucket, key, data) =>
      settle(() => {
        calls.push(`put ${bucket} ${key}`);
        bucketOf(bucket).set(key, data.slice());
      }),
    getObject: (bucket, key) =>
      settle(() => {
        calls.push(`get ${bucket} ${key}`);
        return bucketOf(bucket).get(key)?.slice();
      }),
    listObjects: (bucket, prefix) =>
      settle(() => {
        calls.push(`list ${bucket} ${prefix}`);
        return [...bucketOf(bucket).keys()].filter((key) => key.startsWith(prefix)).sort();
      }),
    deleteObject: (bucket, key) =>
      settle(() => {
        calls.push(`delete ${bucket} ${key}`);
        bucketOf(bucket).delete(key);
      }),
  };
  return {
    client,
    objects,
    calls,
    fail(error: unknown) {
      failure = error;
    },
  };
}

const compiled = compileOp({ op: "lastN", timeColumn: "ts", n: 2, column: "px", groupBy: ["sym"] });

function sampleSnapshot(): OperatorSnapshot {
  const op = compiled.create();
  run(op, "ts", [row({ ts: 1, sym: "A", px: 1 }), row({ ts: 2, sym: "A", px: 2 }), row({ ts: 3, sym: "A", px: 3 }), wm(2)]);
  return op.snapshot();
}

const text = (s: string) => new TextEncoder().encode(s);

describe("S3StateStore (StateStore)", () => {
  test("saves a snapshot as JSON in <prefix><key>.json and loads the same snapshot back; a key never saved loads as undefined", async () => {
    const s3 = memoryS3();
    const store = new S3StateStore(s3.client, "b", "prices/");
    const snapshot = sampleSnapshot();
    await store.save("lastN/0", snapshot);
    expect([...s3.objects.get("b")!.keys()]).toEqual(["prices/lastN/0.json"]);
    expect(s3.objects.get("b")!.get("prices/lastN/0.json")).toEqual(jsonBytes(snapshot));
    expect(await store.load("lastN/0")).toEqual(snapshot);
    expect(await store.load("other")).toBeUndefined();
  });

  test("a restored operator carries on where the saved one stopped", async () => {
    const store = new S3StateStore(memoryS3().client, "b");
    const first = compiled.create();
    run(first, "ts", [row({ ts: 1, sym: "A", px: 1 }), row({ ts: 2, sym: "A", px: 2 }), row({ ts: 3, sym: "A", px: 3 })]);
    await store.save("lastN/0", first.snapshot());
    const second = compiled.create();
    second.restoreSnapshot((await store.load("lastN/0"))!);
    expect(second.process({ ts: 4, sym: "A", px: 4 }, 4, 0).rows).toEqual(first.process({ ts: 4, sym: "A", px: 4 }, 4, 0).rows);
    expect(second.process({ ts: 5, sym: "A", px: 5 }, 5, 0).rows).toEqual([{ sym: "A", last: [4, 5] }]);
  });

  test("refuses to save a snapshot holding NaN rather than let JSON turn it into null, and writes nothing", async () => {
    const s3 = memoryS3();
    const store = new S3StateStore(s3.client, "b");
    const error = await store.save("k", { ...sampleSnapshot(), watermark: Number.NaN }).catch((e) => e);
    expect(error).toMatchObject({ code: "STATE_CORRUPTED", context: { bucket: "b", key: "k", path: ".watermark" } });
    expect(error.message).toContain("NaN");
    expect(s3.calls).toEqual([]);
  });

  test("an object that is not JSON, not UTF-8, or not a snapshot loads as STATE_CORRUPTED naming the object", async () => {
    const s3 = memoryS3();
    const store = new S3StateStore(s3.client, "b", "p/");
    s3.objects.get("b")!.set("p/bad.json", text("{not json"));
    s3.objects.get("b")!.set("p/binary.json", new Uint8Array([0x7b, 0xff, 0xfe, 0x7d]));
    s3.objects.get("b")!.set("p/odd.json", text(JSON.stringify({ hello: 1 })));
    s3.objects.get("b")!.set("p/null.json", text("null"));
    await expect(store.load("bad")).rejects.toMatchObject({ code: "STATE_CORRUPTED", message: "snapshot s3://b/p/bad.json is not valid JSON" });
    await expect(store.load("binary")).rejects.toMatchObject({ code: "STATE_CORRUPTED" });
    await expect(store.load("odd")).rejects.toMatchObject({
      code: "STATE_CORRUPTED",
      message: "snapshot s3://b/p/odd.json is not a snapshot (it needs version, op and entries)",
      context: { bucket: "b", key: "odd", objectKey: "p/odd.json" },
    });
    await expect(store.load("null")).rejects.toMatchObject({ code: "STATE_CORRUPTED" });
  });
});

describe("S3StateStore (AsyncStateStore)", () => {
  test("put and get keep the exact bytes (every byte value, and an empty value) in <prefix><key>.bin; a missing key gets undefined", async () => {
    const s3 = memoryS3();
    const store = new S3StateStore(s3.client, "b", "x/");
    const all = Uint8Array.from({ length: 256 }, (_, i) => i);
    await store.put("all", all);
    await store.put("empty", new Uint8Array(0));
    expect([...s3.objects.get("b")!.keys()]).toEqual(["x/all.bin", "x/empty.bin"]);
    expect(await store.get("all")).toEqual(all);
    expect(await store.get("empty")).toEqual(new Uint8Array(0));
    expect(await store.get("missing")).toBeUndefined();
  });

  test("delete removes a key, and deleting a key that is not there is not an error", async () => {
    const s3 = memoryS3();
    const store = new S3StateStore(s3.client, "b");
    await store.put("k", text("v"));
    await store.delete("k");
    await store.delete("k");
    expect(await store.get("k")).toBeUndefined();
    expect(s3.calls.filter((c) => c.startsWith("delete"))).toEqual(["delete b k.bin", "delete b k.bin"]);
  });

  test("a snapshot and a value under one key are two objects, as with FileStateStore: save and put never meet, list gives values only", async () => {
    const s3 = memoryS3();
    const store = new S3StateStore(s3.client, "b");
    await store.save("k", sampleSnapshot());
    await store.put("k", text("bytes"));
    expect(await store.load("k")).toEqual(sampleSnapshot());
    expect(await store.get("k")).toEqual(text("bytes"));
    expect(await store.list("")).toEqual(["k"]);
    await store.delete("k");
    expect(await store.list("")).toEqual([]);
    expect(await store.load("k")).toEqual(sampleSnapshot());
  });

  test("list gives the keys under a prefix without the store's prefix, sorted, and never another store's keys", async () => {
    const s3 = memoryS3();
    const store = new S3StateStore(s3.client, "b", "mine/");
    const other = new S3StateStore(s3.client, "b", "mine-too/");
    for (const key of ["sma/2", "sma/10", "ema/0", "sma/1", "smart"]) await store.put(key, text(key));
    await other.put("sma/0", text("x"));
    expect(await store.list("sma/")).toEqual(["sma/1", "sma/10", "sma/2"]);
    expect(await store.list("")).toEqual(["ema/0", "sma/1", "sma/10", "sma/2", "smart"]);
    expect(await store.list("nothing/")).toEqual([]);
    expect(s3.calls).toContain("list b mine/sma/");
  });

  test("list drops keys a client returns outside the prefix, and sorts what a client returns unsorted", async () => {
    const s3 = memoryS3();
    const sloppy: S3Client = { ...s3.client, listObjects: () => Promise.resolve(["p/b.bin", "q/a.bin", "p/a.bin", "p", "p/c.json", "p/d"]) };
    expect(await new S3StateStore(sloppy, "b", "p/").list("")).toEqual(["a", "b"]);
  });

  test("a cursor kept with CursorsIn lives next to the snapshots, under cursors/", async () => {
    const store = new S3StateStore(memoryS3().client, "b", "job/");
    const cursors = new CursorsIn(store);
    await cursors.saveCursor("sma", { "prices/0": "9007199254740993" });
    expect(await cursors.loadCursor("sma")).toEqual({ "prices/0": "9007199254740993" });
    expect(await store.list("")).toEqual(["cursors/sma"]);
  });
});

describe("S3StateStore keys and errors", () => {
  test("keys S3-compatible servers would rewrite, or S3 refuses, are refused before any call", async () => {
    const s3 = memoryS3();
    const store = new S3StateStore(s3.client, "b", "p/");
    for (const key of ["", "a//b", "/a", "a\\b", "../x", "a/./b", "a/../b", "x".repeat(1020)]) {
      const error = await store.put(key, text("v")).catch((e) => e);
      expect({ key, code: error.code, bucket: error.context?.bucket }).toEqual({ key, code: "INVALID_SETTINGS", bucket: "b" });
    }
    expect(() => new S3StateStore(s3.client, "b", "/").objectKeyOf("a")).toThrow("empty path segment");
    expect(s3.calls).toEqual([]);
    for (const key of ["a b", "ünï/cødé", "dir/", "x?y=1&z#h", "..x", "a.b/c..d", "a/.."]) await store.put(key, text(key));
    expect(s3.calls.length).toBe(7);
  });

  const failures: Array<[S3FailureKind | "unsorted", string, Recovery, string]> = [
    ["no-bucket", "INVALID_SETTINGS", "fatal", `could not write s3://b/p/k.bin: the bucket "b" does not exist; create it (AwsS3Client.ensureBucket`],
    ["denied", "INVALID_SETTINGS", "fatal", "could not write s3://b/p/k.bin: access denied (nope); check the access key and secret (FV_S3_ACCESS_KEY, FV_S3_SECRET_KEY)"],
    ["unavailable", "HOST_UNAVAILABLE", "retryable", "could not write s3://b/p/k.bin: the S3 service did not answer (nope); retry later"],
    ["refused", "STATE_STORE_FAILED", "fatal", "could not write s3://b/p/k.bin: S3 refused it (nope)"],
    ["unsorted", "STATE_STORE_FAILED", "fatal", "could not write s3://b/p/k.bin: S3 refused it (nope)"],
  ];
  test.each(failures)("the client's %s failure becomes %s (%s), naming the bucket, the object and the fix", async (kind, code, recovery, message) => {
    const s3 = memoryS3();
    const store = new S3StateStore(s3.client, "b", "p/");
    const cause = kind === "unsorted" ? new Error("nope") : new S3ClientError(kind, "nope");
    s3.fail(cause);
    const error = await store.put("k", text("v")).catch((e) => e);
    expect(error.code).toBe(code);
    expect(recoveryOf(error)).toBe(recovery);
    expect(error.message).toStartWith(message);
    expect(error.cause).toBe(cause);
    expect(error.context).toMatchObject({ bucket: "b", key: "k", objectKey: "p/k.bin" });
  });

  test("a list that fails names the prefix it listed; a load that fails names the snapshot's object", async () => {
    const s3 = memoryS3();
    const store = new S3StateStore(s3.client, "b", "p/");
    s3.fail(new S3ClientError("unavailable", "connect ECONNREFUSED 127.0.0.1:8333"));
    await expect(store.list("sma/")).rejects.toMatchObject({ code: "HOST_UNAVAILABLE", context: { bucket: "b", prefix: "p/sma/" } });
    await expect(store.list("sma/")).rejects.toThrow("could not list the keys under s3://b/p/sma/");
    await expect(store.load("k")).rejects.toMatchObject({ code: "HOST_UNAVAILABLE", message: expect.stringContaining("could not read s3://b/p/k.json: the S3 service did not answer") });
  });

  test("a store needs a bucket", () => {
    expect(() => new S3StateStore(memoryS3().client, "")).toThrow("S3StateStore needs a bucket name");
  });
});

/** A stand-in for the SDK's S3Client: answers each command by its class name from a Map of objects. */
function fakeSdk(keys: string[], sent: Array<{ command: string; input: Record<string, unknown> }>) {
  const objects = new Map(keys.map((key) => [key, text(key)]));
  return {
    destroy() {},
    send: (command: { constructor: { name: string }; input: Record<string, unknown> }) => settle(() => {
      const input = command.input;
      sent.push({ command: command.constructor.name, input });
      switch (command.constructor.name) {
        case "ListObjectsV2Command": {
          // Answered in S3's order (UTF-8 bytes), MaxKeys at a time, continuing after the token.
          const all = [...objects.keys()].filter((k) => k.startsWith(String(input.Prefix ?? ""))).sort();
          const from = input.ContinuationToken === undefined ? 0 : Number(input.ContinuationToken);
          const size = Number(input.MaxKeys ?? 1000);
          const page = all.slice(from, from + size);
          const truncated = from + size < all.length;
          return { Contents: page.map((Key) => ({ Key })), IsTruncated: truncated, NextContinuationToken: truncated ? String(from + size) : undefined };
        }
        case "GetObjectCommand": {
          const body = objects.get(String(input.Key));
          if (body === undefined) throw Object.assign(new Error("The specified key does not exist."), { name: "NoSuchKey", $metadata: { httpStatusCode: 404 } });
          return { Body: { transformToByteArray: () => Promise.resolve(body) } };
        }
        default:
          throw Object.assign(new Error("We encountered an internal error. Please try again."), { name: "InternalError", $fault: "server", $metadata: { httpStatusCode: 500 } });
      }
    }),
  };
}

describe("AwsS3Client", () => {
  test("listObjects follows the continuation tokens through every page and returns the keys sorted", async () => {
    const sent: Array<{ command: string; input: Record<string, unknown> }> = [];
    const keys = ["p/e", "p/a", "q/z", "p/c", "p/b", "p/d"];
    const client = new AwsS3Client({ client: fakeSdk(keys, sent) as never, pageSize: 2 });
    expect(await client.listObjects("b", "p/")).toEqual(["p/a", "p/b", "p/c", "p/d", "p/e"]);
    expect(sent.map((s) => [s.input.Prefix, s.input.MaxKeys, s.input.ContinuationToken])).toEqual([["p/", 2, undefined], ["p/", 2, "2"], ["p/", 2, "4"]]);
  });

  test("getObject gives the bytes, or undefined for NoSuchKey; a 500 is an unavailable failure", async () => {
    const client = new AwsS3Client({ client: fakeSdk(["k"], []) as never });
    expect(await client.getObject("b", "k")).toEqual(text("k"));
    expect(await client.getObject("b", "other")).toBeUndefined();
    const error = await client.putObject("b", "k", text("v")).catch((e) => e);
    expect(error).toBeInstanceOf(S3ClientError);
    expect(error.kind).toBe("unavailable");
    expect(error.message).toBe("We encountered an internal error. Please try again. (InternalError, HTTP 500)");
  });

  test("a page size outside 1..1000 is refused", () => {
    expect(() => new AwsS3Client({ pageSize: 0 })).toThrow("pageSize must be a whole number from 1 to 1000");
    expect(() => new AwsS3Client({ pageSize: 1001 })).toThrow("pageSize");
  });

  const sdkError = (name: string, status?: number, extra: Record<string, unknown> = {}) =>
    Object.assign(new Error(name), { name, ...(status === undefined ? {} : { $metadata: { httpStatusCode: status } }), ...extra });
  test.each([
    ["NoSuchBucket (404)", "no-bucket", sdkError("NoSuchBucket", 404)],
    ["AccessDenied (403)", "denied", sdkError("AccessDenied", 403)],
    ["SignatureDoesNotMatch (403)", "denied", sdkError("SignatureDoesNotMatch", 403)],
    ["InvalidAccessKeyId (403)", "denied", sdkError("InvalidAccessKeyId", 403)],
    ["SlowDown (503)", "unavailable", sdkError("SlowDown", 503)],
    ["InternalError (500)", "unavailable", sdkError("InternalError", 500)],
    ["TooManyRequests (429)", "unavailable", sdkError("TooManyRequests", 429)],
    ["a refused connection", "unavailable", Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:8333"), { code: "ECONNREFUSED" })],
    ["a reset nested in a cause", "unavailable", Object.assign(new Error("socket hang up"), { cause: { code: "ECONNRESET" } })],
    ["a timeout", "unavailable", sdkError("TimeoutError")],
    ["InvalidRequest (400)", "refused", sdkError("InvalidRequest", 400)],
    ["EntityTooLarge (400)", "refused", sdkError("EntityTooLarge", 400)],
    ["a plain Error", "refused", new Error("Region is missing")],
  ] as const)("s3FailureOf sorts %s as %s", (_name, kind, error) => {
    expect(s3FailureOf(error)).toBe(kind);
  });

  test("neither module imports the SDK at load time: the store none at all, the client only on its first call", async () => {
    const store = await readFile(new URL("../../src/state/s3-store.ts", import.meta.url), "utf8");
    const client = await readFile(new URL("../../src/state/aws-s3-client.ts", import.meta.url), "utf8");
    const imports = (source: string) => source.split("\n").filter((line) => /^import |import\(/.test(line.trim()));
    expect(imports(store).filter((line) => line.includes("aws"))).toEqual([]);
    const sdkImports = imports(client).filter((line) => line.includes('"@aws-sdk/client-s3"'));
    expect(sdkImports).toEqual(['import type * as Sdk from "@aws-sdk/client-s3";', '    this.#sdk ??= import("@aws-sdk/client-s3");']);
  });
});

describe("s3OptionsFromEnv", () => {
  test("with nothing set, reaches the local server of scripts/s3.sh with its local keys", () => {
    expect(s3OptionsFromEnv({})).toEqual({
      endpoint: "http://127.0.0.1:8333",
      region: "us-east-1",
      forcePathStyle: true,
      accessKeyId: LOCAL_S3.accessKeyId,
      secretAccessKey: LOCAL_S3.secretAccessKey,
    });
    expect(s3OptionsFromEnv({ FV_S3_PORT: "9000", FV_S3_ACCESS_KEY: "k", FV_S3_SECRET_KEY: "s" })).toMatchObject({ endpoint: "http://127.0.0.1:9000", accessKeyId: "k", secretAccessKey: "s" });
  });

  test("with another endpoint and no keys, leaves the credentials to the SDK's own chain", () => {
    const options = s3OptionsFromEnv({ FV_S3_ENDPOINT: "https://s3.eu-west-1.amazonaws.com", FV_S3_REGION: "eu-west-1", FV_S3_PATH_STYLE: "false" });
    expect(options).toEqual({ endpoint: "https://s3.eu-west-1.amazonaws.com", region: "eu-west-1", forcePathStyle: false });
  });

  test("a bad value stops with a message naming the variable", () => {
    expect(() => s3OptionsFromEnv({ FV_S3_PORT: "eighty" })).toThrow('invalid setting FV_S3_PORT="eighty": FV_S3_PORT must be a port number');
    expect(() => s3OptionsFromEnv({ FV_S3_ENDPOINT: "localhost:8333" })).toThrow("FV_S3_ENDPOINT must be a URL");
    expect(() => s3OptionsFromEnv({ FV_S3_PATH_STYLE: "yes" })).toThrow("FV_S3_PATH_STYLE must be true or false");
  });
});
