/**
 * Snapshots and other state in an S3 bucket (AWS S3, or any server that speaks its API:
 * SeaweedFS, MinIO, moto ...), through a four-method `S3Client` the caller hands in. This module
 * imports no S3 library: `AwsS3Client` (./aws-s3-client.ts) is the default client, over
 * `@aws-sdk/client-s3`, and a test can pass a Map.
 */
import { FvError } from "../errors.ts";
import type { OperatorSnapshot } from "../ops/operator.ts";
import type { StateStore } from "../ops/state-store.ts";
import { nonJsonPath } from "../ops/state-values.ts";
import { type AsyncStateStore, jsonBytes } from "./async-store.ts";

/**
 * What an S3StateStore needs of an S3 service. The design named three methods; `deleteObject`
 * is the fourth, because `AsyncStateStore.delete` needs it.
 */
export interface S3Client {
  /** Writes the whole object (S3 replaces it at once: a reader sees the old bytes or the new ones). */
  putObject(bucket: string, key: string, data: Uint8Array): Promise<void>;
  /** The object's bytes, or undefined when there is no object under `key`. */
  getObject(bucket: string, key: string): Promise<Uint8Array | undefined>;
  /** Every object key that starts with `prefix`: all pages, sorted. */
  listObjects(bucket: string, prefix: string): Promise<string[]>;
  /** Removes the object; removing one that is not there is not an error (S3 answers 204 either way). */
  deleteObject(bucket: string, key: string): Promise<void>;
}

/**
 * How an S3 call failed, sorted by what the caller can do about it:
 * `no-bucket` and `denied` need a change of settings, `unavailable` may pass with a retry (the
 * network, a 5xx, throttling), `refused` will not (any other 4xx).
 */
export type S3FailureKind = "no-bucket" | "denied" | "unavailable" | "refused";

/**
 * The error an `S3Client` throws to say which kind of failure it met, so the store can sort it.
 * Anything else a client throws counts as `refused`.
 */
export class S3ClientError extends Error {
  readonly kind: S3FailureKind;

  constructor(kind: S3FailureKind, message: string, options: { cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "S3ClientError";
    this.kind = kind;
  }
}

/**
 * Operator snapshots (`StateStore`) and bytes (`AsyncStateStore`) in one bucket, under one
 * prefix, laid out as `FileStateStore` lays out its files: a snapshot saved under key `k` is the
 * object `<prefix>k.json` (its JSON), a value put under `k` is `<prefix>k.bin` (its bytes), so
 * the two never meet, and `list` gives the keys of values only. Keys go into object names as
 * they are (S3 keys are any UTF-8, and slashes keep the console's folders), so `list` is S3's
 * own prefix listing.
 *
 * Errors are FvErrors naming the bucket, the object and the fix: a missing bucket or refused
 * credentials are INVALID_SETTINGS (fatal), an unreachable server or a 5xx is HOST_UNAVAILABLE
 * (retryable), any other refusal STATE_STORE_FAILED, a snapshot that does not decode
 * STATE_CORRUPTED.
 *
 * @example
 * import { AwsS3Client, s3OptionsFromEnv } from "./aws-s3-client.ts";
 * const client = new AwsS3Client(s3OptionsFromEnv(process.env)); // the local server by default
 * await client.ensureBucket("fv-state");
 * const store = new S3StateStore(client, "fv-state", "prices/");
 * await store.save("sma/partition-0", op.snapshot()); // object prices/sma/partition-0.json
 * const saved = await store.load("sma/partition-0");
 * if (saved) fresh.restoreSnapshot(saved);
 */
export class S3StateStore implements StateStore, AsyncStateStore {
  readonly #client: S3Client;
  readonly #bucket: string;
  readonly #prefix: string;

  constructor(client: S3Client, bucket: string, prefix = "") {
    if (bucket === "") throw new FvError("INVALID_SETTINGS", "S3StateStore needs a bucket name", { context: { bucket } });
    this.#client = client;
    this.#bucket = bucket;
    this.#prefix = prefix;
  }

  get bucket(): string {
    return this.#bucket;
  }

  get prefix(): string {
    return this.#prefix;
  }

  /**
   * The object a key lives in: `<prefix><key>.json` for a snapshot, `<prefix><key>.bin` for a
   * value. Refuses what S3 does not take (an empty key, more than 1024 bytes) and what
   * S3-compatible servers rewrite, so that two keys never land on one object: SeaweedFS collapses
   * `a//b` and `a\b` into `a/b` and refuses `.` and `..` segments (checked on the server
   * scripts/s3.sh runs).
   */
  objectKeyOf(key: string, extension: ".json" | ".bin" = ".json"): string {
    const objectKey = this.#prefix + key + extension;
    const bytes = new TextEncoder().encode(objectKey).length;
    let why: string | undefined;
    if (key === "") why = "the key is empty";
    else if (bytes > 1024) why = `it is ${bytes} bytes long, and S3 takes at most 1024`;
    else if (objectKey.startsWith("/") || objectKey.includes("//")) why = "it has an empty path segment (a leading or double slash), which S3-compatible servers collapse";
    else if (objectKey.includes("\\")) why = "it has a backslash, which S3-compatible servers turn into a slash";
    else if (objectKey.split("/").some((segment) => segment === "." || segment === "..")) why = "it has a . or .. segment, which S3-compatible servers refuse or resolve";
    if (why !== undefined) {
      throw new FvError("INVALID_SETTINGS", `S3StateStore cannot use the object key ${JSON.stringify(objectKey)} in bucket ${JSON.stringify(this.#bucket)}: ${why}; choose another key`, {
        context: { bucket: this.#bucket, key, objectKey },
      });
    }
    return objectKey;
  }

  async save(key: string, snapshot: OperatorSnapshot): Promise<void> {
    // JSON.stringify would quietly turn NaN into null: refuse instead of writing a wrong snapshot.
    const bad = nonJsonPath(snapshot);
    if (bad !== undefined) {
      throw new FvError("STATE_CORRUPTED", `cannot save snapshot ${JSON.stringify(key)}: it holds ${bad.what} at ${bad.path || "the top"}, which JSON cannot carry`, {
        context: { bucket: this.#bucket, key, path: bad.path },
      });
    }
    const objectKey = this.objectKeyOf(key);
    const bytes = jsonBytes(snapshot);
    await this.#call("write", key, objectKey, () => this.#client.putObject(this.#bucket, objectKey, bytes));
  }

  async load(key: string): Promise<OperatorSnapshot | undefined> {
    const objectKey = this.objectKeyOf(key);
    const bytes = await this.#call("read", key, objectKey, () => this.#client.getObject(this.#bucket, objectKey));
    if (bytes === undefined) return undefined;
    const where = `s3://${this.#bucket}/${objectKey}`;
    const context = { bucket: this.#bucket, key, objectKey };
    let parsed: unknown;
    try {
      parsed = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes));
    } catch (error) {
      throw new FvError("STATE_CORRUPTED", `snapshot ${where} is not valid JSON`, { cause: error, context });
    }
    const s = parsed as Partial<OperatorSnapshot> | null;
    if (typeof s !== "object" || s === null || typeof s.version !== "number" || typeof s.op !== "string" || !Array.isArray(s.entries)) {
      throw new FvError("STATE_CORRUPTED", `snapshot ${where} is not a snapshot (it needs version, op and entries)`, { context });
    }
    return s as OperatorSnapshot;
  }

  async get(key: string): Promise<Uint8Array | undefined> {
    const objectKey = this.objectKeyOf(key, ".bin");
    return await this.#call("read", key, objectKey, () => this.#client.getObject(this.#bucket, objectKey));
  }

  async put(key: string, value: Uint8Array): Promise<void> {
    const objectKey = this.objectKeyOf(key, ".bin");
    await this.#call("write", key, objectKey, () => this.#client.putObject(this.#bucket, objectKey, value));
  }

  async delete(key: string): Promise<void> {
    const objectKey = this.objectKeyOf(key, ".bin");
    await this.#call("delete", key, objectKey, () => this.#client.deleteObject(this.#bucket, objectKey));
  }

  async list(prefix: string): Promise<string[]> {
    const from = this.#prefix + prefix;
    const objectKeys = await this.#call("list", undefined, from, () => this.#client.listObjects(this.#bucket, from));
    const keys: string[] = [];
    for (const objectKey of objectKeys) {
      // Values only (snapshots end in .json); and a client that lists too much must not leak other keys in.
      if (objectKey.startsWith(from) && objectKey.endsWith(".bin")) keys.push(objectKey.slice(this.#prefix.length, -".bin".length));
    }
    return keys.sort();
  }

  /** Runs one client call and turns its failure into an FvError that names the object (or, for a list, the prefix) and the fix. */
  async #call<T>(action: "read" | "write" | "delete" | "list", key: string | undefined, objectKey: string, call: () => Promise<T>): Promise<T> {
    try {
      return await call();
    } catch (error) {
      if (error instanceof FvError) throw error;
      const kind = error instanceof S3ClientError ? error.kind : "refused";
      const what = `could not ${action} ${key === undefined ? "the keys under " : ""}s3://${this.#bucket}/${objectKey}`;
      const why = (error as Error)?.message ?? String(error);
      const context = { bucket: this.#bucket, ...(key === undefined ? { prefix: objectKey } : { key, objectKey }), s3: kind };
      switch (kind) {
        case "no-bucket":
          throw new FvError("INVALID_SETTINGS", `${what}: the bucket ${JSON.stringify(this.#bucket)} does not exist; create it (AwsS3Client.ensureBucket, or \`aws s3 mb s3://${this.#bucket}\`) or name an existing bucket`, {
            cause: error,
            context,
          });
        case "denied":
          throw new FvError("INVALID_SETTINGS", `${what}: access denied (${why}); check the access key and secret (FV_S3_ACCESS_KEY, FV_S3_SECRET_KEY) and what they may do in this bucket`, {
            cause: error,
            context,
          });
        case "unavailable":
          throw new FvError("HOST_UNAVAILABLE", `${what}: the S3 service did not answer (${why}); retry later, and check the endpoint (for the local server: scripts/s3.sh status)`, {
            cause: error,
            context,
          });
        default:
          throw new FvError("STATE_STORE_FAILED", `${what}: S3 refused it (${why})`, { cause: error, context });
      }
    }
  }
}
