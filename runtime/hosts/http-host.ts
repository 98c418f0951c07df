/**
 * The ControlPlane answered by a platform over HTTP (docs/control-plane.md has the contract):
 *
 *   GET  {base}/pipelines/{pipeline}/topology   → Topology
 *   GET  {base}/datasets/{dataset}              → TopicBinding
 *   POST {base}/builds/{build}/heartbeat        → { "signal": "Continue" | "Stop" }
 *   PUT  {base}/builds/{build}/record           ← BuildRecord
 *
 * Every answer is checked with a schema; a wrong one fails naming the endpoint and the field.
 * Requests time out, and failures a retry may fix (no connection, timeout, 5xx, 429) are retried
 * with exponential backoff. While the platform is unreachable the stream keeps running:
 * `heartbeat` answers ContinueUnreachable (it never throws) and `putRecord` keeps the latest
 * record of each build and sends it as soon as the platform answers again.
 */
import * as v from "valibot";
import { sinkConfigOf, sinkFieldsSchema } from "../../src/sinks/config.ts";
import { backoffMs, delay, SerialQueue } from "../../src/async.ts";
import { describeIssues } from "../../src/control/schema-issues.ts";
import { type BuildRecord, BuildSignal, type ControlPlane, FvError, type Logger, silentLogger, type TopicBinding, type Topology } from "../../src/index.ts";

export interface HttpHostOptions {
  /** The platform's base URL, e.g. `https://platform.example/api/v1` (the `--control-plane` flag). */
  baseUrl: string;
  /** Bearer token sent with every request (FV_CONTROL_PLANE_TOKEN). */
  token?: string;
  /** Most time one request may take. Default 5000 ms. */
  timeoutMs?: number;
  /** Extra attempts after a failure a retry may fix. Default 3. Heartbeats are never retried: the next one is. */
  retries?: number;
  /** Wait before the first retry; doubles each retry (with jitter), at most 10 s. Default 250 ms. */
  backoffMs?: number;
  /** The fetch to use (tests, proxies). Default: the global fetch. */
  fetch?: (input: Request) => Promise<Response>;
  log?: Logger;
}

const DEFAULT_TIMEOUT_MS = 5000;
const DEFAULT_RETRIES = 3;
const DEFAULT_BACKOFF_MS = 250;
/** Backoff never waits longer than this: a start should fail within a minute, not an hour. */
const MAX_BACKOFF_MS = 10_000;

const nonEmpty = v.pipe(v.string(), v.minLength(1, "must not be empty"));

const topologySchema = v.looseObject({
  stages: v.array(
    v.looseObject({
      inputs: v.array(nonEmpty),
      output: nonEmpty,
      steps: v.array(v.looseObject({ op: nonEmpty })),
    }),
  ),
});

const bindingSchema = v.object({
  apiName: v.optional(nonEmpty),
  topic: nonEmpty,
  brokers: v.pipe(v.string(), v.regex(/^[^\s,:]+:\d+(,[^\s,:]+:\d+)*$/, "must be host:port[,host:port]")),
  policy: v.optional(v.object({ deadLetter: v.optional(nonEmpty) }), {}),
  source: v.optional(v.picklist(["kafka"], 'must be "kafka"'), "kafka"),
  sink: v.optional(v.picklist(["kafka", "postgres", "http"], 'must be "kafka", "postgres" or "http"'), "kafka"),
});

const heartbeatSchema = v.object({ signal: v.picklist([BuildSignal.Continue, BuildSignal.Stop], 'must be "Continue" or "Stop"') });

/** Why a request did not get an answer a retry could not change. */
type Failure =
  | { kind: "unreachable"; why: string; attempts: number }
  | { kind: "refused"; status: number; body: string };

type Outcome = { ok: true; status: number; body: unknown } | ({ ok: false } & Failure);

/**
 * @example
 * const host = new HttpHost({ baseUrl: "http://127.0.0.1:8700", token: process.env.FV_CONTROL_PLANE_TOKEN, log });
 * const final = await runStream(host, "demo", "build-1", { id: "build-1", pipeline: "demo", kind: "stream", status: "STARTING" });
 * await host.flush(); // the last record, even if the platform was down when it was sent
 */
export class HttpHost implements ControlPlane {
  readonly baseUrl: string;
  readonly #token: string | undefined;
  readonly #timeoutMs: number;
  readonly #retries: number;
  readonly #backoffMs: number;
  readonly #fetch: (input: Request) => Promise<Response>;
  readonly #log: Logger;
  /** The latest record of each build not yet accepted by the platform. */
  readonly #pending = new Map<string, BuildRecord>();
  readonly #rejected = new WeakMap<BuildRecord, FvError>();
  readonly #drains = new SerialQueue();
  #reachable = true;

  constructor(options: HttpHostOptions) {
    if (!URL.canParse(options.baseUrl) || !/^https?:$/.test(new URL(options.baseUrl).protocol)) {
      throw new FvError("INVALID_SETTINGS", `the control plane URL ${JSON.stringify(options.baseUrl)} is not an http(s) URL (e.g. http://platform:8700)`, {
        context: { field: "control-plane" },
      });
    }
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.#token = options.token?.trim() || undefined;
    this.#timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.#retries = options.retries ?? DEFAULT_RETRIES;
    this.#backoffMs = options.backoffMs ?? DEFAULT_BACKOFF_MS;
    this.#fetch = options.fetch ?? ((request) => fetch(request));
    this.#log = options.log ?? silentLogger;
  }

  /** Options from the environment: FV_CONTROL_PLANE_TOKEN. */
  static fromEnv(baseUrl: string, env: Record<string, string | undefined>, options: Omit<HttpHostOptions, "baseUrl" | "token"> = {}): HttpHost {
    return new HttpHost({ ...options, baseUrl, token: env.FV_CONTROL_PLANE_TOKEN });
  }

  async topology(pipeline: string): Promise<Topology> {
    const path = `/pipelines/${encodeURIComponent(pipeline)}/topology`;
    const body = await this.#get(path, `pipeline "${pipeline}"`);
    return this.#check(topologySchema, body, "GET", path, "INVALID_TOPOLOGY") as Topology;
  }

  async resolveTopic(dataset: string): Promise<TopicBinding> {
    const path = `/datasets/${encodeURIComponent(dataset)}`;
    const body = await this.#get(path, `dataset "${dataset}"`);
    const binding = this.#check(bindingSchema, body, "GET", path, "INVALID_SETTINGS");
    if (binding.sink === "kafka") return { ...binding, apiName: binding.apiName ?? dataset };
    // A sink's fields sit beside the binding's, as in a pipeline file's dataset (docs/sinks.md).
    const { apiName: _a, brokers: _b, source: _s, ...fields } = body as Record<string, unknown>;
    const sinkConfig = sinkConfigOf(this.#check(sinkFieldsSchema, fields, "GET", path, "INVALID_SETTINGS"));
    return { ...binding, apiName: binding.apiName ?? dataset, sinkConfig };
  }

  /** Never throws: a platform that does not answer (or answers nonsense) means ContinueUnreachable. */
  async heartbeat(buildId: string): Promise<BuildSignal> {
    const path = `/builds/${encodeURIComponent(buildId)}/heartbeat`;
    // One attempt: the next heartbeat is the retry, and a slow one must not stack up behind it.
    const outcome = await this.#call("POST", path, {}, 0);
    if (!outcome.ok) {
      if (outcome.kind === "unreachable") this.#unreachable(`POST ${this.baseUrl}${path}`, outcome.why);
      else this.#log("warn", `the control plane refused a heartbeat (HTTP ${outcome.status}): ${outcome.body}; the stream keeps running`, { build: buildId });
      return BuildSignal.ContinueUnreachable;
    }
    this.#back();
    const parsed = v.safeParse(heartbeatSchema, outcome.body);
    if (!parsed.success) {
      this.#log("warn", this.#invalid("POST", path, heartbeatSchema, parsed.issues), { build: buildId });
      return BuildSignal.ContinueUnreachable;
    }
    if (this.#pending.size > 0) void this.#drain();
    return parsed.output.signal;
  }

  /**
   * Sends the record. While the platform is unreachable it is kept (the latest per build) and
   * re-sent once the platform answers a heartbeat or the next record; this resolves meanwhile.
   * A platform that refuses the record (4xx) makes this throw HOST_UNAVAILABLE.
   */
  async putRecord(buildId: string, record: BuildRecord): Promise<void> {
    this.#pending.set(buildId, record);
    await this.#drain();
    const rejection = this.#rejected.get(record);
    if (rejection) throw rejection;
  }

  /** Sends every kept record now. True when the platform has them all (call it before exiting). */
  async flush(): Promise<boolean> {
    await this.#drain();
    return this.#pending.size === 0;
  }

  /** The record of a build still waiting for the platform, if any. */
  pendingRecord(buildId: string): BuildRecord | undefined {
    return this.#pending.get(buildId);
  }

  /** One drain at a time, in call order, so an older record never lands after a newer one. */
  #drain(): Promise<void> {
    return this.#drains.run(() => this.#sendPending());
  }

  async #sendPending(): Promise<void> {
    for (;;) {
      const next = this.#pending.entries().next();
      if (next.done) return;
      const [buildId, record] = next.value;
      const path = `/builds/${encodeURIComponent(buildId)}/record`;
      // Known down: one attempt each time, so a stream's record cadence never piles up retries.
      const outcome = await this.#call("PUT", path, record, this.#reachable ? this.#retries : 0);
      if (!outcome.ok && outcome.kind === "unreachable") {
        this.#unreachable(`PUT ${this.baseUrl}${path}`, outcome.why, "keeping the latest build record to send when it answers");
        return;
      }
      // Sent or refused: either way this record is done; a newer one put meanwhile stays.
      if (this.#pending.get(buildId) === record) this.#pending.delete(buildId);
      if (outcome.ok) {
        this.#back();
      } else {
        this.#rejected.set(
          record,
          new FvError("HOST_UNAVAILABLE", `the control plane refused the build record: PUT ${this.baseUrl}${path} answered HTTP ${outcome.status}: ${outcome.body}`, {
            context: { build: buildId, status: outcome.status },
          }),
        );
      }
    }
  }

  #unreachable(request: string, why: string, what = "the stream keeps running"): void {
    if (!this.#reachable) return;
    this.#reachable = false;
    this.#log("warn", `the control plane is unreachable (${request}: ${why}); ${what}`);
  }

  #back(): void {
    if (this.#reachable) return;
    this.#reachable = true;
    this.#log("info", `the control plane at ${this.baseUrl} answers again${this.#pending.size ? "; sending the kept build record" : ""}`);
  }

  /** GET with retries; anything but a 2xx answer is an FvError saying what failed and what to do. */
  async #get(path: string, what: string): Promise<unknown> {
    const url = `${this.baseUrl}${path}`;
    const outcome = await this.#call("GET", path, undefined, this.#retries);
    if (outcome.ok) return outcome.body;
    if (outcome.kind === "unreachable") {
      throw new FvError(
        "HOST_UNAVAILABLE",
        `the control plane did not answer GET ${url} (${outcome.why}) after ${outcome.attempts} attempt(s). ` +
          `Check that the platform is running and reachable from this machine, and that --control-plane points at it.`,
        { context: { url } },
      );
    }
    if (outcome.status === 401 || outcome.status === 403) {
      throw new FvError(
        "INVALID_SETTINGS",
        `the control plane refused GET ${url} (HTTP ${outcome.status}): set FV_CONTROL_PLANE_TOKEN to a token it accepts${this.#token ? " (the one set was refused)" : " (none is set)"}`,
        { context: { url, field: "FV_CONTROL_PLANE_TOKEN" } },
      );
    }
    if (outcome.status === 404) {
      throw new FvError("INVALID_SETTINGS", `the control plane has no ${what}: GET ${url} answered 404${outcome.body ? ` (${outcome.body})` : ""}`, {
        context: { url },
      });
    }
    throw new FvError("HOST_UNAVAILABLE", `the control plane refused GET ${url}: HTTP ${outcome.status}${outcome.body ? `: ${outcome.body}` : ""}`, {
      context: { url },
    });
  }

  #check<S extends v.GenericSchema>(schema: S, body: unknown, method: string, path: string, code: "INVALID_TOPOLOGY" | "INVALID_SETTINGS"): v.InferOutput<S> {
    const result = v.safeParse(schema, body);
    if (result.success) return result.output;
    const field = describeIssues(schema, result.issues).field || "(body)";
    throw new FvError(code, this.#invalid(method, path, schema, result.issues), { context: { url: `${this.baseUrl}${path}`, field } });
  }

  #invalid(method: string, path: string, schema: unknown, issues: v.BaseIssue<unknown>[]): string {
    const described = describeIssues(schema, issues);
    return `the control plane answered ${method} ${this.baseUrl}${path} with an invalid body: field "${described.field || "(body)"}": ${described.message}`;
  }

  /**
   * One request, retried while a retry may help: no connection, a timeout, 5xx or 429.
   * Waits backoff, 2×backoff, 4×backoff … (at most MAX_BACKOFF_MS), each with up to 50% jitter
   * so many streams do not hammer a recovering platform in step.
   */
  async #call(method: string, path: string, body: unknown, retries: number): Promise<Outcome> {
    let attempts = 0;
    for (;;) {
      attempts++;
      const outcome = await this.#once(method, path, body, attempts);
      const retryable = !outcome.ok && (outcome.kind === "unreachable" || outcome.status >= 500 || outcome.status === 429);
      if (!retryable || attempts > retries) {
        if (!outcome.ok && outcome.kind === "refused" && retryable) {
          return { ok: false, kind: "unreachable", why: `HTTP ${outcome.status}${outcome.body ? `: ${outcome.body}` : ""}`, attempts };
        }
        return outcome;
      }
      const wait = backoffMs(attempts, { firstMs: this.#backoffMs, maxMs: MAX_BACKOFF_MS });
      await delay(wait / 2 + Math.random() * (wait / 2));
    }
  }

  async #once(method: string, path: string, body: unknown, attempts: number): Promise<Outcome> {
    const headers: Record<string, string> = { accept: "application/json" };
    if (this.#token) headers.authorization = `Bearer ${this.#token}`;
    if (body !== undefined) headers["content-type"] = "application/json";
    let response: Response;
    try {
      const request = new Request(`${this.baseUrl}${path}`, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(this.#timeoutMs),
      });
      response = await this.#fetch(request);
    } catch (error) {
      const name = (error as Error)?.name;
      const why = name === "TimeoutError" || name === "AbortError" ? `no answer within ${this.#timeoutMs} ms` : describe(error);
      return { ok: false, kind: "unreachable", why, attempts };
    }
    let text: string;
    try {
      text = await response.text();
    } catch (error) {
      return { ok: false, kind: "unreachable", why: `the answer broke off: ${describe(error)}`, attempts };
    }
    if (!response.ok) return { ok: false, kind: "refused", status: response.status, body: text.slice(0, 300) };
    if (text.trim() === "") return { ok: true, status: response.status, body: undefined };
    try {
      return { ok: true, status: response.status, body: JSON.parse(text) };
    } catch {
      // Not JSON: the schema check names it ("(body)": expected an object).
      return { ok: true, status: response.status, body: text };
    }
  }
}

function describe(error: unknown): string {
  const e = error as { message?: string; code?: string; cause?: { code?: string; message?: string } };
  const code = e?.code ?? e?.cause?.code;
  const message = e?.message ?? String(error);
  return code && !message.includes(code) ? `${code}: ${message}` : message;
}
