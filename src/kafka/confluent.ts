/**
 * The Kafka port on @confluentinc/kafka-javascript (librdkafka). A nan addon: it loads on Node
 * only (Bun lacks the V8 symbols it needs, Deno refuses nan addons), so `loadKafkaClient` imports
 * this module only when the client is chosen.
 *
 * The library's native (node-rdkafka style) API, not its KafkaJS-style one:
 *   - `consume(n)` pulls up to n records with a timeout, which is the port's `poll` as is; the
 *     KafkaJS API pushes records through `run({ eachBatch })` and would need a buffer and
 *     pause/resume between it and the loop (the platformatic adapter's main source of trouble);
 *   - `rebalance_cb` hands the adapter the revoke and the assign: librdkafka waits for the
 *     `unassign()` / `assign()` calls, so the adapter lets go of revoked partitions only at the
 *     loop's next poll, after its commits (the old generation still holds until then);
 *   - `sendOffsetsToTransaction` takes plain offsets (the next offset to read) and the consumer,
 *     nothing implicit about message offset + 1.
 */
import { Buffer } from "node:buffer";
import { createRequire } from "node:module";
import type * as Rd from "@confluentinc/kafka-javascript";
import { FvError } from "../errors.ts";
import type {
  Admin,
  CommitOffset,
  ConsumerOptions,
  GroupConsumer,
  GroupMetadata,
  InboundRecord,
  KafkaClient,
  OutboundRecord,
  Producer,
  TopicPartition,
  TopicSpec,
  TransactionalProducer,
} from "./port.ts";

type Library = typeof import("@confluentinc/kafka-javascript");

/** Loads the addon; throws when it is not installed or does not load on this runtime. */
export function loadLibrary(): Library {
  return createRequire(import.meta.url)("@confluentinc/kafka-javascript") as Library;
}

const key = (topic: string, partition: number) => `${topic}\u0000${partition}`;

/** librdkafka error codes the adapter sorts by. */
const ERR = {
  ASSIGN_PARTITIONS: -175,
  REVOKE_PARTITIONS: -174,
  QUEUE_FULL: -184,
  TIMED_OUT: -185,
  /** A record not delivered within message.timeout.ms (e.g. the broker was down that long). */
  MSG_TIMED_OUT: -192,
  ALL_BROKERS_DOWN: -187,
  TRANSPORT: -195,
  FENCED: -144,
  MAX_POLL_EXCEEDED: -147,
  ILLEGAL_GENERATION: 22,
  UNKNOWN_MEMBER_ID: 25,
  REBALANCE_IN_PROGRESS: 27,
  TOPIC_ALREADY_EXISTS: 36,
  INVALID_PRODUCER_EPOCH: 47,
  FENCED_INSTANCE_ID: 82,
  PRODUCER_FENCED: 90,
} as const;

const FENCED_CODES = new Set<number>([
  ERR.FENCED, ERR.ILLEGAL_GENERATION, ERR.UNKNOWN_MEMBER_ID, ERR.REBALANCE_IN_PROGRESS,
  ERR.INVALID_PRODUCER_EPOCH, ERR.FENCED_INSTANCE_ID, ERR.PRODUCER_FENCED, ERR.MAX_POLL_EXCEEDED,
]);

/**
 * Group timings, as in the platformatic adapter: a killed member's partitions move after the
 * session timeout (10 s); heartbeats every second notice a rebalance fast.
 */
const SESSION_TIMEOUT_MS = 10_000;
const HEARTBEAT_INTERVAL_MS = 1_000;
/** A crashed producer's open transaction is aborted by the broker after this long. */
const TRANSACTION_TIMEOUT_MS = 15_000;
/** How long one transactional call (init, offsets, commit, abort) may take before it fails. */
const TRANSACTION_CALL_TIMEOUT_MS = 10_000;
/** A record not acknowledged within this long fails its send (librdkafka retries until then). */
const DELIVERY_TIMEOUT_MS = 60_000;
/** A fetch waits at most this long on the broker for new data: short, so polls stay responsive. */
const FETCH_MAX_WAIT_MS = 100;
/** Most time the loop's rebalance hook may hold a revoke: well inside the rebalance timeout. */
const REBALANCE_HOOK_MS = 20_000;
/** Most time one admin request may take. */
const ADMIN_TIMEOUT_MS = 10_000;
/** Most time one read of a new assignment's committed offsets may take before it is tried again. */
const START_READ_TIMEOUT_MS = 5_000;
/**
 * How long new partitions may wait for a committed offset the adapter can start from before the
 * session fails (retryable: the loop starts a fresh consumer). A pending transactional commit ends
 * within the transaction timeout, and the loop releases its own producer's after 30 s.
 */
const START_GIVE_UP_MS = 90_000;
/** librdkafka's logical offsets for `assign`. */
const OFFSET_BEGINNING = -2;
const OFFSET_END = -1;

function classify(error: unknown, what: string): FvError {
  if (error instanceof FvError) return error;
  // deno-lint-ignore no-explicit-any
  const e = error as any;
  const text = e?.message ?? String(error);
  const code: number | undefined = typeof e?.code === "number" ? e.code : undefined;
  const fenced = (code !== undefined && FENCED_CODES.has(code)) || /fenced/i.test(text);
  // Undelivered records were never acknowledged, so their offsets were not committed: a fresh
  // session (after aborting the transaction under exactly-once) reads them again.
  const retryable = e?.isRetriable || e?.isTxnRequiresAbort ||
    (code !== undefined && ([ERR.TIMED_OUT, ERR.MSG_TIMED_OUT, ERR.ALL_BROKERS_DOWN, ERR.TRANSPORT] as number[]).includes(code));
  const fvCode = fenced ? "KAFKA_FENCED" : retryable ? "KAFKA_RETRYABLE" : "KAFKA_FATAL";
  // No broker answered at all: run-stream.ts says so where the stream starts.
  const unreachable = code === ERR.ALL_BROKERS_DOWN ? "all brokers down" : code === ERR.TRANSPORT ? "no connection" : code === ERR.TIMED_OUT ? "a timeout" : undefined;
  return new FvError(fvCode, `${what} failed: ${text}${code !== undefined ? ` (librdkafka ${code})` : ""}`, {
    cause: error,
    ...(unreachable ? { context: { unreachable } } : {}),
  });
}

/**
 * How long a transactional call (offsets, commit) is called again while librdkafka says its error
 * is retriable, each try bounded by TXN_RETRY_CALL_MS. Inside the loop's checkpoint deadline
 * (STREAM_CHECKPOINT_DEADLINE_MS, 10 s by default): with 30 s the loop gave up on a checkpoint
 * while librdkafka still worked on the transaction, and its abort and close collided with that
 * call (the Node + librdkafka soak, seed 13: "closing the transactional producer took longer than
 * 15000 ms", and rows lost).
 */
const TXN_RETRY_MS = 8_000;
const TXN_RETRY_CALL_MS = 4_000;

/**
 * Calls a transactional API again while it fails with a retriable error that does not require an
 * abort (librdkafka: "the application may retry the call"), for up to TXN_RETRY_MS.
 */
async function retryingTxnCall(run: () => Promise<unknown>): Promise<void> {
  const until = Date.now() + TXN_RETRY_MS;
  for (;;) {
    try {
      await run();
      return;
    } catch (error) {
      const e = error as { isRetriable?: boolean; isTxnRequiresAbort?: boolean; isFatal?: boolean };
      if (!e?.isRetriable || e.isTxnRequiresAbort || e.isFatal || Date.now() >= until) throw error;
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}

const delay = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * Committed offsets a client has seen, per group and partition, across its consumers (a loop
 * starts a fresh consumer for every session). Only used to refuse "never committed" for a
 * partition whose group is known to have committed it (see ConfluentConsumer #start).
 */
class KnownOffsets {
  readonly #offsets = new Map<string, bigint>();

  get(group: string, tp: TopicPartition): bigint | undefined {
    return this.#offsets.get(`${group}\u0000${key(tp.topic, tp.partition)}`);
  }

  note(group: string, tp: TopicPartition, offset: bigint): void {
    const k = `${group}\u0000${key(tp.topic, tp.partition)}`;
    const before = this.#offsets.get(k);
    if (before === undefined || offset > before) this.#offsets.set(k, offset);
  }
}

/** Turns a callback-style call into a promise. */
function call<T = void>(start: (cb: (err: unknown, value?: T) => void) => void): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    start((err, value) => (err ? reject(err) : resolve(value as T)));
  });
}

function toBuffer(data: Uint8Array | string | null | undefined): Buffer | null {
  if (data === null || data === undefined) return null;
  if (typeof data === "string") return Buffer.from(data, "utf8");
  return Buffer.isBuffer(data) ? data : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
}

function toInbound(message: Rd.Message): InboundRecord {
  const headers: Array<[string, Uint8Array]> = [];
  for (const header of message.headers ?? []) {
    for (const [hk, hv] of Object.entries(header)) headers.push([hk, typeof hv === "string" ? Buffer.from(hv) : hv]);
  }
  const k = message.key;
  return {
    topic: message.topic,
    partition: message.partition,
    offset: BigInt(message.offset),
    timestamp: BigInt(message.timestamp ?? 0),
    key: k === undefined || k === null ? null : typeof k === "string" ? Buffer.from(k) : k,
    value: message.value ?? null,
    headers,
  };
}

const connect = (client: Rd.Producer | Rd.KafkaConsumer) => call<Rd.Metadata>((cb) => client.connect({ timeout: ADMIN_TIMEOUT_MS }, cb));
const disconnect = (client: Rd.Producer | Rd.KafkaConsumer) =>
  call<unknown>((cb) => client.disconnect(cb)).catch(() => {});

/** Consumer methods the library has but does not declare in its types. */
interface ConsumerExtras {
  /** consume(n) returns as soon as one record is there, with what else is ready, instead of waiting for n. */
  setDefaultIsTimeoutOnlyForFirstMessage(value: boolean): void;
  /** An asynchronous commit of explicit offsets, with its result. */
  commitCb(offsets: Rd.TopicPartitionOffset[], cb: (err: unknown) => void): void;
}
const extras = (consumer: Rd.KafkaConsumer) => consumer as unknown as ConsumerExtras;

class ConfluentConsumer implements GroupConsumer {
  readonly #lib: Library;
  readonly #options: ConsumerOptions;
  readonly #consumer: Rd.KafkaConsumer;
  #admin: Rd.IAdminClient | undefined;
  #owned = new Map<string, TopicPartition>();
  /**
   * Next offset to hand out per owned partition. After a rebalance librdkafka starts every
   * partition again from its committed offset; records below this position of a partition this
   * member kept were already handed to the loop, so they are skipped.
   */
  readonly #position = new Map<string, bigint>();
  /** A revoke librdkafka is waiting on: `unassign()` is called at the next poll, after the loop's commits. */
  #revokePending = false;
  /** The loop's rebalance hook for the pending revoke; settled once the loop has committed. */
  #revokeHook: { settled: boolean; done: Promise<void> } | undefined;
  /**
   * Assignments received: the generation as this adapter sees it (librdkafka does not expose
   * the group's), for the loop's GroupMetadata. Work read before an assignment is never
   * committed after it.
   */
  #assignments = 0;
  /** Commits in flight: a revoke waits for them, so they land in the generation they belong to. */
  readonly #commits = new Set<Promise<void>>();
  /** Admin requests in flight; close waits for them before it frees the native handles. */
  readonly #adminCalls = new Set<Promise<void>>();
  readonly #brokers: string[];
  /**
   * An assignment librdkafka waits on: `assign()` is called, with an explicit start offset for
   * every partition, once the adapter has read the group's committed offsets itself (see #start).
   */
  #starting: { partitions: TopicPartition[]; since: number; held: TopicPartition[]; warned: boolean } | undefined;
  /** Committed offsets this client has seen for the group (see `KnownOffsets`). */
  readonly #known: KnownOffsets;
  #error: unknown;
  #started = false;
  #closed = false;

  constructor(lib: Library, brokers: string[], options: ConsumerOptions, known: KnownOffsets) {
    this.#lib = lib;
    this.#options = options;
    this.#brokers = brokers;
    this.#known = known;
    const sessionTimeout = options.sessionTimeoutMs ?? SESSION_TIMEOUT_MS;
    this.#consumer = new lib.KafkaConsumer({
      "bootstrap.servers": brokers.join(","),
      "group.id": options.groupId,
      "client.id": options.clientId,
      "enable.auto.commit": false,
      "enable.auto.offset.store": false,
      "auto.offset.reset": options.offsetReset,
      // read_committed also makes librdkafka fetch committed offsets with require_stable
      // (KIP-447), so a new owner waits for the previous owner's pending transaction.
      "isolation.level": "read_committed",
      // range: partition p of every subscribed topic (same partition count) goes to one member,
      // which stateful stages and joins need (the co-partitioned assignment).
      "partition.assignment.strategy": "range",
      "session.timeout.ms": sessionTimeout,
      "heartbeat.interval.ms": Math.min(HEARTBEAT_INTERVAL_MS, Math.floor(sessionTimeout / 3)),
      "fetch.wait.max.ms": FETCH_MAX_WAIT_MS,
      // Bound what librdkafka prefetches per partition (KiB): the loop's batch is the unit of work.
      "queued.max.messages.kbytes": 16_384,
      ...(options.groupInstanceId ? { "group.instance.id": options.groupInstanceId } : {}),
      "rebalance_cb": (err: Rd.LibrdKafkaError | undefined, assignment: Rd.TopicPartition[]) => this.#onRebalance(err, assignment),
    });
    this.#consumer.on("event.error", (error) => {
      // Transport errors are retried inside librdkafka; only fatal ones end the session.
      if ((error as Rd.LibrdKafkaError).isFatal) this.#error ??= error;
    });
  }

  /**
   * 1. revoke: tell the loop (it commits what is safe while this generation holds); the
   *    `unassign()` that lets librdkafka rejoin waits for the next poll;
   * 2. assign: take the new partitions at once and tell the loop what moved.
   */
  #onRebalance(err: Rd.LibrdKafkaError | undefined, assignment: Rd.TopicPartition[]): void {
    try {
      if (err?.code === ERR.REVOKE_PARTITIONS) {
        if (this.#closed) {
          this.#consumer.unassign();
          return;
        }
        this.#revokePending = true;
        // A lost assignment (the session expired while this process was paused): another member
        // may have owned and committed these partitions since; nothing read before counts.
        if ((this.#consumer as unknown as { assignmentLost(): boolean }).assignmentLost()) this.#position.clear();
        const hook = { settled: false, done: Promise.resolve() };
        let timer: ReturnType<typeof setTimeout> | undefined;
        hook.done = Promise.race([
          Promise.resolve(this.#options.listener?.onRebalance?.()).catch(() => {}),
          new Promise<void>((resolve) => (timer = setTimeout(resolve, REBALANCE_HOOK_MS))),
        ]).then(() => {
          clearTimeout(timer);
          hook.settled = true;
        });
        this.#revokeHook = hook;
      } else if (err?.code === ERR.ASSIGN_PARTITIONS) {
        if (this.#revokePending) this.#unassign();
        this.#assignments++;
        // librdkafka waits for assign() (and heartbeats meanwhile); the next poll calls it once
        // the start offsets are known.
        this.#starting = { partitions: assignment.map(({ topic, partition }) => ({ topic, partition })), since: Date.now(), held: [], warned: false };
        const next = new Map<string, TopicPartition>();
        for (const { topic, partition } of assignment) next.set(key(topic, partition), { topic, partition });
        const revoked = [...this.#owned].filter(([k]) => !next.has(k)).map(([, tp]) => tp);
        const assigned = [...next].filter(([k]) => !this.#owned.has(k)).map(([, tp]) => tp);
        this.#owned = next;
        for (const tp of revoked) this.#position.delete(key(tp.topic, tp.partition));
        if (assigned.length || revoked.length) this.#options.listener?.onAssignment?.({ assigned, revoked, owned: [...next.values()] });
      } else if (err) {
        this.#error ??= err;
      }
    } catch (error) {
      if (!this.#closed) this.#error ??= error;
    }
  }

  #unassign(): void {
    this.#revokePending = false;
    this.#consumer.unassign();
  }

  /**
   * Finishes a pending revoke once the loop's rebalance hook has run (it commits while this
   * generation holds) and the commits sent in this generation are done. False while the hook is
   * still running: the loop must get back control to commit, so poll returns at once.
   */
  async #settleRevoke(timeoutMs: number): Promise<boolean> {
    if (!this.#revokePending) return true;
    const hook = this.#revokeHook;
    if (hook && !hook.settled) {
      await Promise.race([hook.done, new Promise((r) => setTimeout(r, Math.min(timeoutMs, 50)))]);
      if (!hook.settled) return false;
    }
    while (this.#commits.size) await Promise.allSettled([...this.#commits]);
    if (this.#revokePending && !this.#closed) this.#unassign();
    return true;
  }

  async start(): Promise<void> {
    try {
      await connect(this.#consumer);
      extras(this.#consumer).setDefaultIsTimeoutOnlyForFirstMessage(true);
      this.#consumer.subscribe(this.#options.topics);
      this.#started = true;
    } catch (error) {
      throw classify(error, `joining group ${this.#options.groupId}`);
    }
  }

  /** The library consumer, for adding its offsets to a transaction. */
  get raw(): Rd.KafkaConsumer {
    return this.#consumer;
  }

  async poll(max: number, timeoutMs: number): Promise<InboundRecord[]> {
    if (!this.#started) throw new FvError("KAFKA_FATAL", "poll before start");
    if (this.#error) throw classify(this.#error, "fetching");
    if (this.#closed) return [];
    // Nothing is read while a revoke waits for the loop: librdkafka would move its positions on.
    if (!(await this.#settleRevoke(timeoutMs))) return [];
    if (this.#starting && !(await this.#start(timeoutMs))) return [];
    this.#consumer.setDefaultConsumeTimeout(timeoutMs);
    let messages: Rd.Message[];
    try {
      messages = await call<Rd.Message[]>((cb) => this.#consumer.consume(max, cb));
    } catch (error) {
      if ((error as Rd.LibrdKafkaError)?.code === ERR.TIMED_OUT) return [];
      throw classify(error, "fetching");
    }
    if (this.#error) throw classify(this.#error, "fetching");
    const out: InboundRecord[] = [];
    for (const message of messages) {
      const k = key(message.topic, message.partition);
      if (!this.#owned.has(k)) continue;
      const offset = BigInt(message.offset);
      const position = this.#position.get(k);
      if (position !== undefined && offset < position) continue;
      this.#position.set(k, offset + 1n);
      out.push(toInbound(message));
    }
    return out;
  }

  /**
   * Starts the pending assignment from offsets the adapter read itself, not from librdkafka's own
   * committed-offset fetch. That fetch starts a partition it finds no offset for at
   * `auto.offset.reset`, and leaves a partition unstarted, never to be fetched, when the fetch
   * fails with a request-level error (librdkafka 2.15 `rd_kafka_assignment_apply_offsets`: "do
   * nothing for request-level errors"), which a restarting coordinator gives. In the 15-minute
   * Node soak (seed 25) a fresh consumer started two partitions at offset 0 although the group had
   * committed about 233,000 on each (420,338 duplicates), and consumers stopped handing out
   * records after broker restarts (18 stall restarts). Here:
   *   - the read is stable (read_committed: RequireStable), so a pending transactional commit
   *     holds its partition until it ends (`held()`), as the platformatic adapter does;
   *   - a failed read holds every new partition and is tried again at the next poll;
   *   - "no committed offset" for a partition this client has seen one for is not believed
   *     (held, with a warning), so a group's progress is never thrown away;
   *   - only a partition the group never committed starts at `offsetReset`.
   * False while the assignment is held: the loop gets control back and polls again.
   */
  async #start(timeoutMs: number): Promise<boolean> {
    const pending = this.#starting!;
    if (pending.partitions.length === 0) {
      this.#consumer.assign([]);
      this.#starting = undefined;
      return true;
    }
    const group = this.#options.groupId;
    const giveUp = (why: string) => {
      if (Date.now() - pending.since < START_GIVE_UP_MS) return;
      throw new FvError("KAFKA_RETRYABLE", `new partitions waited ${Math.round((Date.now() - pending.since) / 1000)} s for a committed offset to start from: ${why}`);
    };
    let answer: Array<Rd.TopicPartitionOffset | Error>;
    try {
      answer = await call<Array<Rd.TopicPartitionOffset | Error>>((cb) => this.#consumer.committed(pending.partitions, START_READ_TIMEOUT_MS, cb));
    } catch (error) {
      if (this.#starting !== pending) return false; // a newer assignment replaced this one
      pending.held = pending.partitions;
      giveUp(`reading them failed: ${(error as Error)?.message ?? error}`);
      await delay(Math.min(timeoutMs, 200));
      return false;
    }
    if (this.#starting !== pending || this.#closed) return false;
    const starts: Rd.TopicPartitionOffset[] = [];
    const held: TopicPartition[] = [];
    const reasons: string[] = [];
    for (const [i, tp] of pending.partitions.entries()) {
      const entry = answer[i];
      const known = this.#known.get(group, tp);
      if (entry instanceof Error || entry === undefined) {
        // e.g. UNSTABLE_OFFSET_COMMIT after librdkafka's own retries: a transaction is pending.
        held.push(tp);
        reasons.push(`${tp.topic}:${tp.partition} ${entry?.message ?? "no answer"}`);
      } else if (typeof entry.offset === "number" && entry.offset >= 0) {
        starts.push({ topic: tp.topic, partition: tp.partition, offset: entry.offset });
        this.#known.note(group, tp, BigInt(entry.offset));
      } else if (known !== undefined) {
        held.push(tp);
        reasons.push(`${tp.topic}:${tp.partition} read as never committed, but ${known} was committed`);
      } else {
        starts.push({ topic: tp.topic, partition: tp.partition, offset: this.#options.offsetReset === "latest" ? OFFSET_END : OFFSET_BEGINNING });
      }
    }
    pending.held = held;
    if (held.length) {
      if (!pending.warned && reasons.some((r) => r.includes("never committed"))) {
        pending.warned = true;
        this.#options.log?.("warn", `holding new partitions: ${reasons.join("; ")}`);
      }
      giveUp(reasons.join("; "));
      await delay(Math.min(timeoutMs, 200));
      return false;
    }
    this.#consumer.assign(starts);
    this.#starting = undefined;
    return true;
  }

  held(): TopicPartition[] {
    return this.#starting ? [...this.#starting.held] : [];
  }

  async commit(offsets: CommitOffset[]): Promise<void> {
    if (offsets.length === 0) return;
    const list = offsets.map((o) => ({ topic: o.topic, partition: o.partition, offset: Number(o.offset) }));
    const sent = call((cb) => extras(this.#consumer).commitCb(list, cb)).then(() => {
      for (const o of offsets) this.#known.note(this.#options.groupId, o, o.offset);
    }, (error) => {
      throw classify(error, "committing offsets");
    });
    const tracked = sent.catch(() => {});
    this.#commits.add(tracked);
    void tracked.finally(() => this.#commits.delete(tracked));
    await sent;
  }

  owned(): TopicPartition[] {
    return [...this.#owned.values()];
  }

  generation(): number {
    return this.#assignments;
  }

  groupMetadata(): GroupMetadata {
    return { groupId: this.#options.groupId, generationId: this.#assignments, memberId: this.#options.clientId };
  }

  async endOffsets(): Promise<CommitOffset[]> {
    if (this.#closed) return [];
    // An admin client of its own: one derived from the consumer's handle (createFrom) crashed the
    // process when the consumer closed while a request was in flight.
    this.#admin ??= this.#lib.AdminClient.create({ "bootstrap.servers": this.#brokers.join(","), "client.id": `${this.#options.clientId}-offsets` });
    const request = latestOffsets(this.#lib, this.#admin, this.#options.topics);
    const tracked = request.then(() => {}, () => {});
    this.#adminCalls.add(tracked);
    void tracked.finally(() => this.#adminCalls.delete(tracked));
    try {
      return await request;
    } catch (error) {
      throw classify(error, "listing end offsets");
    }
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await Promise.allSettled([...this.#commits, ...this.#adminCalls]);
    if (this.#revokePending) {
      try {
        this.#unassign();
      } catch {
        // not connected any more
      }
    }
    this.#admin?.disconnect();
    if (this.#started) await disconnect(this.#consumer);
  }
}

/** Partition counts of the topics that exist (undefined for the others). */
async function partitionCountsOf(admin: Rd.IAdminClient, topics: string[]): Promise<Map<string, number | undefined>> {
  const existing = new Set(await call<string[]>((cb) => admin.listTopics({ timeout: ADMIN_TIMEOUT_MS }, cb)));
  const present = topics.filter((t) => existing.has(t));
  const result = new Map<string, number | undefined>(topics.map((t) => [t, undefined]));
  if (present.length === 0) return result;
  const described = await call<Rd.TopicDescription[]>((cb) => admin.describeTopics(present, { timeout: ADMIN_TIMEOUT_MS }, cb));
  for (const d of described) if (!d.error) result.set(d.name, d.partitions.length);
  return result;
}

/** End offsets (next offset to be written, read_committed) of every partition of the topics. */
async function latestOffsets(lib: Library, admin: Rd.IAdminClient, topics: string[]): Promise<CommitOffset[]> {
  const counts = await partitionCountsOf(admin, topics);
  const wanted: Rd.TopicPartitionOffsetSpec[] = [];
  for (const [topic, count] of counts) {
    for (let partition = 0; partition < (count ?? 0); partition++) wanted.push({ topic, partition, offset: lib.OffsetSpec.LATEST });
  }
  if (wanted.length === 0) return [];
  const result = await call<Rd.ListOffsetsResult[]>((cb) =>
    admin.listOffsets(wanted, { timeout: ADMIN_TIMEOUT_MS, isolationLevel: lib.IsolationLevel.READ_COMMITTED }, cb)
  );
  return result.filter((r) => !r.error).map((r) => ({ topic: r.topic, partition: r.partition, offset: BigInt(r.offset) }));
}

/** One send's records and the promise its delivery reports settle. */
interface Delivery {
  remaining: number;
  error: unknown;
  resolve(): void;
  reject(error: unknown): void;
}

/**
 * Produces records and resolves once librdkafka reports every one delivered (acks=all). Delivery
 * reports are polled on librdkafka's background thread, off the event loop.
 */
async function produceAll(producer: Rd.Producer, records: OutboundRecord[]): Promise<void> {
  if (records.length === 0) return;
  await new Promise<void>((resolve, reject) => {
    const delivery: Delivery = { remaining: records.length, error: undefined, resolve, reject };
    let i = 0;
    const next = () => {
      for (; i < records.length; i++) {
        const r = records[i]!;
        const headers = r.headers?.map(([hk, hv]) => ({ [hk]: toBuffer(hv)! }));
        try {
          producer.produce(r.topic, r.partition ?? null, toBuffer(r.value), toBuffer(r.key), null, delivery, headers);
        } catch (error) {
          // The local queue is full: wait for deliveries to drain it, then go on.
          if ((error as Rd.LibrdKafkaError)?.code === ERR.QUEUE_FULL) {
            setTimeout(next, 5);
            return;
          }
          delivery.remaining -= records.length - i;
          delivery.error ??= error;
          if (delivery.remaining === 0) reject(delivery.error);
          return;
        }
      }
    };
    next();
  });
}

function onDelivery(err: Rd.LibrdKafkaError | undefined | null, report: Rd.DeliveryReport): void {
  const delivery = report.opaque as Delivery | undefined;
  if (!delivery) return;
  if (err) delivery.error ??= err;
  if (--delivery.remaining === 0) {
    if (delivery.error) delivery.reject(delivery.error);
    else delivery.resolve();
  }
}

function producerConfig(brokers: string[], clientId: string): Rd.ProducerGlobalConfig {
  return {
    "bootstrap.servers": brokers.join(","),
    "client.id": clientId,
    // Idempotent (which implies acks=all): a retried send never writes a record twice or out of order.
    "enable.idempotence": true,
    // No linger: the loop hands over a whole batch at once and waits for its acks, so waiting for
    // more records only adds latency (a 1000-record send: 187k rec/s at 0 ms, 77k at 5 ms here).
    "linger.ms": 0,
    // A topic-level property; librdkafka takes it in the global config as the default.
    ...({ "message.timeout.ms": DELIVERY_TIMEOUT_MS } as Rd.ProducerGlobalConfig),
    "queue.buffering.max.messages": 1_000_000,
    "dr_cb": true,
  };
}

class ConfluentProducer implements Producer {
  readonly #producer: Rd.Producer;
  #connected: Promise<unknown> | undefined;

  constructor(lib: Library, brokers: string[], clientId: string) {
    this.#producer = new lib.Producer(producerConfig(brokers, clientId));
    this.#producer.on("delivery-report", onDelivery);
  }

  async #ready(): Promise<void> {
    this.#connected ??= connect(this.#producer).then(() => this.#producer.setPollInBackground(true));
    try {
      await this.#connected;
    } catch (error) {
      this.#connected = undefined; // the next send connects again
      throw error;
    }
  }

  async send(records: OutboundRecord[]): Promise<void> {
    if (records.length === 0) return;
    try {
      await this.#ready();
      await produceAll(this.#producer, records);
    } catch (error) {
      throw classify(error, "producing");
    }
  }

  async close(): Promise<void> {
    if (!this.#connected) return;
    const flushed = await call((cb) => this.#producer.flush(DELIVERY_TIMEOUT_MS, cb)).then(() => true, () => false);
    // Not flushed: the brokers are away; destroying the handle now can block for good (see
    // ConfluentTransactionalProducer.close), so it is left to end with the process.
    if (flushed) await disconnect(this.#producer);
  }
}

class ConfluentTransactionalProducer implements TransactionalProducer {
  readonly #producer: Rd.Producer;
  #initialized: Promise<void> | undefined;
  /** beginTransaction was called and neither commit nor abort since. */
  #open = false;
  /** Whether the open transaction holds anything. */
  #dirty = false;
  /** The last transactional call or send failed, and no commit or abort has succeeded since. */
  #troubled = false;

  constructor(lib: Library, brokers: string[], clientId: string, transactionalId: string) {
    this.#producer = new lib.Producer({
      ...producerConfig(brokers, clientId),
      "transactional.id": transactionalId,
      "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
      // librdkafka requires a record's delivery timeout within the transaction's.
      ...({ "message.timeout.ms": TRANSACTION_TIMEOUT_MS } as Rd.ProducerGlobalConfig),
    });
    this.#producer.on("delivery-report", onDelivery);
  }

  get inTransaction(): boolean {
    return this.#dirty;
  }

  /**
   * 1. connect; 2. InitProducerId for the transactional id: the broker fences a predecessor with
   * the same id and completes or aborts its open transaction before answering.
   */
  async ready(): Promise<void> {
    this.#initialized ??= (async () => {
      await connect(this.#producer);
      this.#producer.setPollInBackground(true);
      await call((cb) => this.#producer.initTransactions(TRANSACTION_CALL_TIMEOUT_MS, cb));
    })();
    try {
      await this.#initialized;
    } catch (error) {
      throw classify(error, "initializing transactions");
    }
  }

  async #begin(): Promise<void> {
    await this.ready();
    if (this.#open) return;
    try {
      await call((cb) => this.#producer.beginTransaction(cb));
    } catch (error) {
      throw classify(error, "beginning a transaction");
    }
    this.#open = true;
    this.#dirty = false;
  }

  async send(records: OutboundRecord[]): Promise<void> {
    if (records.length === 0) return;
    await this.#begin();
    this.#dirty = true;
    try {
      await produceAll(this.#producer, records);
    } catch (error) {
      this.#troubled = true;
      throw classify(error, "producing in a transaction");
    }
  }

  /**
   * The offsets are the next ones to read (message offset + 1), as the port defines them, and go
   * to librdkafka unchanged. (The library's KafkaJS-style example passes the message offset,
   * which would make a restart read the last record again.)
   */
  async sendOffsets(consumer: GroupConsumer, group: GroupMetadata, offsets: CommitOffset[]): Promise<void> {
    if (offsets.length === 0) return;
    if (!(consumer instanceof ConfluentConsumer)) throw new FvError("KAFKA_FATAL", "a confluent transaction needs a confluent consumer");
    // librdkafka sends the consumer's current group metadata; work read before the latest
    // assignment must not commit with it.
    if (consumer.generation() !== group.generationId) {
      throw new FvError("KAFKA_FENCED", `the group rebalanced since this work was read (assignment ${group.generationId}, now ${consumer.generation()})`);
    }
    await this.#begin();
    this.#dirty = true;
    const list = offsets.map((o) => ({ topic: o.topic, partition: o.partition, offset: Number(o.offset) }));
    try {
      await retryingTxnCall(() => call((cb) => this.#producer.sendOffsetsToTransaction(list, consumer.raw, TXN_RETRY_CALL_MS, cb)));
    } catch (error) {
      this.#troubled = true;
      throw classify(error, "adding offsets to a transaction");
    }
  }

  async commit(): Promise<void> {
    // An empty transaction stays open on our side; nothing to tell the broker.
    if (!this.#open || !this.#dirty) return;
    try {
      // librdkafka's contract: a retriable error (a timeout while the broker is away) means the
      // outcome is not known yet, and the commit must be called again, not aborted; only an error
      // that requires an abort (or a fatal one) ends it.
      await retryingTxnCall(() => call((cb) => this.#producer.commitTransaction(TXN_RETRY_CALL_MS, cb)));
    } catch (error) {
      // Still open: the loop aborts it (librdkafka needs the abort before the next begin).
      this.#troubled = true;
      throw classify(error, "committing a transaction");
    }
    this.#open = false;
    this.#dirty = false;
    this.#troubled = false;
  }

  async abort(): Promise<void> {
    if (!this.#open || !this.#dirty) return;
    this.#open = false;
    this.#dirty = false;
    try {
      await call((cb) => this.#producer.abortTransaction(TRANSACTION_CALL_TIMEOUT_MS, cb));
    } catch (error) {
      this.#troubled = true;
      throw classify(error, "aborting a transaction");
    }
    this.#troubled = false;
  }

  async releasePendingOffsets(consumer: GroupConsumer, held: TopicPartition): Promise<void> {
    if (this.#dirty) throw new FvError("KAFKA_FATAL", "releasePendingOffsets with a transaction open");
    if (!(consumer instanceof ConfluentConsumer)) throw new FvError("KAFKA_FATAL", "a confluent transaction needs a confluent consumer");
    await this.#begin();
    this.#dirty = true;
    try {
      // librdkafka adds the group only with an offset (an empty list is a no-op); the abort drops it.
      await call((cb) => this.#producer.sendOffsetsToTransaction([{ topic: held.topic, partition: held.partition, offset: 0 }], consumer.raw, TRANSACTION_CALL_TIMEOUT_MS, cb));
    } catch (error) {
      await this.abort().catch(() => {});
      throw classify(error, "releasing pending offset commits");
    }
    await this.abort();
  }

  /**
   * Aborts what is open, then frees the handle, but only when librdkafka's last word was a
   * success. The binding's disconnect runs `rd_kafka_destroy` in a libuv threadpool thread, and
   * for a transactional producer that failed during a broker outage that call never returned,
   * even once the broker was back (Node soak, seeds 23 and 25: 4 processes that logged STOPPED
   * and never exited). Node joins every threadpool thread at exit, so one such call holds the
   * process forever, and each takes a thread from the pool (4 by default) that `consume()` also
   * needs. A handle in trouble is left as it is: fenced by the next producer with the same
   * transactional id, it ends with the process.
   */
  async close(): Promise<void> {
    if (!this.#initialized) return;
    const initialized = await this.#initialized.then(() => true, () => false);
    if (!initialized) return;
    await this.abort().catch(() => {});
    if (this.#troubled) return;
    await disconnect(this.#producer);
  }
}

class ConfluentAdmin implements Admin {
  readonly #lib: Library;
  readonly #brokers: string[];
  readonly #clientId: string;
  readonly #admin: Rd.IAdminClient;
  /** Requests in flight; close waits for them before it frees the native handle. */
  readonly #calls = new Set<Promise<void>>();
  /** Consumers that read a group's committed offsets, by "stable|latest:group" (see #offsetReader). */
  readonly #offsetReaders = new Map<string, Promise<Rd.KafkaConsumer>>();
  #closed = false;

  constructor(lib: Library, brokers: string[], clientId: string) {
    this.#lib = lib;
    this.#brokers = brokers;
    this.#clientId = clientId;
    this.#admin = lib.AdminClient.create({ "bootstrap.servers": brokers.join(","), "client.id": clientId });
  }

  /** Runs one request, tracked so close waits for it; after close, requests fail cleanly. */
  #track<T>(what: string, request: () => Promise<T>): Promise<T> {
    if (this.#closed) return Promise.reject(new FvError("KAFKA_FATAL", `${what}: the admin client is closed`));
    const running = request();
    const tracked = running.then(() => {}, () => {});
    this.#calls.add(tracked);
    void tracked.finally(() => this.#calls.delete(tracked));
    return running;
  }

  partitionCounts(topics: string[]): Promise<Map<string, number | undefined>> {
    return this.#track("describing topics", async () => {
      try {
        return await partitionCountsOf(this.#admin, topics);
      } catch (error) {
        throw classify(error, `describing topics ${topics.join(", ")}`);
      }
    });
  }

  createTopics(specs: TopicSpec[]): Promise<void> {
    return this.#track("creating topics", () => this.#createTopics(specs));
  }

  async #createTopics(specs: TopicSpec[]): Promise<void> {
    const counts = await this.partitionCounts(specs.map((s) => s.topic));
    for (const spec of specs) {
      if (counts.get(spec.topic) !== undefined) continue;
      try {
        await call((cb) =>
          this.#admin.createTopic(
            // deno-lint-ignore no-explicit-any
            { topic: spec.topic, num_partitions: spec.partitions, replication_factor: 1, config: (spec.configs ?? {}) as any },
            ADMIN_TIMEOUT_MS,
            cb,
          )
        );
      } catch (error) {
        if ((error as Rd.LibrdKafkaError)?.code === ERR.TOPIC_ALREADY_EXISTS) continue;
        throw classify(error, `creating topic ${spec.topic}`);
      }
    }
  }

  /**
   * Every record of one partition, read_committed: a consumer without a group assigned to the
   * partition from its start reads until its position reaches the end offset read before.
   */
  readPartition(topic: string, partition: number): Promise<InboundRecord[]> {
    return this.#track("reading a partition", () => this.#readPartition(topic, partition));
  }

  async #readPartition(topic: string, partition: number): Promise<InboundRecord[]> {
    const out: InboundRecord[] = [];
    const [end] = (await latestOffsets(this.#lib, this.#admin, [topic]).catch((error) => {
      throw classify(error, `reading the end of ${topic}[${partition}]`);
    })).filter((o) => o.partition === partition);
    if (!end || end.offset <= 0n) return out;
    const consumer = new this.#lib.KafkaConsumer({
      "bootstrap.servers": this.#brokers.join(","),
      "group.id": `fv-restore-${crypto.randomUUID()}`,
      "client.id": `${this.#clientId}-restore`,
      "enable.auto.commit": false,
      "enable.auto.offset.store": false,
      "isolation.level": "read_committed",
      "enable.partition.eof": true,
      "fetch.wait.max.ms": FETCH_MAX_WAIT_MS,
    });
    let atEnd = false;
    consumer.on("partition.eof", (eof) => {
      if (eof.topic === topic && eof.partition === partition && BigInt(eof.offset) >= end.offset) atEnd = true;
    });
    try {
      await connect(consumer);
      consumer.setDefaultConsumeTimeout(200);
      consumer.assign([{ topic, partition, offset: -2 /* OFFSET_BEGINNING */ }]);
      const deadline = Date.now() + 60_000;
      while (!atEnd) {
        const messages = await call<Rd.Message[]>((cb) => consumer.consume(1000, cb));
        for (const m of messages) if (BigInt(m.offset) < end.offset) out.push(toInbound(m));
        const position = consumer.position([{ topic, partition }])[0]?.offset;
        if (position !== undefined && position >= 0 && BigInt(position) >= end.offset) break;
        if (Date.now() > deadline) throw new FvError("KAFKA_RETRYABLE", `reading ${topic}[${partition}] did not reach offset ${end.offset} within 60 s`);
      }
      return out;
    } catch (error) {
      throw classify(error, `reading ${topic}[${partition}]`);
    } finally {
      await disconnect(consumer);
    }
  }

  committedOffsets(groupId: string, topics: string[], options: { stable?: boolean; partitions?: number[] } = {}): Promise<CommitOffset[]> {
    return this.#track("reading committed offsets", () => this.#committedOffsets(groupId, topics, options));
  }

  async #committedOffsets(groupId: string, topics: string[], options: { stable?: boolean; partitions?: number[] }): Promise<CommitOffset[]> {
    const counts = await partitionCountsOf(this.#admin, topics).catch((error) => {
      throw classify(error, `describing topics ${topics.join(", ")}`);
    });
    const partitions: Rd.TopicPartition[] = [];
    for (const [topic, count] of counts) {
      for (let partition = 0; partition < (count ?? 0); partition++) if (!options.partitions || options.partitions.includes(partition)) partitions.push({ topic, partition });
    }
    if (partitions.length === 0) return [];
    try {
      const reader = await this.#offsetReader(groupId, options.stable ?? false);
      const committed = await call<Array<Rd.TopicPartitionOffset | Error>>((cb) => reader.committed(partitions, ADMIN_TIMEOUT_MS, cb));
      // A partition that failed (e.g. UNSTABLE_OFFSET_COMMIT) comes back as an Error in its place,
      // with no topic or offset: it is not "no commit yet".
      const failed = committed.findIndex((p) => p instanceof Error);
      if (failed >= 0) {
        const tp = partitions[failed]!;
        throw new FvError("KAFKA_RETRYABLE", `reading the committed offset of ${tp.topic}:${tp.partition} failed: ${(committed[failed] as Error).message}`);
      }
      // No commit yet: librdkafka gives OFFSET_INVALID, which the binding hands over as no offset.
      return (committed as Rd.TopicPartitionOffset[]).map((p) => ({
        topic: p.topic,
        partition: p.partition,
        offset: typeof p.offset !== "number" || p.offset < 0 ? -1n : BigInt(p.offset),
      }));
    } catch (error) {
      throw classify(error, `reading committed offsets of ${groupId}`);
    }
  }

  /**
   * A consumer of the group that never joins it, for reading its committed offsets. Not the admin
   * client's ListConsumerGroupOffsets: librdkafka (2.15.1 here) dereferences the admin handle's
   * missing consumer group when that answers NOT_COORDINATOR, which a broker restart brings, and
   * the process dies with SIGSEGV (librdkafka issue #5040, confluent-kafka-javascript #374). A
   * consumer has its group, so the same answer is retried. read_committed makes librdkafka ask
   * for stable offsets (RequireStable, KIP-447).
   */
  #offsetReader(groupId: string, stable: boolean): Promise<Rd.KafkaConsumer> {
    const key = `${stable ? "stable" : "latest"}:${groupId}`;
    let reader = this.#offsetReaders.get(key);
    if (!reader) {
      const consumer = new this.#lib.KafkaConsumer({
        "bootstrap.servers": this.#brokers.join(","),
        "group.id": groupId,
        "client.id": `${this.#clientId}-offsets`,
        "enable.auto.commit": false,
        "isolation.level": stable ? "read_committed" : "read_uncommitted",
      });
      reader = connect(consumer).then(() => consumer);
      reader.catch(() => this.#offsetReaders.delete(key));
      this.#offsetReaders.set(key, reader);
    }
    return reader;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await Promise.allSettled([...this.#calls]);
    const readers = await Promise.allSettled([...this.#offsetReaders.values()]);
    await Promise.all(readers.map((r) => (r.status === "fulfilled" ? disconnect(r.value) : undefined)));
    this.#admin.disconnect();
  }
}

/** The librdkafka client (Node only). Throws a clear error when the addon does not load. */
export function confluentClient(brokers: string[]): KafkaClient {
  const lib = loadLibrary();
  const known = new KnownOffsets();
  return {
    name: "confluent",
    consumer: (options) => new ConfluentConsumer(lib, brokers, options, known),
    producer: ({ clientId }) => new ConfluentProducer(lib, brokers, clientId),
    transactionalProducer: ({ clientId, transactionalId }) => new ConfluentTransactionalProducer(lib, brokers, clientId, transactionalId),
    admin: ({ clientId }) => new ConfluentAdmin(lib, brokers, clientId),
  };
}
