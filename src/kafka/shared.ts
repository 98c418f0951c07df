/**
 * What both Kafka adapters do the same way, written once: the partitions a member owns and its
 * position in each, the GroupMetadata a client's consumers hand its transactions, where a
 * transactional producer stands, requests tracked until they settle, topics created only when
 * missing, and the partitions of a list of topics. No library type here: each adapter folder
 * (`platformatic/`, `confluent/`) brings its own.
 */
import { Buffer } from "node:buffer";
import { deadline } from "../async.ts";
import { FvError } from "../errors.ts";
import type { GroupMetadata, TopicPartition, TopicSpec } from "./port.ts";
import { PairMap } from "./topic-partition.ts";

/**
 * Group timings of both adapters. A killed member's partitions move after the session timeout
 * (10 s by default: quick takeover on one machine while tolerating GC pauses); heartbeats every
 * second notice a rebalance fast.
 */
export const SESSION_TIMEOUT_MS = 10_000;
export const HEARTBEAT_INTERVAL_MS = 1_000;
/**
 * Most time the loop's rebalance hook may hold a rejoin (or a revoke): well inside the rebalance
 * timeout, so the member still joins the new generation; a checkpoint takes far less.
 */
export const REBALANCE_HOOK_MS = 20_000;
/**
 * Transaction timeout: a crashed producer's open transaction is aborted by the broker after this
 * long, unblocking read_committed readers. Short, because a checkpoint interval is far shorter.
 */
export const TRANSACTION_TIMEOUT_MS = 15_000;

/**
 * A record not acknowledged within this long fails its send (Kafka's delivery.timeout.ms):
 * librdkafka's message.timeout.ms; the pure-JS client, whose idempotent producer retries without
 * end, gives the send up then. The loop's session then ends, and closing its producer stops the
 * retries; the next session sends again from the last commit.
 */
export const DELIVERY_TIMEOUT_MS = 60_000;

/** The lookup key of a partition in the adapters' hot paths (one string per record). */
export const partitionKey = (topic: string, partition: number): string => `${topic}\u0000${partition}`;

/** Outgoing key, value or header as a Buffer (a view, not a copy, of a Uint8Array). */
export function toBuffer(data: Uint8Array | string | null | undefined): Buffer | undefined {
  if (data === null || data === undefined) return undefined;
  if (typeof data === "string") return Buffer.from(data, "utf8");
  return Buffer.isBuffer(data) ? data : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
}

const textsDecoder = new TextDecoder();

/** Whether two byte strings are equal. */
function same(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/**
 * UTF-8 bytes as text, for values that recur on record after record (header names, a hop row's
 * source partition): each distinct one is decoded once and found again by its bytes (up to
 * `limit` kept, each as a copy of its bytes, not a view: a view would keep a whole fetch response
 * alive).
 */
export class DecodedTexts {
  readonly #known: Array<{ bytes: Uint8Array; text: string }> = [];
  #last: { bytes: Uint8Array; text: string } | undefined;
  readonly #limit: number;

  constructor(limit = 32) {
    this.#limit = limit;
  }

  text(bytes: Uint8Array | null | undefined): string {
    if (!bytes) return "";
    // Records come in runs (of one partition, with the same headers): the last one found first.
    if (this.#last && same(this.#last.bytes, bytes)) return this.#last.text;
    for (const known of this.#known) {
      if (!same(known.bytes, bytes)) continue;
      this.#last = known;
      return known.text;
    }
    const text = textsDecoder.decode(bytes);
    if (this.#known.length < this.#limit) this.#known.push((this.#last = { bytes: new Uint8Array(bytes), text }));
    return text;
  }
}

/**
 * Runs the loop's rebalance hook, bounded by REBALANCE_HOOK_MS so that a stuck commit cannot hold
 * the group past its rebalance timeout. Never rejects: a failed hook lets the member go on.
 */
export function settleRebalanceHook(hook: Promise<void> | void): Promise<void> {
  return deadline(Promise.resolve(hook), REBALANCE_HOOK_MS).then(() => {}, () => {});
}

/**
 * The partitions a member owns, and its position in each: the next offset to hand out. After a
 * rebalance both libraries start every partition again from its committed offset (platformatic
 * rewinds all of them at every join, librdkafka at every assign); records below this member's own
 * position of a partition it kept were already handed to the loop, so they are skipped rather
 * than processed twice. A record of a partition not owned (revoked since it was fetched) is
 * dropped: its new owner reads it again.
 *
 * @example
 * const owned = new OwnedPartitions();
 * const { assigned, revoked } = owned.reassign([{ topic: "in", partition: 0 }]);
 * owned.accept("in", 0, 41n); // → true: hand it out; the position is now 42
 * owned.accept("in", 0, 41n); // → false: a rejoin rewound over it
 */
export class OwnedPartitions {
  /** By partition (a PairMap finds the partition of a run of records once: see its comment). */
  #owned = new PairMap<string, number, OwnedEntry>();

  /**
   * Takes a new assignment and tells what moved. A kept partition keeps its position, a newly
   * assigned one has none. `continuous` false (the member lost its membership in between, and may
   * have missed a generation in which another member owned and committed its partitions): nothing
   * counts as kept, every partition is revoked and assigned anew.
   */
  reassign(next: Iterable<TopicPartition>, continuous = true): { assigned: TopicPartition[]; revoked: TopicPartition[]; owned: TopicPartition[] } {
    const kept = continuous ? this.#owned : new PairMap<string, number, OwnedEntry>();
    const owned = new PairMap<string, number, OwnedEntry>();
    const assigned: TopicPartition[] = [];
    for (const { topic, partition } of next) {
      if (owned.has(topic, partition)) continue;
      const entry = kept.get(topic, partition);
      if (entry) owned.set(topic, partition, entry);
      else {
        const tp = { topic, partition };
        owned.set(topic, partition, { tp, position: undefined });
        assigned.push(tp);
      }
    }
    const revoked = this.#owned.values().filter(({ tp }) => !owned.has(tp.topic, tp.partition) || !kept.has(tp.topic, tp.partition)).map((entry) => entry.tp);
    this.#owned = owned;
    return { assigned, revoked, owned: this.list() };
  }

  /** Whether a record at `offset` is handed out: owned and not below the position, which moves past it. */
  accept(topic: string, partition: number, offset: bigint): boolean {
    const entry = this.#owned.get(topic, partition);
    if (!entry || (entry.position !== undefined && offset < entry.position)) return false;
    entry.position = offset + 1n;
    return true;
  }

  /** Skips records of an owned partition below `offset` (its stable committed offset, once read). */
  skipBelow(topic: string, partition: number, offset: bigint): void {
    const entry = this.#owned.get(topic, partition);
    if (entry && offset >= 0n && (entry.position ?? -1n) < offset) entry.position = offset;
  }

  /** Forgets every position (the assignment was lost: nothing read before counts). */
  forgetPositions(): void {
    for (const entry of this.#owned.values()) entry.position = undefined;
  }

  has(topic: string, partition: number): boolean {
    return this.#owned.has(topic, partition);
  }

  list(): TopicPartition[] {
    return this.#owned.values().map((entry) => entry.tp);
  }
}

interface OwnedEntry {
  tp: TopicPartition;
  position: bigint | undefined;
}

/**
 * The library consumer behind each GroupMetadata a client's consumers hand out, so that the
 * client's transactions find it from the metadata alone, as Kafka's
 * `sendOffsetsToTransaction(offsets, consumer.groupMetadata())` does: no `instanceof`, and the
 * loop sees no library type. Weak: metadata the loop dropped takes its entry with it.
 *
 * @example
 * const members = new GroupMembers<Rd.KafkaConsumer>("confluent");
 * groupMetadata() { return members.issue({ groupId, generationId, memberId }, this.#consumer); }
 * const consumer = members.memberOf(group, "adding offsets to a transaction");
 */
export class GroupMembers<T> {
  readonly #members = new WeakMap<GroupMetadata, T>();
  readonly #client: string;

  constructor(client: string) {
    this.#client = client;
  }

  /** The metadata, frozen, tied to `member`. */
  issue(metadata: GroupMetadata, member: T): GroupMetadata {
    const issued = Object.freeze({ groupId: metadata.groupId, generationId: metadata.generationId, memberId: metadata.memberId });
    this.#members.set(issued, member);
    return issued;
  }

  /** The member behind metadata a consumer of this client handed out; a fatal error for any other value (a copy, another client's). */
  memberOf(metadata: GroupMetadata, what: string): T {
    const member = this.#members.get(metadata);
    if (member === undefined) {
      throw new FvError("KAFKA_FATAL", `${what}: the group metadata was not handed out by a consumer of this ${this.#client} client (pass consumer.groupMetadata() itself, not a copy)`);
    }
    return member;
  }
}

/**
 * Where a transactional producer stands. A transaction is open from its begin to its commit or
 * abort, and dirty once it holds a send or offsets: the broker refuses to end an empty one, so an
 * empty transaction stays open on our side and its commit or abort has nothing to tell the broker.
 */
export class TransactionState {
  open = false;
  dirty = false;

  /** Whether a commit or an abort has something to end. */
  get endable(): boolean {
    return this.open && this.dirty;
  }

  began(): void {
    this.open = true;
    this.dirty = false;
  }

  /** A send or offsets went into the open transaction. */
  wrote(): void {
    this.dirty = true;
  }

  ended(): void {
    this.open = false;
    this.dirty = false;
  }

  /** `what` may only run with no work in a transaction. */
  mustBeIdle(what: string): void {
    if (this.dirty) throw new FvError("KAFKA_FATAL", `${what} with a transaction open`);
  }
}

/**
 * Requests still under way, each tracked until it settles: a close, a revoke or an abort waits for
 * them (e.g. a transaction's requests the library still retries after the loop gave up on one).
 */
export class InFlight {
  readonly #requests = new Set<Promise<void>>();

  get size(): number {
    return this.#requests.size;
  }

  /** Returns the request as it is, tracked until it settles. */
  track<T>(request: Promise<T>): Promise<T> {
    const settled = request.then(() => {}, () => {});
    this.#requests.add(settled);
    void settled.then(() => this.#requests.delete(settled));
    return request;
  }

  /** Resolves once every request tracked now has settled. */
  async settled(): Promise<void> {
    await Promise.allSettled([...this.#requests]);
  }
}

/** What `createMissingTopics` needs from an adapter's admin. */
export interface TopicCreator {
  partitionCounts(topics: string[]): Promise<Map<string, number | undefined>>;
  create(spec: TopicSpec): Promise<void>;
  /** The library's own TOPIC_ALREADY_EXISTS (36): another process created it between the look and the create. */
  alreadyExists(error: unknown): boolean;
  classify(error: unknown, what: string): FvError;
}

/** Creates the topics that do not exist yet, one at a time; existing ones are left alone. */
export async function createMissingTopics(specs: TopicSpec[], admin: TopicCreator): Promise<void> {
  const counts = await admin.partitionCounts(specs.map((s) => s.topic));
  for (const spec of specs) {
    if (counts.get(spec.topic) !== undefined) continue;
    try {
      await admin.create(spec);
    } catch (error) {
      if (admin.alreadyExists(error)) continue;
      throw admin.classify(error, `creating topic ${spec.topic}`);
    }
  }
}

/**
 * Every partition of the topics, from their partition counts (a topic that does not exist has
 * none), in order; `only`: just these partition numbers, where they exist.
 */
export function partitionsOf(counts: Map<string, number | undefined>, only?: number[]): TopicPartition[] {
  const out: TopicPartition[] = [];
  for (const [topic, count] of counts) {
    for (let partition = 0; partition < (count ?? 0); partition++) if (!only || only.includes(partition)) out.push({ topic, partition });
  }
  return out;
}

/** Partition numbers per topic, topics in order of first appearance (the shape Kafka's requests take). */
export function byTopic(partitions: Iterable<TopicPartition>): Map<string, number[]> {
  const out = new Map<string, number[]>();
  for (const { topic, partition } of partitions) {
    const list = out.get(topic);
    if (list) list.push(partition);
    else out.set(topic, [partition]);
  }
  return out;
}
