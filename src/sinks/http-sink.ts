/**
 * `sink = "http"`: each checkpoint's rows sent as JSON arrays of up to `batch` rows, and each
 * row's id delivered once through a Deduplicator: a replay after a crash skips the ids already
 * sent. A request's ids are remembered in the same step as its bytes are written (see #send and
 * docs/sinks.md for what that leaves).
 * One Deduplicator per input partition (namespace `<pipeline>/<dataset>/p<partition>`), written
 * only by the partition's owner, in any AsyncStateStore (by default files under the state folder).
 */
import { FvError } from "../errors.ts";
import type { CommitOffset, OutboundRecord } from "../kafka/port.ts";
import type { Logger } from "../logger.ts";
import type { AsyncStateStore } from "../state/async-store.ts";
import { Deduplicator } from "../state/deduplicator.ts";
import type { HttpSinkConfig } from "./config.ts";
import { HttpConnection } from "./http-connection.ts";
import { DeadLetters, type Refused, type Sink, type SinkRow, type SinkWritten } from "./sink.ts";

export interface HttpSinkOptions {
  pipeline: string;
  dataset: string;
  /** Where each partition's window of delivered ids is kept. */
  store: AsyncStateStore;
  log: Logger;
}

const encoder = new TextEncoder();
/** The most of a refusing answer's body a dead letter carries. */
const BODY_BYTES = 500;

export class HttpSink implements Sink {
  readonly kind = "http";
  readonly dataset: string;
  readonly #config: HttpSinkConfig;
  readonly #options: HttpSinkOptions;
  readonly #dedup = new Map<number, Deduplicator>();
  /** Per partition, once its window is read: the ids in doubt (a run stopped while writing their request). */
  readonly #doubt = new Map<number, Set<string>>();
  /** Per partition, ids in doubt dead-lettered since the last commit: resolved once it commits. */
  readonly #resolving = new Map<number, Set<string>>();
  readonly #deadLetters = new DeadLetters();
  #connection: HttpConnection | undefined;

  constructor(config: HttpSinkConfig, options: HttpSinkOptions) {
    this.#config = config;
    this.dataset = options.dataset;
    this.#options = options;
  }

  get #where(): string {
    return `http sink "${this.dataset}" (${this.#config.method} ${this.#shownUrl})`;
  }

  /** The URL as written in the pipeline file (its `${VAR}`s not expanded: they may hold tokens). */
  get #shownUrl(): string {
    return this.#config.shownUrl ?? this.#config.url;
  }

  /** The Deduplicator of one input partition. */
  dedupOf(partition: number): Deduplicator {
    let dedup = this.#dedup.get(partition);
    if (!dedup) {
      dedup = new Deduplicator(this.#options.store, `${this.#options.pipeline}/${this.dataset}/p${partition}`, { window: this.#config.window });
      this.#dedup.set(partition, dedup);
    }
    return dedup;
  }

  /**
   * A partition changed hands: its window is read again before its next row (the member that
   * had it meanwhile may have delivered more).
   */
  forget(partition: number): void {
    this.#dedup.delete(partition);
    this.#doubt.delete(partition);
    this.#resolving.delete(partition);
  }

  /** Every partition's window is read again before its next row (a new session). */
  forgetAll(): void {
    this.#dedup.clear();
    this.#doubt.clear();
    this.#resolving.clear();
  }

  /**
   * The checkpoint committed (its dead letters are durable, in the Kafka transaction too): the
   * ids in doubt dead-lettered since are no longer in doubt. A failure here only leaves them in
   * doubt (a later run dead-letters them again if they come again).
   */
  async committed(): Promise<void> {
    for (const [partition, ids] of this.#resolving) {
      this.#resolving.delete(partition);
      const doubt = this.#doubt.get(partition);
      for (const id of ids) doubt?.delete(id);
      const dedup = this.#dedup.get(partition);
      await dedup?.resolve([...ids]).catch((error) => this.#options.log("warn", `${this.#where}: partition ${partition}: could not record that ${ids.size} ids in doubt were dead-lettered (${(error as Error).message}); a later run may dead-letter them again`));
    }
  }

  /**
   * The ids of `partition` whose request was being written when the last run stopped (read with
   * the window, said once in the log): they may or may not have reached the service.
   */
  async #inDoubt(partition: number, dedup: Deduplicator): Promise<ReadonlySet<string>> {
    let doubt = this.#doubt.get(partition);
    if (doubt) return doubt;
    await dedup.open();
    doubt = new Set(dedup.inDoubt);
    this.#doubt.set(partition, doubt);
    if (doubt.size > 0) {
      this.#options.log(
        "warn",
        `${this.#where}: partition ${partition}: a run stopped while writing a request of ${doubt.size} rows, ids ${[...doubt].join(", ")}; the service may or may not have them: they are not sent again, and are dead-lettered as sink_in_doubt when they come again`,
      );
    }
    return doubt;
  }

  async write(rows: readonly SinkRow[], _offsets: readonly CommitOffset[], deadLetter: (records: OutboundRecord[]) => Promise<void>): Promise<SinkWritten> {
    const refused: Refused[] = [];
    let written = 0;
    let duplicates = 0;
    const byPartition = new Map<number, SinkRow[]>();
    for (const row of rows) {
      // Refused by an earlier try of this checkpoint (which then found the service away): counted, not sent again.
      const before = this.#deadLetters.of(row);
      if (before) {
        refused.push(before);
        continue;
      }
      const id = row.row[this.#config.id];
      if (id === undefined || id === null || typeof id === "object") {
        refused.push({ row, reason: "sink_rejected", message: `${this.#where}: the row has no id: column "${this.#config.id}" is ${id === undefined ? "missing" : JSON.stringify(id)}` });
        continue;
      }
      const list = byPartition.get(row.partition) ?? [];
      list.push(row);
      byPartition.set(row.partition, list);
    }
    await this.#deadLetter(refused, deadLetter);
    for (const [partition, list] of byPartition) {
      const dedup = this.dedupOf(partition);
      const doubt = await this.#inDoubt(partition, dedup);
      // Delivered before (a replay), or twice in this checkpoint: once. In doubt: dead-lettered, not sent.
      const fresh: Array<{ id: string; row: SinkRow }> = [];
      const now = new Set<string>();
      const doubted: Refused[] = [];
      for (const row of list) {
        const id = String(row.row[this.#config.id]);
        if (now.has(id) || !(await dedup.isNew(id))) {
          if (doubt.has(id) && !now.has(id)) {
            now.add(id);
            doubted.push({ row, reason: "sink_in_doubt", message: `${this.#where}: the run before stopped while writing the request that carried id ${id}: the service may or may not have it (not sent again)` });
          } else duplicates++;
          continue;
        }
        now.add(id);
        fresh.push({ id, row });
      }
      if (doubted.length) {
        await this.#deadLetter(doubted, deadLetter);
        refused.push(...doubted);
        const resolving = this.#resolving.get(partition) ?? new Set();
        for (const r of doubted) resolving.add(String(r.row.row[this.#config.id]));
        this.#resolving.set(partition, resolving);
      }
      for (let i = 0; i < fresh.length; i += this.#config.batch) {
        const chunk = fresh.slice(i, i + this.#config.batch);
        const answer = await this.#send(chunk.map((c) => c.row.row), chunk.map((c) => c.id), dedup);
        this.#options.log("debug", `${this.#where}: partition ${partition}: ${chunk.length} rows (${chunk[0]!.id} … ${chunk.at(-1)!.id}) ${answer.ok ? "delivered" : `refused (HTTP ${answer.status})`}`);
        if (answer.ok) {
          written += chunk.length;
          continue;
        }
        // Refused: not delivered, so not remembered, and dead-lettered now, before the next request
        // (a later failure or a crash replays them: refused and dead-lettered again, never lost).
        await dedup.forget(chunk.map((c) => c.id));
        const now = chunk.map((c): Refused => ({ row: c.row, reason: "sink_rejected", message: `${this.#where} refused the request: HTTP ${answer.status}: ${answer.body}` }));
        await this.#deadLetter(now, deadLetter);
        refused.push(...now);
      }
    }
    return { written, duplicates, refused };
  }

  async close(): Promise<void> {
    this.#connection?.close();
  }

  async #deadLetter(refused: readonly Refused[], deadLetter: (records: OutboundRecord[]) => Promise<void>): Promise<void> {
    await this.#deadLetters.send(refused, `http:${this.#shownUrl}`, deadLetter);
  }

  /**
   * One request, its ids remembered just before it is written (see HttpConnection). 2xx:
   * delivered; 408, 429, 5xx or no answer: the ids are taken back and SINK_UNAVAILABLE thrown
   * (retried); another 4xx: the rows are refused.
   */
  async #send(rows: readonly unknown[], ids: readonly string[], dedup: Deduplicator): Promise<{ ok: true } | { ok: false; status: number; body: string }> {
    this.#connection ??= new HttpConnection(this.#config.url);
    const headers = { "content-type": "application/json", "idempotency-key": idempotencyKey(ids), ...this.#config.headers };
    let remembered = false;
    let settleFailed: unknown;
    const storeFailed = (error: unknown) =>
      new FvError("STATE_STORE_FAILED", `${this.#where}: could not remember the ids of a request before sending it (${(error as Error).message}); check the state folder (STREAM_STATE_DIR)`, { cause: error });
    // Durable the moment before the bytes go: synchronously when the store can (a file store), so
    // nothing runs between the two; else as soon as the store's put resolves.
    const rememberFirst = dedup.canRememberNow
      ? () => {
          try {
            dedup.rememberNow(ids);
          } catch (error) {
            throw storeFailed(error);
          }
          remembered = true;
        }
      : async () => {
          await dedup.remember(ids).catch((error) => Promise.reject(storeFailed(error)));
          remembered = true;
        };
    // Handed on: the ids are no longer in doubt. (Must not throw: the answer is still to be read.)
    const settle = () => {
      if (!remembered || !dedup.canRememberNow) return;
      try {
        dedup.settleNow();
      } catch (error) {
        settleFailed = error;
      }
    };
    let answer;
    try {
      answer = await this.#connection.request(this.#config.method, headers, encoder.encode(JSON.stringify(rows)), this.#config.timeoutMs, rememberFirst, settle);
    } catch (error) {
      if (error instanceof FvError) throw error;
      if (remembered) await dedup.forget(ids);
      const why = (error as Error).name === "TimeoutError" ? `no answer within ${this.#config.timeoutMs} ms` : (error as Error).message;
      throw new FvError("SINK_UNAVAILABLE", `${this.#where} is unreachable: ${why}`, { cause: error, context: { sink: this.dataset } });
    }
    if (settleFailed) this.#options.log("warn", `${this.#where}: could not mark a request's ids as sent (${(settleFailed as Error).message}); a restart will call them in doubt; check the state folder (STREAM_STATE_DIR)`);
    await dedup.prune();
    if (answer.status >= 200 && answer.status < 300) return { ok: true };
    const body = answer.body.slice(0, BODY_BYTES);
    if (answer.status === 408 || answer.status === 429 || answer.status >= 500) {
      await dedup.forget(ids);
      throw new FvError("SINK_UNAVAILABLE", `${this.#where} answered HTTP ${answer.status}: ${body}`, { context: { sink: this.dataset, status: answer.status } });
    }
    // A redirect (or 1xx) is about the address, not these rows: the sink follows none, so every row would be refused.
    if (answer.status < 400) {
      await dedup.forget(ids);
      // Where it points, without its query or a password (a redirect may echo a token from the url).
      const to = answer.location ? ` to ${shownLocation(answer.location, this.#config.url)}` : "";
      throw new FvError("SINK_FAILED", `${this.#where} answered HTTP ${answer.status}${to}: the sink does not follow redirects; set the dataset's url to the address that answers`, { context: { sink: this.dataset, status: answer.status, field: "url" } });
    }
    return { ok: false, status: answer.status, body };
  }
}

/** A redirect's target as messages show it: origin and path, no query, fragment or password. */
function shownLocation(location: string, base: string): string {
  try {
    const url = new URL(location, base);
    return `${url.origin}${url.pathname}`;
  } catch {
    return "an address that is not a URL";
  }
}

/**
 * The same ids in the same order give the same key: a receiver that honours `Idempotency-Key`
 * drops a request sent again after a timeout or a 5xx (the rows of a replay may be cut into other
 * requests; each row's `id` is the finer key).
 */
function idempotencyKey(ids: readonly string[]): string {
  // FNV-1a, 64 bits, over the ids in order.
  let hash = 0xcbf29ce484222325n;
  for (const id of ids) {
    for (let i = 0; i < id.length; i++) hash = BigInt.asUintN(64, (hash ^ BigInt(id.charCodeAt(i))) * 0x100000001b3n);
    hash = BigInt.asUintN(64, (hash ^ 0x1fn) * 0x100000001b3n);
  }
  return `${ids.length}-${hash.toString(16)}`;
}
