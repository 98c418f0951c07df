/**
 * The Kafka port on @platformatic/kafka (pure JS: runs on Bun, Deno and Node).
 *
 * The library has no revoke callback: it rejoins the group by itself and emits
 * `consumer:group:rebalance` (a rebalance started) and `consumer:group:join` (the new
 * assignment). The adapter turns those into the port's AssignmentListener calls and filters
 * out buffered records of partitions this member no longer owns.
 */
import { Buffer } from "node:buffer";
import {
  Admin as PltAdmin,
  Consumer as PltConsumer,
  findErrorBy,
  murmur2,
  type Message,
  type MessagesStream,
  type GroupPartitionsAssigner,
  Producer as PltProducer,
} from "@platformatic/kafka";
import { FvError } from "../errors.ts";
import { filterAbortedTransactions } from "./aborted-transactions.ts";
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

/**
 * Group timings. A killed member's partitions move after the session timeout (10 s by default:
 * quick takeover on one machine while tolerating GC pauses). Heartbeats every second notice a
 * rebalance fast; a rebalance waits at most 30 s for members to rejoin.
 */
const GROUP_TIMINGS = { sessionTimeout: 10_000, heartbeatInterval: 1_000, rebalanceTimeout: 30_000 };
/**
 * Most time the loop's rebalance hook may hold a rejoin: well inside the rebalance timeout, so
 * the member still joins the new generation; a checkpoint takes far less.
 */
const REBALANCE_HOOK_MS = 20_000;
/** An abort waits this long for the transaction's requests to settle: past the library's retries of one request. */
const ABORT_WAIT_MS = 60_000;

/** Resolves once `promise` settles or `ms` passed, whichever comes first. */
async function settleWithin(promise: Promise<unknown>, ms: number): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  await Promise.race([promise.then(() => {}, () => {}), new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)))]);
  clearTimeout(timer);
}

/** How long a newly assigned partition waits for its stable committed offset: past any transaction timeout. */
const STABLE_OFFSETS_WAIT_MS = 60_000;
/**
 * Transaction timeout (the library sends its request timeout as the transaction timeout): a
 * crashed producer's open transaction is aborted by the broker after this long, unblocking
 * read_committed readers. Short, because a checkpoint interval is far shorter.
 */
const TRANSACTION_TIMEOUT_MS = 15_000;
/** A fetch waits at most this long on the broker for new data: short, so polls stay responsive. */
const FETCH_MAX_WAIT_MS = 500;

const key = (topic: string, partition: number) => `${topic}\u0000${partition}`;


/**
 * What each member tells the group leader when it joins (the subscription's user data): its
 * stable name, the group instance id when it has one. Constant across rejoins, so a static
 * member that comes back is not seen as changed (which would start a rebalance).
 */
const memberUserData = (name: string) => Buffer.from(JSON.stringify({ fv: 1, name }));

function memberName(memberId: string, userData: Buffer | undefined): string {
  try {
    const name = userData?.length ? JSON.parse(userData.toString()).name : undefined;
    return typeof name === "string" ? name : memberId;
  } catch {
    return memberId;
  }
}

/**
 * Partition number p of every subscribed topic goes to the same member: p modulo the member
 * count, members sorted by their stable names (group instance ids), so a member that restarts
 * gets the same partitions back. Stateful stages keep one task per partition number, and a join
 * needs partition p of both inputs in one place; the library's round-robin deals partitions of
 * all topics out in one sequence and splits them.
 */
const coPartitionedAssigner: GroupPartitionsAssigner = (_current, members, topics, metadata) => {
  const ids = [...members.entries()]
    .map(([memberId, subscription]) => ({ memberId, name: memberName(memberId, subscription.metadata as Buffer | undefined) }))
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : a.memberId < b.memberId ? -1 : 1))
    .map((m) => m.memberId);
  const out = ids.map((memberId) => ({ memberId, assignments: new Map<string, { topic: string; partitions: number[] }>() }));
  for (const topic of topics) {
    const count = metadata.topics.get(topic)?.partitionsCount ?? 0;
    for (let p = 0; p < count; p++) {
      const member = out[p % out.length]!;
      const entry = member.assignments.get(topic) ?? { topic, partitions: [] };
      entry.partitions.push(p);
      member.assignments.set(topic, entry);
    }
  }
  return out;
};

/**
 * Produce requests stay under the broker's message.max.bytes (1 MiB by default): a send is split
 * into chunks of at most this many bytes of keys and values. Records sent to an explicit
 * partition (state changelogs) are never split from their (topic, partition) group, so one
 * partition's changelog stays one atomic batch; the state topic allows large batches.
 */
const MAX_SEND_BYTES = 512 * 1024;

function chunkBySize<T extends { topic: string; partition?: number; key?: Buffer; value?: Buffer }>(messages: T[]): T[][] {
  // Keep explicit-partition groups together, in their order.
  const groups: T[][] = [];
  const byPartition = new Map<string, T[]>();
  for (const m of messages) {
    if (m.partition === undefined) {
      groups.push([m]);
      continue;
    }
    const k = `${m.topic}\u0000${m.partition}`;
    let group = byPartition.get(k);
    if (!group) {
      group = [];
      byPartition.set(k, group);
      groups.push(group);
    }
    group.push(m);
  }
  const chunks: T[][] = [];
  let current: T[] = [];
  let bytes = 0;
  for (const group of groups) {
    const size = group.reduce((sum, m) => sum + (m.key?.length ?? 0) + (m.value?.length ?? 0) + 64, 0);
    if (current.length && bytes + size > MAX_SEND_BYTES) {
      chunks.push(current);
      current = [];
      bytes = 0;
    }
    current.push(...group);
    bytes += size;
  }
  if (current.length) chunks.push(current);
  return chunks;
}

function toBuffer(data: Uint8Array | string | null | undefined): Buffer | undefined {
  if (data === null || data === undefined) return undefined;
  if (typeof data === "string") return Buffer.from(data, "utf8");
  return Buffer.isBuffer(data) ? data : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
}

/** A state restore read without progress for this long starts over from where it got, at most this many times. */
const READ_STALL_MS = 10_000;
const READ_ATTEMPTS = 5;
/** The 1 of the Kafka protocol's isolation level: read_committed. */
const READ_COMMITTED = 1;

function toInbound(message: Message<Buffer, Buffer, Buffer, Buffer>): InboundRecord {
  const headers: Array<[string, Uint8Array]> = [];
  for (const [hk, hv] of message.headers) headers.push([hk.toString(), hv]);
  return {
    topic: message.topic,
    partition: message.partition,
    offset: message.offset,
    timestamp: message.timestamp,
    key: message.key ?? null,
    value: message.value ?? null,
    headers,
  };
}

function toMessage(r: OutboundRecord) {
  return {
    topic: r.topic,
    key: toBuffer(r.key),
    value: toBuffer(r.value),
    partition: r.partition,
    headers: r.headers ? new Map(r.headers.map(([k, v]) => [toBuffer(k)!, toBuffer(v)!])) : undefined,
  };
}

/**
 * Checks that a send the library acknowledged wrote to every partition it had records for: the
 * produce results name each partition written. In a fault soak, a transaction whose sends had
 * all resolved held 3 of a batch's 437 records (the rest were never written, not even aborted),
 * and its offsets committed: the rows were lost. Keyed records go where the library's default
 * partitioner puts them (murmur2 of the key, modulo the partition count); keyless ones are not
 * checked. A gap is retryable: the transaction aborts (exactly-once), the send is retried
 * (at-least-once).
 */
export function checkWritten(producer: PltProducer, messages: ReturnType<typeof toMessage>[], result: unknown): void {
  const offsets = (result as { offsets?: Array<{ topic: string; partition: number }> } | undefined)?.offsets;
  if (!offsets) return;
  const written = new Set(offsets.map((o) => `${o.topic}\u0000${o.partition}`));
  const metadata = (producer as unknown as { currentMetadata?: { topics: Map<string, { partitionsCount: number }> } }).currentMetadata;
  // The usual case costs no hashing: every partition of each topic sent to was written.
  const perTopic = new Map<string, number>();
  for (const o of offsets) perTopic.set(o.topic, (perTopic.get(o.topic) ?? 0) + 1);
  for (const m of messages) {
    const count = metadata?.topics.get(m.topic)?.partitionsCount;
    if (!count || perTopic.get(m.topic) === count || (m.partition === undefined && !m.key)) continue;
    const partition = m.partition !== undefined ? m.partition % count : (murmur2(m.key!) >>> 0) % count;
    if (!written.has(`${m.topic}\u0000${partition}`)) {
      throw new FvError("KAFKA_RETRYABLE", `the client acknowledged a send that wrote nothing to ${m.topic}[${partition}] (${offsets.length} partitions written)`);
    }
  }
}

/** Broker errors (by the library's `apiId`) that mean this member or producer was fenced. */
const FENCED_API_IDS = ["ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID", "FENCED_INSTANCE_ID", "INVALID_PRODUCER_EPOCH", "PRODUCER_FENCED", "REBALANCE_IN_PROGRESS"];
/** Transaction and coordinator states that an abort and a fresh start get past. */
const ABORTABLE_API_IDS = ["INVALID_TXN_STATE", "CONCURRENT_TRANSACTIONS", "COORDINATOR_LOAD_IN_PROGRESS", "NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE", "UNSTABLE_OFFSET_COMMIT"];

/**
 * Sorts a library error by the recovery it needs, from the library's own properties
 * (`needsRejoin`, `apiId`, `canRetry`, `code`), searched through nested errors:
 *   - fenced: the group moved on (needs a rejoin) or the producer was fenced;
 *   - retryable: a network failure or timeout anywhere in the chain (a broker restarting), a
 *     transaction or coordinator state that passes, or retries the library gave up on although
 *     each attempt was retriable (`fetch failed 4 times.` while the broker was down);
 *   - fatal: the rest (a non-retriable broker answer, a misuse of the library).
 */
export function classify(error: unknown, what: string): FvError {
  if (error instanceof FvError) return error;
  const text = error instanceof Error ? error.message : String(error);
  const has = (property: string, value: unknown) => findErrorBy(error as Error, property, value) !== null;
  const fenced = has("needsRejoin", true) || has("fencedInstanceId", true) || FENCED_API_IDS.some((id) => has("apiId", id));
  const transient = has("code", "PLT_KFK_NETWORK") || has("code", "PLT_KFK_TIMEOUT") || ABORTABLE_API_IDS.some((id) => has("apiId", id));
  const retriedOut = has("code", "PLT_KFK_MULTIPLE") && !has("canRetry", false);
  const code = fenced ? "KAFKA_FENCED" : transient || retriedOut || has("canRetry", true) ? "KAFKA_RETRYABLE" : "KAFKA_FATAL";
  // deno-lint-ignore no-explicit-any
  const nested = (error as any)?.errors as unknown[] | undefined;
  const detail = Array.isArray(nested) && nested.length ? ` (${[...new Set(nested.map((e) => (e as Error)?.message ?? String(e)))].slice(0, 3).join("; ")})` : "";
  // No broker answered at all: say so where the stream starts (run-stream.ts), not "metadata failed 4 times".
  // The library's NetworkError holds the socket's error (ECONNREFUSED, ETIMEDOUT …) as its cause.
  const network = findErrorBy(error as Error, "code", "PLT_KFK_NETWORK");
  const socketCode = (network?.cause as { code?: unknown } | undefined)?.code;
  const unreachable = socketCode === "ECONNREFUSED"
    ? "connection refused"
    : socketCode === "ETIMEDOUT" || has("code", "PLT_KFK_TIMEOUT")
    ? "a timeout"
    : network
    ? `no connection${typeof socketCode === "string" ? `: ${socketCode}` : ""}`
    : undefined;
  return new FvError(code, `${what} failed: ${text}${detail}`, { cause: error, ...(unreachable ? { context: { unreachable } } : {}) });
}

class PlatformaticConsumer implements GroupConsumer {
  readonly #consumer: PltConsumer;
  readonly #options: ConsumerOptions;
  #stream: MessagesStream<Buffer, Buffer, Buffer, Buffer> | undefined;
  #owned = new Map<string, TopicPartition>();
  /** The member id and generation of the last join: a join that does not follow on from them is a new membership. */
  #joined: { memberId: string; generation: number } | undefined;
  /**
   * Next offset to hand out per owned partition. After every join the library rewinds all
   * partitions to their committed offsets; records below this position of a partition we kept
   * were already handed to the loop, so they are skipped rather than processed twice.
   */
  readonly #position = new Map<string, bigint>();
  /** Newly assigned partitions whose stable committed offset is still being read (exactly-once). */
  readonly #held = new Set<string>();
  /** A rebalance is under way (from the rejoin's start to the new assignment): poll hands out nothing. */
  #rebalancing = false;
  readonly #brokers: string[];
  #waiter: (() => void) | undefined;
  /** Records received and not yet polled; the stream pauses when it holds `#maxBuffered`. */
  #buffer: Array<Message<Buffer, Buffer, Buffer, Buffer>> = [];
  readonly #maxBuffered: number;
  #error: unknown;
  #closed = false;

  constructor(brokers: string[], options: ConsumerOptions) {
    this.#options = options;
    this.#brokers = brokers;
    this.#maxBuffered = options.maxBuffered ?? 4096;
    const userData = memberUserData(options.groupInstanceId ?? options.clientId);
    this.#consumer = new PltConsumer({
      groupId: options.groupId,
      clientId: options.clientId,
      bootstrapBrokers: brokers,
      autocommit: false,
      maxWaitTime: FETCH_MAX_WAIT_MS,
      partitionAssigner: coPartitionedAssigner,
      ...(options.groupInstanceId ? { groupInstanceId: options.groupInstanceId } : {}),
      // Called before every JoinGroup (the first join and each rejoin), and the library waits for
      // it: the loop's rebalance hook runs here, so what this member did in the old generation is
      // committed (or aborted) while that generation still holds, and no record is handed out
      // until the new assignment is known.
      protocolsMetadata: async () => {
        this.#rebalancing = true;
        await this.#beforeRejoin();
        return userData;
      },
      ...GROUP_TIMINGS,
      ...(options.sessionTimeoutMs ? { sessionTimeout: options.sessionTimeoutMs, heartbeatInterval: Math.min(1000, Math.floor(options.sessionTimeoutMs / 3)) } : {}),
    });
    filterAbortedTransactions(this.#consumer);
    // The library emits "error" when rejoining the group after a failed heartbeat fails too (a
    // zombie waking after its session timed out, or a close racing a rejoin). Unheard, that event
    // would crash the process; the next poll reports it instead, and the loop sorts it.
    // A failed rejoin is never fatal: a fresh session joins again (or, fenced, gives up).
    this.#consumer.on("error", (error: unknown) => {
      if (this.#closed) return;
      const sorted = classify(error, `rejoining group ${options.groupId}`);
      this.#error ??= sorted.code === "KAFKA_FATAL" ? new FvError("KAFKA_RETRYABLE", sorted.message, { cause: error }) : sorted;
      this.#wake();
    });
    this.#consumer.on("consumer:group:join", (payload: { memberId?: string; generationId?: number; assignments?: Array<{ topic: string; partitions: number[] }> }) => {
      this.#onJoin(payload.memberId ?? this.#consumer.memberId ?? "", payload.generationId ?? this.#consumer.generationId, payload.assignments ?? []);
    });
  }

  /** The loop's rebalance hook, bounded so that a stuck commit cannot hold the group past its rebalance timeout. */
  async #beforeRejoin(): Promise<void> {
    const hook = this.#options.listener?.onRebalance?.();
    if (!hook || this.#closed) return;
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      Promise.resolve(hook).catch(() => {}),
      new Promise<void>((resolve) => (timer = setTimeout(resolve, REBALANCE_HOOK_MS))),
    ]);
    clearTimeout(timer);
  }

  /**
   * A join completed. Partitions kept from the previous generation keep their positions only if
   * this join follows on from the last one (same member id, next generation): a member that
   * lost its membership (session expired while paused, the broker forgot it) may have missed a
   * generation in which another member owned and committed its partitions, so all of them count
   * as revoked and assigned anew, and wait for their stable committed offsets again.
   */
  #onJoin(memberId: string, generation: number, assignments: Array<{ topic: string; partitions: number[] }>): void {
    const next = new Map<string, TopicPartition>();
    for (const { topic, partitions } of assignments) {
      for (const partition of partitions) next.set(key(topic, partition), { topic, partition });
    }
    const previous = this.#joined;
    const continuous = previous !== undefined && previous.memberId === memberId && generation === previous.generation + 1;
    this.#joined = { memberId, generation };
    const kept = continuous ? this.#owned : new Map<string, TopicPartition>();
    const revoked = [...this.#owned].filter(([k]) => !next.has(k) || !kept.has(k)).map(([, tp]) => tp);
    const assigned = [...next].filter(([k]) => !kept.has(k)).map(([, tp]) => tp);
    this.#owned = next;
    for (const tp of revoked) this.#position.delete(key(tp.topic, tp.partition));
    for (const tp of assigned) this.#position.delete(key(tp.topic, tp.partition));
    if (this.#options.stableOffsets && assigned.length) this.#holdUntilStable(assigned);
    this.#rebalancing = false;
    if (assigned.length || revoked.length) this.#options.listener?.onAssignment?.({ assigned, revoked, owned: [...next.values()] });
    this.#wake();
  }

  async start(): Promise<void> {
    try {
      this.#stream = await this.#consumer.consume({
        topics: this.#options.topics,
        mode: "committed",
        fallbackMode: this.#options.offsetReset,
        autocommit: false,
        highWaterMark: 1024,
      });
    } catch (error) {
      throw classify(error, `joining group ${this.#options.groupId}`);
    }
    // Flowing mode with pause/resume for backpressure: the path the library's fetch loop
    // restarts reliably (pull mode with read() stalled after rebalances here).
    const stream = this.#stream;
    stream.on("data", (message: Message<Buffer, Buffer, Buffer, Buffer>) => {
      this.#buffer.push(message);
      if (this.#buffer.length >= this.#maxBuffered && !stream.isPaused()) stream.pause();
      this.#wake();
    });
    stream.on("error", (error: unknown) => {
      this.#error = error;
      this.#wake();
    });
  }

  #wake(): void {
    const waiter = this.#waiter;
    this.#waiter = undefined;
    waiter?.();
  }

  #drain(max: number, out: InboundRecord[]): void {
    if (this.#rebalancing) return;
    const buffer = this.#buffer;
    const kept: Array<Message<Buffer, Buffer, Buffer, Buffer>> = [];
    let taken = 0;
    while (out.length < max && taken < buffer.length) {
      const message = buffer[taken++]!;
      const k = key(message.topic, message.partition);
      if (this.#held.has(k)) {
        kept.push(message);
        continue;
      }
      // A record of a partition revoked since it was fetched: its new owner reads it again.
      if (!this.#owned.has(k)) continue;
      const position = this.#position.get(k);
      if (position !== undefined && message.offset < position) continue;
      this.#position.set(k, message.offset + 1n);
      out.push(toInbound(message));
    }
    this.#buffer = kept.length ? kept.concat(buffer.slice(taken)) : taken === buffer.length ? [] : buffer.slice(taken);
    const stream = this.#stream!;
    if (stream.isPaused() && this.#buffer.length < this.#maxBuffered / 2 && !this.#closed) stream.resume();
  }

  /**
   * The library reads committed offsets without require_stable, so right after a rebalance it
   * can start a partition from an offset that the previous owner's pending transaction is about
   * to move. Read the stable offset (the broker answers UNSTABLE_OFFSET_COMMIT until pending
   * transactions end: committed, aborted, or timed out after the transaction timeout) and skip
   * below it. Patient: a crashed owner's transaction lasts up to the transaction timeout.
   */
  #holdUntilStable(partitions: TopicPartition[]): void {
    for (const tp of partitions) this.#held.add(key(tp.topic, tp.partition));
    const admin = new PltAdmin({ clientId: `${this.#options.clientId}-stable`, bootstrapBrokers: this.#brokers });
    const topics = new Map<string, number[]>();
    for (const tp of partitions) topics.set(tp.topic, [...(topics.get(tp.topic) ?? []), tp.partition]);
    const until = Date.now() + STABLE_OFFSETS_WAIT_MS;
    const attempt = async (): Promise<void> => {
      try {
        const groups = await admin.listConsumerGroupOffsets({
          groups: [{ groupId: this.#options.groupId, topics: [...topics].map(([name, partitionIndexes]) => ({ name, partitionIndexes })) }],
          requireStable: true,
        });
        for (const t of groups[0]?.topics ?? []) {
          for (const p of t.partitions) {
            const k = key(t.name, p.partitionIndex);
            if (!this.#held.has(k)) continue; // revoked meanwhile
            if (p.committedOffset >= 0n && (this.#position.get(k) ?? -1n) < p.committedOffset) this.#position.set(k, p.committedOffset);
          }
        }
      } catch (error) {
        // UNSTABLE_OFFSET_COMMIT: wait for as long as it lasts (the loop reports a long wait); other errors for a while.
        const unstable = findErrorBy(error as Error, "apiId", "UNSTABLE_OFFSET_COMMIT") !== null;
        if ((unstable || Date.now() < until) && !this.#closed && partitions.some((tp) => this.#held.has(key(tp.topic, tp.partition)))) {
          await new Promise((r) => setTimeout(r, unstable ? 200 : 100));
          return attempt();
        }
        if (!this.#closed) this.#error ??= classify(error, `reading the stable committed offsets of group ${this.#options.groupId}`);
      }
      for (const tp of partitions) this.#held.delete(key(tp.topic, tp.partition));
      this.#wake();
    };
    void attempt().finally(() => admin.close().catch(() => {}));
  }

  generation(): number {
    return this.#consumer.generationId;
  }

  held(): TopicPartition[] {
    return [...this.#held].map((k) => this.#owned.get(k)).filter((tp): tp is TopicPartition => tp !== undefined);
  }

  groupMetadata(): GroupMetadata {
    const c = this.#consumer;
    return { groupId: c.groupId, generationId: c.generationId, memberId: c.memberId ?? "" };
  }

  /** The library consumer, for adding its group to a transaction. */
  get raw(): PltConsumer {
    return this.#consumer;
  }

  async poll(max: number, timeoutMs: number): Promise<InboundRecord[]> {
    if (!this.#stream) throw new FvError("KAFKA_FATAL", "poll before start");
    if (this.#error) throw classify(this.#error, "fetching");
    const out: InboundRecord[] = [];
    this.#drain(max, out);
    if (out.length > 0 || this.#closed) return out;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        this.#waiter = undefined;
        resolve();
      }, timeoutMs);
      this.#waiter = () => {
        clearTimeout(timer);
        resolve();
      };
    });
    if (this.#error) throw classify(this.#error, "fetching");
    this.#drain(max, out);
    return out;
  }

  async commit(offsets: CommitOffset[]): Promise<void> {
    if (offsets.length === 0) return;
    try {
      await this.#consumer.commit({ offsets: offsets.map((o) => ({ ...o, leaderEpoch: -1 })) });
    } catch (error) {
      throw classify(error, "committing offsets");
    }
  }

  owned(): TopicPartition[] {
    return [...this.#owned.values()];
  }

  async endOffsets(): Promise<CommitOffset[]> {
    try {
      const ends = await this.#consumer.listOffsets({ topics: this.#options.topics, isolationLevel: READ_COMMITTED });
      return [...ends].flatMap(([topic, offsets]) => offsets.map((offset, partition) => ({ topic, partition, offset })));
    } catch (error) {
      throw classify(error, "listing end offsets");
    }
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#wake();
    try {
      await this.#stream?.close();
    } finally {
      await this.#consumer.close(true);
    }
  }
}

class PlatformaticProducer implements Producer {
  readonly #producer: PltProducer;
  constructor(brokers: string[], clientId: string) {
    // Idempotent: a retried send (e.g. while a new topic's leaders settle) never writes a record twice.
    this.#producer = new PltProducer({ clientId, bootstrapBrokers: brokers, acks: -1, idempotent: true, autocreateTopics: false });
  }

  async send(records: OutboundRecord[]): Promise<void> {
    if (records.length === 0) return;
    try {
      for (const messages of chunkBySize(records.map(toMessage))) checkWritten(this.#producer, messages, await this.#producer.send({ messages }));
    } catch (error) {
      throw classify(error, "producing");
    }
  }

  async close(): Promise<void> {
    await this.#producer.close();
  }
}

type Transaction = Awaited<ReturnType<PltProducer["beginTransaction"]>>;

class PlatformaticTransactionalProducer implements TransactionalProducer {
  readonly #producer: PltProducer;
  #tx: Transaction | undefined;
  #offsetsAdded = false;
  /** Whether the open transaction holds anything; the broker refuses to end an empty one. */
  #dirty = false;
  /**
   * Sends and offset commits of the open transaction still under way (the loop may have given up
   * on one at its checkpoint deadline while the library still retries it).
   */
  readonly #inflight = new Set<Promise<unknown>>();

  /** Runs one request of the open transaction, tracked until it settles. */
  #track<T>(request: Promise<T>): Promise<T> {
    const settled = request.then(() => {}, () => {});
    this.#inflight.add(settled);
    void settled.then(() => this.#inflight.delete(settled));
    return request;
  }

  constructor(brokers: string[], clientId: string, transactionalId: string) {
    this.#producer = new PltProducer({
      clientId,
      bootstrapBrokers: brokers,
      transactionalId,
      idempotent: true,
      acks: -1,
      autocreateTopics: false,
      timeout: TRANSACTION_TIMEOUT_MS,
      // InitProducerId must carry -1/-1 for a new producer. The library's default (0/0) makes the
      // broker answer PRODUCER_FENCED whenever this transactional id was used before, i.e. after
      // every restart; with -1/-1 the broker bumps the epoch and fences the predecessor instead.
      producerId: -1n,
      producerEpoch: -1,
    });
  }

  get inTransaction(): boolean {
    return this.#dirty;
  }

  /**
   * Registers the transactional id with the broker (InitProducerId): a predecessor with the same
   * id is fenced and its open transaction completed or aborted before this returns. Call it
   * before consuming, so committed offsets read afterwards are final.
   */
  async ready(): Promise<void> {
    await this.#begin();
  }

  async #begin(): Promise<Transaction> {
    if (!this.#tx) {
      try {
        this.#tx = await this.#producer.beginTransaction();
      } catch (error) {
        throw classify(error, "beginning a transaction");
      }
      this.#offsetsAdded = false;
      this.#dirty = false;
    }
    return this.#tx;
  }

  async send(records: OutboundRecord[]): Promise<void> {
    if (records.length === 0) return;
    const tx = await this.#begin();
    this.#dirty = true;
    try {
      for (const messages of chunkBySize(records.map(toMessage))) checkWritten(this.#producer, messages, await this.#track(tx.send({ messages })));
    } catch (error) {
      throw classify(error, "producing in a transaction");
    }
  }

  async sendOffsets(consumer: GroupConsumer, group: GroupMetadata, offsets: CommitOffset[]): Promise<void> {
    if (offsets.length === 0) return;
    if (!(consumer instanceof PlatformaticConsumer)) throw new FvError("KAFKA_FATAL", "a platformatic transaction needs a platformatic consumer");
    const tx = await this.#begin();
    this.#dirty = true;
    try {
      if (!this.#offsetsAdded) {
        await tx.addConsumer(consumer.raw);
        this.#offsetsAdded = true;
      }
      // The member as it was when this work was read: the broker refuses it if the group moved on.
      const metadata = { consumer: { ...group, coordinatorId: consumer.raw.coordinatorId ?? -1 } };
      for (const o of offsets) {
        // The library commits message.offset + 1, so hand it the last processed offset.
        // deno-lint-ignore no-explicit-any
        await this.#track(tx.addOffset({ topic: o.topic, partition: o.partition, offset: o.offset - 1n, metadata } as any));
      }
    } catch (error) {
      throw classify(error, "adding offsets to a transaction");
    }
  }

  async commit(): Promise<void> {
    const tx = this.#tx;
    // An empty transaction stays open on our side; nothing to tell the broker.
    if (!tx || !this.#dirty) return;
    this.#tx = undefined;
    this.#dirty = false;
    try {
      await tx.commit();
    } catch (error) {
      throw classify(error, "committing a transaction");
    }
  }

  async abort(): Promise<void> {
    const tx = this.#tx;
    if (!tx || !this.#dirty) return;
    this.#tx = undefined;
    this.#dirty = false;
    // End the transaction only once its requests have settled. A TxnOffsetCommit still retried
    // after EndTxn(abort) reaches the group coordinator as a pending offset commit that no
    // transaction ends (Kafka before KIP-890's transaction version 2): it holds every
    // require_stable reader of that partition, and the producer's next commit marker makes it
    // the committed offset, moving the partition to a stale position.
    await settleWithin(Promise.allSettled([...this.#inflight]), ABORT_WAIT_MS);
    try {
      await tx.abort();
    } catch (error) {
      throw classify(error, "aborting a transaction");
    }
  }

  async releasePendingOffsets(consumer: GroupConsumer): Promise<void> {
    if (this.#dirty) throw new FvError("KAFKA_FATAL", "releasePendingOffsets with a transaction open");
    if (!(consumer instanceof PlatformaticConsumer)) throw new FvError("KAFKA_FATAL", "a platformatic transaction needs a platformatic consumer");
    const tx = await this.#begin();
    this.#tx = undefined;
    try {
      await tx.addConsumer(consumer.raw);
      await tx.abort();
    } catch (error) {
      throw classify(error, "releasing pending offset commits");
    }
  }

  async close(): Promise<void> {
    await this.abort().catch(() => {});
    await this.#producer.close(true);
  }
}

class PlatformaticAdmin implements Admin {
  readonly #admin: PltAdmin;
  readonly #brokers: string[];
  readonly #clientId: string;
  constructor(brokers: string[], clientId: string) {
    this.#brokers = brokers;
    this.#clientId = clientId;
    this.#admin = new PltAdmin({ clientId, bootstrapBrokers: brokers });
  }

  async partitionCounts(topics: string[]): Promise<Map<string, number | undefined>> {
    const result = new Map<string, number | undefined>();
    try {
      const existing = new Set(await this.#admin.listTopics());
      const present = topics.filter((t) => existing.has(t));
      const metadata = present.length ? await this.#admin.metadata({ topics: present, forceUpdate: true }) : undefined;
      for (const topic of topics) result.set(topic, metadata?.topics.get(topic)?.partitionsCount);
    } catch (error) {
      throw classify(error, `describing topics ${topics.join(", ")}`);
    }
    return result;
  }

  async createTopics(specs: TopicSpec[]): Promise<void> {
    const counts = await this.partitionCounts(specs.map((s) => s.topic));
    for (const spec of specs) {
      if (counts.get(spec.topic) !== undefined) continue;
      try {
        await this.#admin.createTopics({
          topics: [spec.topic],
          partitions: spec.partitions,
          replicas: 1,
          configs: Object.entries(spec.configs ?? {}).map(([name, value]) => ({ name, value })),
        });
      } catch (error) {
        // deno-lint-ignore no-explicit-any
        if ((error as any)?.findBy?.("apiId", "TOPIC_ALREADY_EXISTS") || /already exists/i.test(String(error))) continue;
        throw classify(error, `creating topic ${spec.topic}`);
      }
    }
  }

  async readPartition(topic: string, partition: number): Promise<InboundRecord[]> {
    const out: InboundRecord[] = [];
    let end = -1n;
    // A read that makes no progress for a while starts over from where it got, with a fresh
    // consumer: the library's fetch loop was seen to stall (docs/ARCHITECTURE.md, known issues).
    for (let attempt = 1; ; attempt++) {
      const next = out.length ? out[out.length - 1]!.offset + 1n : 0n;
      const result = await this.#readFrom(topic, partition, next, end, out);
      end = result.end;
      if (result.done) return out;
      if (attempt >= READ_ATTEMPTS) {
        throw new FvError("KAFKA_RETRYABLE", `reading ${topic}[${partition}] made no progress after ${attempt} attempts (at offset ${result.position} of ${end})`);
      }
    }
  }

  /** Reads `topic[partition]` from `from` up to its end into `out`; `done: false` when it stalled first. */
  async #readFrom(topic: string, partition: number, from: bigint, knownEnd: bigint, out: InboundRecord[]): Promise<{ done: boolean; end: bigint; position: bigint }> {
    // A throwaway group with a manual start offset; other partitions start at their end.
    const consumer = new PltConsumer({
      groupId: `fv-restore-${crypto.randomUUID()}`,
      clientId: `${this.#clientId}-restore`,
      bootstrapBrokers: this.#brokers,
      autocommit: false,
      maxWaitTime: 100,
    });
    filterAbortedTransactions(consumer);
    // A failed group rejoin is emitted as "error"; the stall watchdog below retries the read.
    consumer.on("error", () => {});
    let position = from;
    try {
      let end = knownEnd;
      if (end < 0n) {
        const ends = await consumer.listOffsets({ topics: [topic], isolationLevel: READ_COMMITTED });
        end = ends.get(topic)?.[partition] ?? 0n;
      }
      if (from >= end) return { done: true, end, position };
      const stream = await consumer.consume({ topics: [topic], mode: "manual", offsets: [{ topic, partition, offset: from }], autocommit: false });
      const key = `${topic}:${partition}`;
      let progressAt = Date.now();
      const done = await new Promise<boolean>((resolve, reject) => {
        const watchdog = setInterval(() => {
          if (Date.now() - progressAt > READ_STALL_MS) {
            clearInterval(watchdog);
            resolve(false);
          }
        }, 500);
        const check = () => {
          const fetched = stream.offsetsToFetch.get(key) ?? 0n;
          if (fetched > position) {
            position = fetched;
            progressAt = Date.now();
          }
          if (fetched >= end) {
            clearInterval(watchdog);
            resolve(true);
          }
        };
        stream.on("data", (message: Message<Buffer, Buffer, Buffer, Buffer>) => {
          if (message.partition !== partition || message.offset >= end || message.offset < from) return;
          if (out.length && message.offset <= out[out.length - 1]!.offset) return;
          out.push(toInbound(message));
          progressAt = Date.now();
        });
        stream.on("fetch", check);
        stream.on("error", (error) => {
          clearInterval(watchdog);
          reject(error);
        });
      });
      await Promise.race([stream.close(), new Promise((r) => setTimeout(r, 5000))]);
      return { done, end, position };
    } catch (error) {
      throw classify(error, `reading ${topic}[${partition}]`);
    } finally {
      await Promise.race([Promise.resolve(consumer.close(true)).catch(() => {}), new Promise((r) => setTimeout(r, 5000))]);
    }
  }

  async committedOffsets(groupId: string, topics: string[], options: { stable?: boolean; partitions?: number[] } = {}): Promise<CommitOffset[]> {
    const counts = await this.partitionCounts(topics);
    const wanted = topics
      .filter((t) => counts.get(t) !== undefined)
      .map((name) => ({ name, partitionIndexes: options.partitions ?? Array.from({ length: counts.get(name)! }, (_, i) => i) }));
    const until = Date.now() + STABLE_OFFSETS_WAIT_MS;
    for (;;) {
      try {
        const groups = await this.#admin.listConsumerGroupOffsets({ groups: [{ groupId, topics: wanted }], ...(options.stable ? { requireStable: true } : {}) });
        const out: CommitOffset[] = [];
        for (const group of groups) {
          for (const t of group.topics) {
            for (const p of t.partitions) out.push({ topic: t.name, partition: p.partitionIndex, offset: p.committedOffset });
          }
        }
        return out;
      } catch (error) {
        // UNSTABLE_OFFSET_COMMIT: a transaction that commits these offsets is still pending.
        if (options.stable && findErrorBy(error as Error, "apiId", "UNSTABLE_OFFSET_COMMIT") && Date.now() < until) {
          await new Promise((r) => setTimeout(r, 100));
          continue;
        }
        throw classify(error, `reading committed offsets of ${groupId}`);
      }
    }
  }

  async close(): Promise<void> {
    await this.#admin.close();
  }
}

/** The pure-JS client. */
export function platformaticClient(brokers: string[]): KafkaClient {
  return {
    name: "platformatic",
    consumer: (options) => new PlatformaticConsumer(brokers, options),
    producer: ({ clientId }) => new PlatformaticProducer(brokers, clientId),
    transactionalProducer: ({ clientId, transactionalId }) => new PlatformaticTransactionalProducer(brokers, clientId, transactionalId),
    admin: ({ clientId }) => new PlatformaticAdmin(brokers, clientId),
  };
}
