/**
 * The default `S3Client`: `@aws-sdk/client-s3`. The SDK is imported the first time a call needs
 * it (a dynamic import), so importing this module, or the store, costs nothing to a program that
 * never talks to S3. Tested on Bun, Deno and Node against the local server (scripts/s3.sh).
 */
import type * as Sdk from "@aws-sdk/client-s3";
import * as v from "valibot";
import { FvError } from "../errors.ts";
import { type S3Client, S3ClientError, type S3FailureKind } from "./s3-store.ts";

/** How to reach an S3 service. Without `accessKeyId`, the SDK's own chain (AWS_* variables, profiles, roles) finds credentials. */
export interface AwsS3ClientOptions {
  /** e.g. "http://127.0.0.1:8333"; undefined: AWS itself, in `region`. */
  endpoint?: string;
  /** Default "us-east-1" (the local server takes any). */
  region?: string;
  accessKeyId?: string;
  secretAccessKey?: string;
  /** Bucket in the path (`host/bucket/key`) instead of the host name: what local servers need. */
  forcePathStyle?: boolean;
  /** Most keys one ListObjectsV2 page asks for (S3's own cap and default is 1000). */
  pageSize?: number;
}

/** The local server of scripts/s3.sh: its default port and the credentials it is started with. */
export const LOCAL_S3 = {
  port: 8333,
  region: "us-east-1",
  accessKeyId: "fv-local",
  secretAccessKey: "fv-local-secret",
} as const;

/** Error names S3 gives a request whose credentials or signature it does not accept. */
const DENIED = new Set(["AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken", "AllAccessDisabled"]);
/** Error codes of a request that never got an answer (Node, Bun and Deno name them alike). */
const NETWORK = new Set(["ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "ENOTFOUND", "EAI_AGAIN", "EPIPE", "EHOSTUNREACH", "ENETUNREACH", "ECONNABORTED", "UND_ERR_SOCKET", "ConnectionRefused"]);

/** Sorts an SDK failure by what the caller can do about it, from the error's properties (never its text). */
export function s3FailureOf(error: unknown): S3FailureKind {
  const e = error as { name?: string; code?: string; $metadata?: { httpStatusCode?: number }; $retryable?: unknown; cause?: { code?: string } } | null;
  const status = e?.$metadata?.httpStatusCode;
  if (e?.name === "NoSuchBucket") return "no-bucket";
  if (status === 403 || DENIED.has(e?.name ?? "")) return "denied";
  if (status !== undefined && (status >= 500 || status === 429 || status === 408)) return "unavailable";
  if (e?.$retryable !== undefined || e?.name === "TimeoutError" || e?.name === "RequestTimeout") return "unavailable";
  if (NETWORK.has(e?.code ?? "") || NETWORK.has(e?.cause?.code ?? "")) return "unavailable";
  return "refused";
}

/**
 * `S3Client` over `@aws-sdk/client-s3`, from options or from an SDK client the caller already has.
 *
 * @example
 * const client = new AwsS3Client({ endpoint: "http://127.0.0.1:8333", accessKeyId: "fv-local", secretAccessKey: "fv-local-secret", forcePathStyle: true });
 * await client.ensureBucket("fv-state");
 * await client.putObject("fv-state", "a", new Uint8Array([1, 2]));
 * client.close();
 */
export class AwsS3Client implements S3Client {
  readonly #options: AwsS3ClientOptions;
  #client: Sdk.S3Client | undefined;
  /** Whether this object made the SDK client (and so closes it). */
  #owned = true;
  #sdk: Promise<typeof Sdk> | undefined;

  constructor(options: AwsS3ClientOptions | { client: Sdk.S3Client; pageSize?: number } = {}) {
    if ("client" in options) {
      this.#client = options.client;
      this.#owned = false;
      this.#options = { pageSize: options.pageSize };
    } else {
      this.#options = options;
    }
    const pageSize = this.#options.pageSize;
    if (pageSize !== undefined && !(Number.isInteger(pageSize) && pageSize >= 1 && pageSize <= 1000)) {
      throw new FvError("INVALID_SETTINGS", `AwsS3Client: pageSize must be a whole number from 1 to 1000, not ${pageSize}`, { context: { field: "pageSize" } });
    }
  }

  async putObject(bucket: string, key: string, data: Uint8Array): Promise<void> {
    const { client, sdk } = await this.#ready();
    await this.#send(() => client.send(new sdk.PutObjectCommand({ Bucket: bucket, Key: key, Body: data, ContentLength: data.byteLength })));
  }

  async getObject(bucket: string, key: string): Promise<Uint8Array | undefined> {
    const { client, sdk } = await this.#ready();
    try {
      const answer = await client.send(new sdk.GetObjectCommand({ Bucket: bucket, Key: key }));
      if (answer.Body === undefined) return new Uint8Array(0);
      return await answer.Body.transformToByteArray();
    } catch (error) {
      if ((error as { name?: string }).name === "NoSuchKey") return undefined;
      throw wrap(error);
    }
  }

  async listObjects(bucket: string, prefix: string): Promise<string[]> {
    const { client, sdk } = await this.#ready();
    const keys: string[] = [];
    let token: string | undefined;
    do {
      const page = await this.#send(() =>
        client.send(new sdk.ListObjectsV2Command({ Bucket: bucket, Prefix: prefix, ContinuationToken: token, MaxKeys: this.#options.pageSize }))
      );
      for (const object of page.Contents ?? []) if (object.Key !== undefined) keys.push(object.Key);
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token !== undefined);
    return keys.sort();
  }

  async deleteObject(bucket: string, key: string): Promise<void> {
    const { client, sdk } = await this.#ready();
    await this.#send(() => client.send(new sdk.DeleteObjectCommand({ Bucket: bucket, Key: key })));
  }

  /** Creates the bucket unless it exists; true when it created it. */
  async ensureBucket(bucket: string): Promise<boolean> {
    const { client, sdk } = await this.#ready();
    try {
      await client.send(new sdk.HeadBucketCommand({ Bucket: bucket }));
      return false;
    } catch (error) {
      // HEAD has no body, so a missing bucket is a bare 404 ("NotFound").
      if ((error as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode !== 404) throw wrap(error);
    }
    try {
      await client.send(new sdk.CreateBucketCommand({ Bucket: bucket }));
      return true;
    } catch (error) {
      const name = (error as { name?: string }).name;
      if (name === "BucketAlreadyOwnedByYou" || name === "BucketAlreadyExists") return false;
      throw wrap(error);
    }
  }

  /** Deletes every object in the bucket, then the bucket (for tests and demos that made one). */
  async removeBucket(bucket: string): Promise<void> {
    const { client, sdk } = await this.#ready();
    for (const key of await this.listObjects(bucket, "")) await this.deleteObject(bucket, key);
    await this.#send(() => client.send(new sdk.DeleteBucketCommand({ Bucket: bucket })));
  }

  /** Lets the SDK client's sockets go; idempotent. A client handed in is the caller's to close. */
  close(): void {
    if (this.#owned) this.#client?.destroy();
  }

  async #ready(): Promise<{ client: Sdk.S3Client; sdk: typeof Sdk }> {
    this.#sdk ??= import("@aws-sdk/client-s3");
    const sdk = await this.#sdk;
    if (this.#client === undefined) {
      const o = this.#options;
      this.#client = new sdk.S3Client({
        region: o.region ?? LOCAL_S3.region,
        ...(o.endpoint === undefined ? {} : { endpoint: o.endpoint }),
        ...(o.forcePathStyle === undefined ? {} : { forcePathStyle: o.forcePathStyle }),
        ...(o.accessKeyId === undefined ? {} : { credentials: { accessKeyId: o.accessKeyId, secretAccessKey: o.secretAccessKey ?? "" } }),
      });
    }
    return { client: this.#client, sdk };
  }

  async #send<T>(call: () => Promise<T>): Promise<T> {
    try {
      return await call();
    } catch (error) {
      throw wrap(error);
    }
  }
}

function wrap(error: unknown): S3ClientError {
  const e = error as { name?: string; message?: string; $metadata?: { httpStatusCode?: number } };
  const status = e?.$metadata?.httpStatusCode;
  const what = [e?.name === "Error" ? undefined : e?.name, status === undefined ? undefined : `HTTP ${status}`].filter(Boolean).join(", ");
  return new S3ClientError(s3FailureOf(error), `${e?.message || "S3 call failed"}${what ? ` (${what})` : ""}`, { cause: error });
}

const envSchema = v.object({
  FV_S3_ENDPOINT: v.optional(v.pipe(v.string(), v.regex(/^https?:\/\/[^/\s]+\/?$/, "FV_S3_ENDPOINT must be a URL such as http://127.0.0.1:8333 (scheme, host and port, no path)"))),
  FV_S3_PORT: v.optional(v.pipe(v.string(), v.regex(/^\d{1,5}$/, "FV_S3_PORT must be a port number"), v.transform(Number), v.maxValue(65535, "FV_S3_PORT must be at most 65535"))),
  FV_S3_REGION: v.optional(v.string()),
  FV_S3_ACCESS_KEY: v.optional(v.string()),
  FV_S3_SECRET_KEY: v.optional(v.string()),
  FV_S3_PATH_STYLE: v.optional(v.picklist(["true", "false"], "FV_S3_PATH_STYLE must be true or false")),
});

/**
 * Client options from FV_S3_* variables (pass `process.env` or `Deno.env.toObject()`). With
 * none set they reach the local server of scripts/s3.sh: http://127.0.0.1:$FV_S3_PORT (8333),
 * with its local credentials. With FV_S3_ENDPOINT set elsewhere and no FV_S3_ACCESS_KEY, the
 * SDK's own credential chain is used.
 *
 * @example
 * const client = new AwsS3Client(s3OptionsFromEnv(process.env));
 */
export function s3OptionsFromEnv(env: Record<string, string | undefined>): AwsS3ClientOptions {
  const picked: Record<string, string> = {};
  for (const key of Object.keys(envSchema.entries)) {
    const value = env[key]?.trim();
    if (value !== undefined && value !== "") picked[key] = value;
  }
  const result = v.safeParse(envSchema, picked);
  if (!result.success) {
    const issue = result.issues[0]!;
    const name = v.getDotPath(issue) ?? "setting";
    throw new FvError("INVALID_SETTINGS", `invalid setting ${name}=${JSON.stringify(picked[name] ?? "")}: ${issue.message}`, { context: { field: name } });
  }
  const s = result.output;
  const local = s.FV_S3_ENDPOINT === undefined;
  const endpoint = s.FV_S3_ENDPOINT ?? `http://127.0.0.1:${s.FV_S3_PORT ?? LOCAL_S3.port}`;
  const accessKeyId = s.FV_S3_ACCESS_KEY ?? (local ? LOCAL_S3.accessKeyId : undefined);
  const secretAccessKey = s.FV_S3_SECRET_KEY ?? (local ? LOCAL_S3.secretAccessKey : undefined);
  return {
    endpoint,
    region: s.FV_S3_REGION ?? LOCAL_S3.region,
    forcePathStyle: (s.FV_S3_PATH_STYLE ?? "true") === "true",
    ...(accessKeyId === undefined ? {} : { accessKeyId, secretAccessKey }),
  };
}
