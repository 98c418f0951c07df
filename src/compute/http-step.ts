/**
 * The `http` step: each row calls a service and takes its JSON answer into a column. Many calls
 * are in flight at once (`concurrency` per consumer); rows with the same order key are called one
 * after the other, in input order. See docs/http-step.md.
 *
 * A stage hands the step a batch of rows and waits for every row's result, in input order (the
 * step is a compute step to the stage), so a batch's offsets are committed, and under exactly-once
 * its outputs join a transaction, only once every call of the batch has completed.
 */
import * as v from "valibot";
import { compileExpression, type CompiledExpression, type Row } from "../expr/index.ts";
import { delay } from "../async.ts";
import { FvError } from "../errors.ts";
import { CircuitBreaker, type BreakerState } from "./circuit-breaker.ts";
import { type ComputeCounters, newCounters } from "./counters.ts";
import { type ComputeResult, poison, PoisonReasons } from "./results.ts";

const positiveInt = (field: string, min: number, max: number, example: string) =>
  v.pipe(
    v.number(`${field} is a number, e.g. ${field} = ${example}`),
    v.integer(`${field} is a whole number, e.g. ${field} = ${example}`),
    v.minValue(min, `${field} is at least ${min}`),
    v.maxValue(max, `${field} is at most ${max}`),
  );
const name = (what: string) => v.pipe(v.string(`${what} is a column name`), v.minLength(1, `${what} cannot be empty`));

/** `{ op = "http", url = "...", ... }`, checked with valibot; the defaults are docs/http-step.md's. */
export const httpStepSchema = v.strictObject({
  op: v.literal("http"),
  url: v.pipe(
    v.string('url is the service to call, e.g. url = "http://127.0.0.1:8080/score/{id}"'),
    v.regex(/^(https?:\/\/|\$\{)/, 'url starts with http:// or https:// (or an ${ENV} placeholder), e.g. url = "http://127.0.0.1:8080/score/{id}"'),
  ),
  method: v.optional(v.picklist(["GET", "POST", "PUT"], 'method is "GET", "POST" or "PUT"'), "GET"),
  body: v.optional(v.pipe(v.string("body is an expression, e.g. body = \"{ 'id': id, 'amount': price * qty }\""), v.minLength(1, "body cannot be empty"))),
  headers: v.optional(v.record(v.string(), v.string("a header value is a string, e.g. headers = { Authorization = \"Bearer ${TOKEN}\" }"))),
  concurrency: v.optional(positiveInt("concurrency", 1, 10_000, "200"), 100),
  orderBy: v.optional(
    v.union([v.picklist(["key", "none"]), v.pipe(v.array(name("an orderBy column")), v.minLength(1))], 'orderBy is "key" (the message key), "none", or a list of columns, e.g. orderBy = ["account"]'),
    "key",
  ),
  timeoutMs: v.optional(positiveInt("timeoutMs", 1, 600_000, "2000"), 2000),
  retries: v.optional(positiveInt("retries", 0, 100, "3"), 3),
  retryBackoffMs: v.optional(positiveInt("retryBackoffMs", 0, 600_000, "100"), 100),
  column: v.optional(name("column")),
  columns: v.optional(v.record(v.string(), name("a columns target"), 'columns maps answer fields to columns, e.g. columns = { score = "fraud_score" }')),
  breakerFailures: v.optional(positiveInt("breakerFailures", 1, 1_000_000, "5"), 5),
  breakerCooldownMs: v.optional(positiveInt("breakerCooldownMs", 1, 3_600_000, "10000"), 10_000),
  onOpen: v.optional(v.picklist(["deadLetter", "wait"], 'onOpen is "deadLetter" (rows go to the dead-letter topic as circuit_open) or "wait" (the stream holds)'), "deadLetter"),
});

export type HttpStepDef = v.InferOutput<typeof httpStepSchema>;

/** Cross-field rules the schema cannot say; the message names the field. Throws `{ field, message }`. */
export function checkHttpStep(def: HttpStepDef): void {
  const fail = (field: string, message: string): never => {
    throw Object.assign(new Error(message), { field });
  };
  if (def.column !== undefined && def.columns !== undefined) fail("columns", "set column (the whole answer in one column) or columns (answer fields to columns), not both");
  if (def.body !== undefined && def.method === "GET") fail("body", 'a GET sends no body: use method = "POST" or "PUT", or drop body');
  if (def.body !== undefined) {
    try {
      compileExpression(def.body);
    } catch (error) {
      fail("body", (error as Error).message);
    }
  }
  for (const placeholder of placeholdersOf(def.url)) {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(placeholder)) fail("url", `{${placeholder}} is not a column name: placeholders are {column}, e.g. {id}`);
  }
}

const placeholdersOf = (url: string): string[] => [...url.replace(/\$\{[^}]*\}/g, "").matchAll(/\{([^{}]*)\}/g)].map((m) => m[1]!);

/** What the step tells its observer (the loop's metrics and build-record counters). */
export interface HttpObserver {
  /** A call ended: its status code, or `timeout` / `error` (no answer); latency in ms. */
  call(status: string, ms: number): void;
  retried(): void;
  /** Calls in flight changed by `delta`. */
  inFlight(delta: number): void;
  breaker(state: BreakerState): void;
}

export interface HttpStepOptions {
  /** Stage and step (0-based), for messages. */
  location: { stage: number; step: number };
  /** The environment `${NAME}` placeholders in url and headers are taken from. */
  env?: Readonly<Record<string, string | undefined>>;
  observer?: Partial<HttpObserver>;
  /** The fetch to call with (tests may pass their own); default the global fetch. */
  fetch?: typeof fetch;
  random?: () => number;
}

/** One attempt's outcome: the service answered (status, body), or did not (timeout, error). */
type Attempt = { status: number; body: string; retryAfterMs?: number } | { failure: "timeout" | "error"; message: string };

const KEY_TEXT = new TextDecoder("latin1");
/** The most of a refused answer's body that goes into the dead letter's message. */
const BODY_IN_MESSAGE = 500;
/** Backoff between retries: `retryBackoffMs` × 2^attempt, at most this, with full jitter. */
const MAX_BACKOFF_MS = 10_000;

/**
 * @example
 * const step = createHttpStep({ op: "http", url: "http://127.0.0.1:8080/score/{id}", column: "score" }, { location: { stage: 0, step: 1 } });
 * const [result] = await step.processBatch([{ id: 7 }], ["k7"]);
 */
export class HttpStep {
  readonly op = "http" as const;
  readonly ref: string;
  readonly counters: ComputeCounters = newCounters();
  readonly breaker: CircuitBreaker;
  readonly #def: HttpStepDef;
  readonly #url: Array<string | { column: string }>;
  readonly #headers: Record<string, string>;
  readonly #body: CompiledExpression | undefined;
  readonly #observer: Partial<HttpObserver>;
  readonly #fetch: typeof fetch;
  readonly #random: () => number;
  readonly #at: string;
  /** Calls running now, and the callers waiting for a slot. */
  #running = 0;
  readonly #queue: Array<() => void> = [];
  readonly #closing = new AbortController();
  /** Set by `interrupt`: rows held by an open breaker stop waiting. */
  readonly #interrupted = new AbortController();
  /** Either: what ends a wait (src/async.ts delay). */
  readonly #stopping = AbortSignal.any([this.#interrupted.signal, this.#closing.signal]);

  constructor(def: HttpStepDef, options: HttpStepOptions) {
    const env = options.env ?? {};
    this.#at = `stage ${options.location.stage + 1}, step ${options.location.step + 1} (op "http")`;
    const expand = (text: string, field: string) =>
      text.replace(/\$\{([^}]*)\}/g, (_, variable: string) => {
        const value = env[variable];
        if (value === undefined) {
          throw new FvError("INVALID_TOPOLOGY", `invalid topology: ${this.#at}, field "${field}": the environment variable ${variable} is not set: set it, or write the value in place of \${${variable}}`, {
            context: { stage: options.location.stage + 1, step: options.location.step + 1, field, op: "http" },
          });
        }
        return value;
      });
    this.#def = def;
    this.ref = def.url;
    // Placeholders are read from the url as written; ${NAME} values fill only the text between them.
    this.#url = def.url.split(/((?<!\$)\{[A-Za-z_][A-Za-z0-9_]*\})/).filter((part) => part !== "").map((part) => (/^\{.*\}$/.test(part) ? { column: part.slice(1, -1) } : expand(part, "url")));
    this.#headers = Object.fromEntries(Object.entries(def.headers ?? {}).map(([k, value]) => [k, expand(value, `headers.${k}`)]));
    if (def.method !== "GET" && !Object.keys(this.#headers).some((k) => k.toLowerCase() === "content-type")) this.#headers["content-type"] = "application/json";
    this.#body = def.body === undefined ? undefined : compileExpression(def.body);
    this.#observer = options.observer ?? {};
    this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.#random = options.random ?? Math.random;
    this.breaker = new CircuitBreaker({ failures: def.breakerFailures, cooldownMs: def.breakerCooldownMs, onChange: (state) => this.#observer.breaker?.(state) });
  }

  /** Rows per call: one. The stage hands the step its whole batch; `concurrency` bounds the calls. */
  get batchSize(): number {
    return this.#def.concurrency;
  }

  /**
   * One result per row, in input order, once every row's call is done. Rows with the same order
   * key (`keys[i]`, the message key, under `orderBy = "key"`; a null key orders nothing) are
   * called one after the other; the others run at once, up to `concurrency`.
   */
  async processBatch(rows: Row[], keys?: ReadonlyArray<Uint8Array | string | null>): Promise<ComputeResult[]> {
    const results = new Array<ComputeResult>(rows.length);
    const tails = new Map<string, Promise<void>>();
    const calls: Array<Promise<void>> = [];
    for (let i = 0; i < rows.length; i++) {
      const row = rows[i]!;
      const key = this.#orderKey(row, keys?.[i] ?? null);
      const run = async () => {
        results[i] = await this.#withSlot(() => this.#call(row));
      };
      const previous = key === null ? undefined : tails.get(key);
      const call = previous ? previous.then(run) : run();
      if (key !== null) tails.set(key, call);
      calls.push(call);
    }
    await Promise.all(calls);
    return results;
  }

  /**
   * The stream is stopping: rows waiting (held by an open breaker under `onOpen = "wait"`, or
   * backing off before a retry) stop waiting, and their batch fails as retryable, so it is
   * neither committed nor lost (the next run reads it again). Calls in flight finish as usual.
   */
  interrupt(): void {
    this.#interrupted.abort(new FvError("KAFKA_RETRYABLE", `${this.#at}: stopping while rows waited for the service (its circuit breaker is open): they are read again by the next run`));
  }

  /** Stops waiting: calls in flight are aborted, and a stream held by an open breaker lets go. */
  async close(): Promise<void> {
    this.breaker.dispose();
    if (!this.#closing.signal.aborted) this.#closing.abort(new FvError("INTERNAL", `${this.#at}: the step is closing`));
  }

  #orderKey(row: Row, messageKey: Uint8Array | string | null): string | null {
    const orderBy = this.#def.orderBy;
    if (orderBy === "none") return null;
    // Every byte to its own character (windows-1252 maps each of the 256 to a distinct one).
    if (orderBy === "key") return messageKey === null || typeof messageKey === "string" ? messageKey : KEY_TEXT.decode(messageKey);
    return JSON.stringify(orderBy.map((column) => row[column] ?? null));
  }

  async #withSlot<T>(work: () => Promise<T>): Promise<T> {
    if (this.#running >= this.#def.concurrency) await new Promise<void>((resolve) => this.#queue.push(resolve));
    this.#running++;
    try {
      return await work();
    } finally {
      this.#running--;
      this.#queue.shift()?.();
    }
  }

  /** One row: its attempts, with retries and the breaker; never rejects for the row's sake. */
  async #call(row: Row): Promise<ComputeResult> {
    let request: { url: string; init: RequestInit };
    try {
      request = this.#request(row);
    } catch (error) {
      this.counters.poison++;
      return poison(PoisonReasons.httpError, (error as Error).message);
    }
    const def = this.#def;
    // Calls made for this row: each failed one counts toward its retries, waits for an open
    // breaker do not (a row that keeps failing as the probe is let go after its retries, so one
    // bad row cannot hold the stream for ever under onOpen = "wait").
    for (let attempt = 0; ; attempt++) {
      const admission = await this.#admit();
      if (!admission) {
        this.counters.poison++;
        return poison(PoisonReasons.circuitOpen, `${this.#at}: the circuit breaker is open after ${def.breakerFailures} failed calls in a row; no call was made (it tries again after ${def.breakerCooldownMs} ms)`);
      }
      let outcome: Attempt;
      try {
        outcome = await this.#attempt(request);
      } catch (error) {
        // Closing: a probe given up must not keep the rows waiting for its answer.
        this.breaker.abandoned();
        throw error;
      }
      if ("status" in outcome && outcome.status >= 200 && outcome.status < 300) {
        this.breaker.succeeded();
        return this.#answer(row, outcome.body, request);
      }
      // As the step is specified: every 4xx but 429 is the row's fault (a 408 too: final, not retried).
      const retryable = "failure" in outcome || outcome.status === 429 || outcome.status >= 500;
      if (!retryable) {
        // The service refused this row (4xx): its answer is final, and the service is up.
        this.breaker.succeeded();
        this.counters.poison++;
        return poison(PoisonReasons.httpError, `${this.#at}: ${request.init.method} ${request.url} answered ${describe(outcome)}`);
      }
      this.breaker.failed();
      if ("failure" in outcome && outcome.failure === "timeout") this.counters.timeouts++;
      this.counters.failedCalls++;
      if (attempt >= def.retries) {
        this.counters.poison++;
        return poison(PoisonReasons.httpError, `${this.#at}: ${request.init.method} ${request.url} failed after ${attempt + 1} attempt(s): ${describe(outcome)}`);
      }
      this.#observer.retried?.();
      // onOpen = "wait" and the breaker open: #admit waits for the cool-down instead of a backoff.
      if (def.onOpen === "wait" && this.breaker.state !== "closed") continue;
      const backoff = Math.min(MAX_BACKOFF_MS, def.retryBackoffMs * 2 ** attempt) * this.#random();
      await this.#wait(Math.max(backoff, "status" in outcome ? (outcome.retryAfterMs ?? 0) : 0));
    }
  }

  /** True to call; false when the open breaker sends the row away. Under `onOpen = "wait"` waits for the probe instead. */
  async #admit(): Promise<boolean> {
    for (;;) {
      this.#throwIfStopping();
      const admission = await this.breaker.admit();
      if (admission.call) return true;
      if (this.#def.onOpen === "deadLetter") return false;
      await this.#wait(Math.max(1, admission.retryAt - Date.now()));
    }
  }

  /** Sleeps `ms`, or less when the step is interrupted or closes (then throws why). */
  async #wait(ms: number): Promise<void> {
    this.#throwIfStopping();
    // delay rejects with the signal's reason; #throwIfStopping says which (closing first).
    await delay(ms, this.#stopping).catch(() => {});
    this.#throwIfStopping();
  }

  #throwIfStopping(): void {
    if (this.#closing.signal.aborted) throw this.#closing.signal.reason;
    if (this.#interrupted.signal.aborted) throw this.#interrupted.signal.reason;
  }

  #request(row: Row): { url: string; init: RequestInit } {
    let url = "";
    for (const part of this.#url) {
      if (typeof part === "string") {
        url += part;
        continue;
      }
      const value = row[part.column];
      if (value === null || value === undefined) throw new Error(`${this.#at}: the url needs column ${part.column}, which is null or missing in this row`);
      url += encodeURIComponent(typeof value === "object" ? JSON.stringify(value) : String(value));
    }
    const init: RequestInit = { method: this.#def.method, headers: this.#headers };
    if (this.#def.method !== "GET") init.body = JSON.stringify(this.#body ? this.#body.evaluate(row) : row);
    return { url, init };
  }

  async #attempt(request: { url: string; init: RequestInit }): Promise<Attempt> {
    const started = performance.now();
    this.counters.calls++;
    this.#observer.inFlight?.(1);
    let outcome: Attempt;
    try {
      const signal = AbortSignal.any([AbortSignal.timeout(this.#def.timeoutMs), this.#closing.signal]);
      const response = await this.#fetch(request.url, { ...request.init, signal });
      const body = await response.text();
      const retryAfter = Number(response.headers.get("retry-after"));
      outcome = { status: response.status, body, ...(Number.isFinite(retryAfter) && retryAfter > 0 ? { retryAfterMs: Math.min(retryAfter * 1000, MAX_BACKOFF_MS) } : {}) };
    } catch (error) {
      if (this.#closing.signal.aborted) throw this.#closing.signal.reason;
      const timedOut = (error as Error)?.name === "TimeoutError";
      outcome = timedOut
        ? { failure: "timeout", message: `no answer within ${this.#def.timeoutMs} ms` }
        : { failure: "error", message: (error as Error)?.message ?? String(error) };
    } finally {
      this.#observer.inFlight?.(-1);
    }
    this.#observer.call?.("status" in outcome ? String(outcome.status) : outcome.failure, performance.now() - started);
    return outcome;
  }

  /** A 2xx answer into the row: the whole JSON under `column`, or its fields under `columns`. */
  #answer(row: Row, body: string, request: { url: string; init: RequestInit }): ComputeResult {
    let answer: unknown = null;
    if (body.trim() !== "") {
      try {
        answer = JSON.parse(body);
      } catch {
        this.counters.poison++;
        return poison(PoisonReasons.httpError, `${this.#at}: ${request.init.method} ${request.url} answered 2xx with a body that is not JSON: ${clip(body)}`);
      }
    }
    const columns = this.#def.columns;
    if (columns) {
      const fields = typeof answer === "object" && answer !== null && !Array.isArray(answer) ? (answer as Record<string, unknown>) : {};
      for (const [from, to] of Object.entries(columns)) row[to] = (fields[from] ?? null) as Row[string];
    } else {
      row[this.#def.column ?? "response"] = answer as Row[string];
    }
    return { rows: [row] };
  }
}

function describe(outcome: Attempt): string {
  return "status" in outcome ? `HTTP ${outcome.status}: ${clip(outcome.body)}` : outcome.message;
}

/** The first BODY_IN_MESSAGE bytes of a body (UTF-8). */
function clip(text: string): string {
  const bytes = new TextEncoder().encode(text);
  return bytes.length <= BODY_IN_MESSAGE ? text : `${new TextDecoder().decode(bytes.subarray(0, BODY_IN_MESSAGE))}…`;
}
