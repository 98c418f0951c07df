/**
 * Kafka in memory, behind the port (src/kafka/port.ts): the loop's unit tests run on it, and the
 * port suite (adapters.node.ts, adapter `memory`) keeps it faithful to the real adapters.
 *
 * What it models, as Kafka does it:
 *   - partitions as logs with offsets; a transaction's records sit in the log from the send, and
 *     its commit or abort marker takes an offset of its own. read_committed readers stop at the
 *     last stable offset (LSO: the first record of an open transaction) and skip aborted records;
 *   - consumer groups with generations: a join, a leave or a member whose session expired starts
 *     a rebalance; every member first runs its `onRebalance` hook (awaited, in the background as
 *     Kafka's heartbeat thread does, while `poll` hands out nothing), then the group forms the next
 *     generation with partition p of every subscribed topic on the same member, and each member
 *     hears `onAssignment`. A member the group forgot rejoins with a new member id: all of its
 *     partitions are revoked and assigned anew, as the adapters do;
 *   - transactional producers with epochs: `ready()` with a transactional id in use fences the
 *     older producer and aborts its open transaction. Offsets sent into a transaction are checked
 *     against the group's current generation and member (KIP-447) and stay pending until the
 *     transaction ends; a stable committed-offset read (and a consumer with `stableOffsets`) waits
 *     for them;
 *   - injected faults: `failNext` makes the next sends, commits or polls fail with a given error,
 *     `slowNext` makes the next one slow.
 *
 * What it does not: retention and compaction (every record stays), transaction timeouts, static
 * membership (a group instance id only names the member for the assignment order), quotas, and
 * anything about brokers (there are none to lose).
 *
 * Everything the tests look at is on `MemoryKafka`: the logs (`read`), committed offsets, the
 * transactional ids in use, and a journal of what happened in order.
 *
 * @example
 * const kafka = new MemoryKafka();
 * kafka.createTopic("in", 2);
 * kafka.produce("in", [{ key: "a", value: "{}" }]);
 * const loop = new ConsumerLoop(plan, kafka.client(), log);
 */
import { FvError } from "../../src/errors.ts";
import { partitionOfKey } from "../../src/kafka/murmur2.ts";
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
  ReadPartitionOptions,
  TopicPartition,
  TopicSpec,
  TransactionalProducer,
  Written,
} from "../../src/kafka/port.ts";

/** What a fault can make fail: a send (plain or transactional), an offset commit, offsets into a transaction, a transaction's commit, a poll. */
export type FaultOperation = "send" | "commit-offsets" | "send-offsets" | "commit-transaction" | "poll";

/** What happened, in order, with the time it happened (Date.now()). */
export type JournalEntry =
  | { at: number; kind: "send"; topic: string; partition: number; offset: bigint; key: string | null; transactionalId?: string }
  | { at: number; kind: "commit-offsets"; groupId: string; offsets: CommitOffset[] }
  | { at: number; kind: "transaction"; transactionalId: string; outcome: "commit" | "abort"; offsets: CommitOffset[] }
  | { at: number; kind: "fenced"; transactionalId: string; epoch: number }
  | { at: number; kind: "join"; groupId: string; memberId: string; clientId: string }
  | { at: number; kind: "leave"; groupId: string; memberId: string; why: "closed" | "expired" }
  | { at: number; kind: "generation"; groupId: string; generation: number; assignment: Record<string, string[]> }
  | { at: number; kind: "fault"; operation: FaultOperation; message: string }
  | { at: number; kind: "slow"; operation: FaultOperation; ms: number };

export interface MemoryKafkaOptions {
  /** A rebalance drops members that have not rejoined after this long (Kafka's rebalance timeout). */
  rebalanceTimeoutMs?: number;
  /**
   * Most time a member waits for its `onRebalance` hook before it rejoins anyway (both adapters
   * bound it at 20 s, inside the rebalance timeout): a loop stuck in a batch then hears of the
   * new assignment in the middle of it.
   */
  rebalanceHookTimeoutMs?: number;
  /** How long a stable committed-offset read waits for pending transactional offsets before it fails as retryable. */
  stableWaitMs?: number;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const tpKey = (topic: string, partition: number) => `${topic}\u0000${partition}`;
const bytes = (data: Uint8Array | string | null | undefined): Uint8Array | null =>
  data === null || data === undefined ? null : typeof data === "string" ? encoder.encode(data) : data;

/** One transaction of one producer epoch: the partitions it wrote to and the offsets it commits per group. */
class Transaction {
  state: "open" | "committed" | "aborted" = "open";
  readonly logs = new Set<PartitionLog>();
  readonly offsets = new Map<string, Map<string, CommitOffset>>();
  /** Set when a request of the transaction was refused: the transaction can only abort. */
  failed: FvError | undefined;
  constructor(readonly transactionalId: string, readonly producerId: number, readonly epoch: number) {}
}

interface LogEntry {
  /** Undefined for a transaction marker (a control record: it takes an offset, nobody reads it). */
  record: InboundRecord | undefined;
  transaction: Transaction | undefined;
}

class PartitionLog {
  readonly entries: LogEntry[] = [];
  /** Open transactions that wrote here, with their first offset: the LSO is the least of them. */
  readonly #open = new Map<Transaction, bigint>();
  constructor(readonly topic: string, readonly partition: number) {}

  /** The next offset to be written (the high watermark). */
  get end(): bigint {
    return BigInt(this.entries.length);
  }

  /** The last stable offset: read_committed readers read up to it. */
  get stableEnd(): bigint {
    let lso = this.end;
    for (const first of this.#open.values()) if (first < lso) lso = first;
    return lso;
  }

  append(record: Omit<InboundRecord, "offset" | "topic" | "partition">, transaction: Transaction | undefined): bigint {
    const offset = this.end;
    this.entries.push({ record: { topic: this.topic, partition: this.partition, offset, ...record }, transaction });
    if (transaction && !this.#open.has(transaction)) this.#open.set(transaction, offset);
    return offset;
  }

  /** Writes the transaction's marker and lets read_committed readers past it. */
  mark(transaction: Transaction): void {
    this.#open.delete(transaction);
    this.entries.push({ record: undefined, transaction });
  }

  /** read_committed: records from `from` to the LSO, less aborted ones and markers; and where the read got to. */
  readCommitted(from: bigint, max = Infinity): { records: InboundRecord[]; next: bigint } {
    const records: InboundRecord[] = [];
    const stable = this.stableEnd;
    let next = from;
    while (next < stable && records.length < max) {
      const entry = this.entries[Number(next)]!;
      next++;
      if (entry.record && entry.transaction?.state !== "aborted") records.push(copyRecord(entry.record));
    }
    return { records, next };
  }
}

/** Records are handed out as copies: a reader that changes one changes nothing in the log. */
function copyRecord(r: InboundRecord): InboundRecord {
  return { ...r, key: r.key && r.key.slice(), value: r.value && r.value.slice(), headers: r.headers.map(([k, v]) => [k, v.slice()]) };
}

/** A transactional id's registration: its producer id and the current epoch (older epochs are fenced). */
interface Registration {
  producerId: number;
  epoch: number;
  open: Transaction | undefined;
}

/** A rebalance in progress: the members the next generation still waits for. */
interface Round {
  waiting: Set<MemoryConsumer>;
  timer: ReturnType<typeof setTimeout>;
}

class Group {
  generation = 0;
  readonly members = new Map<string, MemoryConsumer>();
  /** Committed offsets (next offset to read) by partition. */
  readonly committed = new Map<string, bigint>();
  /** Partitions with offsets in an open transaction, and that transaction. */
  readonly pending = new Map<string, Transaction>();
  #round: Round | undefined;
  #nextMember = 0;

  constructor(readonly id: string, readonly kafka: MemoryKafka) {}

  get rebalancing(): boolean {
    return this.#round !== undefined;
  }

  /** A member joins (first time, or again after the group forgot it): the group rebalances. */
  join(member: MemoryConsumer, clientId: string): string {
    const memberId = `${clientId}-${++this.#nextMember}`;
    this.members.set(memberId, member);
    this.kafka.note({ kind: "join", groupId: this.id, memberId, clientId });
    this.#rebalance([member]);
    return memberId;
  }

  leave(memberId: string, why: "closed" | "expired"): void {
    const member = this.members.get(memberId);
    if (!member) return;
    this.members.delete(memberId);
    this.kafka.note({ kind: "leave", groupId: this.id, memberId, why });
    if (why === "expired") member.forgotten();
    if (this.#round) {
      this.#round.waiting.delete(member);
      this.#completeIfReady();
    } else if (this.members.size > 0) {
      this.#rebalance([]);
    }
  }

  /** Starts a rebalance (or widens the one under way): each member runs its hook, then rejoins. */
  #rebalance(joining: MemoryConsumer[]): void {
    const asked = this.#round ? joining : [...this.members.values()];
    if (!this.#round) {
      const timer = setTimeout(() => this.#dropLaggards(), this.kafka.rebalanceTimeoutMs);
      this.#round = { waiting: new Set(), timer };
    }
    for (const member of asked) {
      this.#round.waiting.add(member);
      queueMicrotask(() => void member.rejoin());
    }
  }

  /** A member finished its rebalance hook and rejoined. */
  rejoined(member: MemoryConsumer): void {
    if (!this.#round?.waiting.delete(member)) return;
    this.#completeIfReady();
  }

  #dropLaggards(): void {
    const round = this.#round;
    if (!round) return;
    for (const member of [...round.waiting]) if (member.memberId) this.leave(member.memberId, "expired");
  }

  #completeIfReady(): void {
    const round = this.#round;
    if (!round || round.waiting.size > 0) return;
    clearTimeout(round.timer);
    this.#round = undefined;
    if (this.members.size === 0) return;
    this.generation++;
    const assignment = this.#assign();
    this.kafka.note({
      kind: "generation",
      groupId: this.id,
      generation: this.generation,
      assignment: Object.fromEntries([...assignment].map(([id, tps]) => [id, tps.map((tp) => `${tp.topic}:${tp.partition}`)])),
    });
    for (const [memberId, partitions] of assignment) this.members.get(memberId)!.assigned(memberId, this.generation, partitions);
  }

  /**
   * Partition p of every subscribed topic goes to the same member: p modulo the count of members
   * subscribed to the topic, members sorted by their stable name (as the adapters' assigner does).
   */
  #assign(): Map<string, TopicPartition[]> {
    const sorted = [...this.members].sort(([a, ma], [b, mb]) => (ma.name < mb.name ? -1 : ma.name > mb.name ? 1 : a < b ? -1 : 1));
    const out = new Map<string, TopicPartition[]>(sorted.map(([id]) => [id, []]));
    const topics = [...new Set(sorted.flatMap(([, m]) => m.topics))].sort();
    for (const topic of topics) {
      const subscribed = sorted.filter(([, m]) => m.topics.includes(topic));
      const count = this.kafka.partitionCount(topic) ?? 0;
      for (let p = 0; p < count; p++) out.get(subscribed[p % subscribed.length]![0])!.push({ topic, partition: p });
    }
    return out;
  }

  /** Members silent past their session timeout leave the group (checked whenever a member of it acts). */
  expireSilent(now: number): void {
    for (const [memberId, member] of [...this.members]) {
      if (this.#round?.waiting.has(member)) continue; // the rebalance timeout governs it now
      if (now - member.lastSeen > member.sessionTimeoutMs) this.leave(memberId, "expired");
    }
  }
}

/**
 * The cluster: topics, groups, transactional ids, faults and the journal. `client()` is the
 * `KafkaClient` the code under test gets.
 */
export class MemoryKafka {
  readonly #topics = new Map<string, PartitionLog[]>();
  readonly #groups = new Map<string, Group>();
  readonly #transactionalIds = new Map<string, Registration>();
  readonly #faults: Array<{ operation: FaultOperation; error: FvError; topic?: string; remaining: number }> = [];
  readonly #slow: Array<{ operation: FaultOperation; ms: number; topic?: string }> = [];
  readonly #listeners = new Set<() => void>();
  readonly #roundRobin = new Map<string, number>();
  #nextProducerId = 1000;
  readonly rebalanceTimeoutMs: number;
  readonly rebalanceHookTimeoutMs: number;
  readonly stableWaitMs: number;
  /** Everything that happened, in order. */
  readonly journal: JournalEntry[] = [];

  constructor(options: MemoryKafkaOptions = {}) {
    this.rebalanceTimeoutMs = options.rebalanceTimeoutMs ?? 30_000;
    this.rebalanceHookTimeoutMs = options.rebalanceHookTimeoutMs ?? 20_000;
    this.stableWaitMs = options.stableWaitMs ?? 60_000;
  }

  /**
   * The port, over this cluster. As the adapters do, a client's transactions take only the
   * GroupMetadata its own consumers handed out (the value itself, not a copy).
   */
  client(): KafkaClient {
    const issued = new WeakSet<GroupMetadata>();
    return {
      name: "memory",
      consumer: (options) => new MemoryConsumer(this, options, issued),
      producer: () => new MemoryProducer(this),
      transactionalProducer: ({ transactionalId }) => new MemoryTransactionalProducer(this, transactionalId, issued),
      admin: () => new MemoryAdmin(this),
    };
  }

  // --- topics and records

  /** Creates a topic; an existing one is left alone. */
  createTopic(topic: string, partitions: number): void {
    if (this.#topics.has(topic)) return;
    this.#topics.set(topic, Array.from({ length: partitions }, (_, p) => new PartitionLog(topic, p)));
    this.#topicIds.set(topic, crypto.randomUUID());
  }

  /** Each topic's id, new with every creation (as Kafka's topic UUID). */
  readonly #topicIds = new Map<string, string>();
  topicId(topic: string): string | undefined {
    return this.#topicIds.get(topic);
  }

  partitionCount(topic: string): number | undefined {
    return this.#topics.get(topic)?.length;
  }

  log(topic: string, partition: number): PartitionLog {
    const log = this.#topics.get(topic)?.[partition];
    if (!log) throw new FvError("KAFKA_FATAL", `unknown topic or partition ${topic}[${partition}]`, { context: { topic, partition } });
    return log;
  }

  /** Writes records outside any transaction (a plain producer, acks=all), as a test's input. */
  produce(topic: string, records: Array<Omit<OutboundRecord, "topic">>): void {
    this.append(records.map((r) => ({ ...r, topic })), undefined);
  }

  /** What read_committed readers see of a topic (all partitions, or one), in partition then offset order. */
  read(topic: string, partition?: number): InboundRecord[] {
    const logs = this.#topics.get(topic) ?? [];
    return logs.filter((l) => partition === undefined || l.partition === partition).flatMap((l) => l.readCommitted(0n).records);
  }

  /** The same, as [key, value] text pairs. */
  readText(topic: string, partition?: number): Array<[string | null, string | null]> {
    return this.read(topic, partition).map((r) => [r.key && decoder.decode(r.key), r.value && decoder.decode(r.value)]);
  }

  /** Records of open transactions (not readable yet), over every topic. */
  uncommittedRecords(): number {
    let n = 0;
    for (const logs of this.#topics.values()) {
      for (const log of logs) for (const e of log.entries) if (e.record && e.transaction?.state === "open") n++;
    }
    return n;
  }

  append(records: OutboundRecord[], transaction: Transaction | undefined): CommitOffset[] {
    const first = new Map<string, CommitOffset>();
    for (const r of records) {
      const logs = this.#topics.get(r.topic);
      if (!logs) throw new FvError("KAFKA_FATAL", `unknown topic ${r.topic}: create it first`, { context: { topic: r.topic } });
      const key = bytes(r.key);
      let partition = r.partition;
      if (partition === undefined) {
        if (key) partition = partitionOfKey(key, logs.length);
        else this.#roundRobin.set(r.topic, (partition = ((this.#roundRobin.get(r.topic) ?? -1) + 1) % logs.length));
      }
      const log = this.log(r.topic, partition);
      const offset = log.append({
        timestamp: BigInt(Date.now()),
        key,
        value: bytes(r.value),
        headers: (r.headers ?? []).map(([k, v]) => [k, bytes(v)!]),
      }, transaction);
      transaction?.logs.add(log);
      if (!first.has(`${r.topic}:${partition}`)) first.set(`${r.topic}:${partition}`, { topic: r.topic, partition, offset });
      this.note({ kind: "send", topic: r.topic, partition, offset, key: key && decoder.decode(key), ...(transaction ? { transactionalId: transaction.transactionalId } : {}) });
    }
    this.changed();
    return [...first.values()];
  }

  // --- groups

  group(groupId: string): Group {
    let group = this.#groups.get(groupId);
    if (!group) this.#groups.set(groupId, (group = new Group(groupId, this)));
    return group;
  }

  /** A group's committed offsets, "topic:partition" → next offset to read. Pending transactional offsets are not in it. */
  committed(groupId: string): Record<string, bigint> {
    const out: Record<string, bigint> = {};
    for (const [k, offset] of this.group(groupId).committed) out[k.replace("\u0000", ":")] = offset;
    return out;
  }

  /** The group's current generation and members' ids. */
  generationOf(groupId: string): { generation: number; members: string[] } {
    const group = this.group(groupId);
    return { generation: group.generation, members: [...group.members.keys()] };
  }

  /**
   * The group forgets members (all, or those whose id starts with `clientId`), as when a session
   * expires during a pause or a restarted broker loses the group: a forgotten member's next poll
   * rejoins it with a new member id, and its transactions' offsets of the old generation are refused.
   */
  expire(groupId: string, clientId = ""): void {
    const group = this.group(groupId);
    for (const memberId of [...group.members.keys()]) if (memberId.startsWith(clientId)) group.leave(memberId, "expired");
  }

  // --- transactions

  /** Transactional ids that called `ready()`, in order. */
  transactionalIds(): string[] {
    return [...this.#transactionalIds.keys()];
  }

  /** InitProducerId: bumps the epoch (fencing the older producer) and aborts its open transaction. */
  initTransactions(transactionalId: string): Registration {
    let registration = this.#transactionalIds.get(transactionalId);
    if (!registration) this.#transactionalIds.set(transactionalId, (registration = { producerId: this.#nextProducerId++, epoch: -1, open: undefined }));
    if (registration.open) this.endTransaction(registration.open, "abort");
    registration.epoch++;
    if (registration.epoch > 0) this.note({ kind: "fenced", transactionalId, epoch: registration.epoch - 1 });
    return registration;
  }

  registration(transactionalId: string): Registration | undefined {
    return this.#transactionalIds.get(transactionalId);
  }

  /** Writes the markers; a commit moves the group offsets the transaction holds. */
  endTransaction(transaction: Transaction, outcome: "commit" | "abort"): void {
    if (transaction.state !== "open") return;
    transaction.state = outcome === "commit" ? "committed" : "aborted";
    for (const log of transaction.logs) log.mark(transaction);
    const offsets: CommitOffset[] = [];
    for (const [groupId, byPartition] of transaction.offsets) {
      const group = this.group(groupId);
      for (const [k, o] of byPartition) {
        if (group.pending.get(k) === transaction) group.pending.delete(k);
        if (outcome === "commit") group.committed.set(k, o.offset);
        offsets.push(o);
      }
    }
    const registration = this.#transactionalIds.get(transaction.transactionalId);
    if (registration?.open === transaction) registration.open = undefined;
    this.note({ kind: "transaction", transactionalId: transaction.transactionalId, outcome, offsets });
    this.changed();
  }

  // --- faults

  /**
   * The next `times` operations of this kind fail with `error` (for a send, only those that write
   * to `topic` when given). Faults queue in the order they were added.
   */
  failNext(operation: FaultOperation, error: FvError, options: { topic?: string; times?: number } = {}): void {
    this.#faults.push({ operation, error, remaining: options.times ?? 1, ...(options.topic ? { topic: options.topic } : {}) });
  }

  /** Throws the first queued fault for this operation, if any. */
  fault(operation: FaultOperation, topics: string[] = []): void {
    const index = this.#faults.findIndex((f) => f.operation === operation && (f.topic === undefined || topics.includes(f.topic)));
    if (index < 0) return;
    const fault = this.#faults[index]!;
    if (--fault.remaining === 0) this.#faults.splice(index, 1);
    this.note({ kind: "fault", operation, message: fault.error.message });
    throw fault.error;
  }

  /** The next operation of this kind (for a send, one that writes to `topic` when given) takes `ms` longer: a slow broker. */
  slowNext(operation: FaultOperation, ms: number, options: { topic?: string } = {}): void {
    this.#slow.push({ operation, ms, ...(options.topic ? { topic: options.topic } : {}) });
  }

  /** Waits out the first queued slowdown for this operation, if any. */
  async slowdown(operation: FaultOperation, topics: string[] = []): Promise<void> {
    const index = this.#slow.findIndex((f) => f.operation === operation && (f.topic === undefined || topics.includes(f.topic)));
    if (index < 0) return;
    const [slow] = this.#slow.splice(index, 1);
    this.note({ kind: "slow", operation, ms: slow!.ms });
    await new Promise((r) => setTimeout(r, slow!.ms));
  }

  /** Faults not fired yet. */
  get pendingFaults(): number {
    return this.#faults.reduce((n, f) => n + f.remaining, 0);
  }

  // --- notifications

  note(entry: JournalEntry extends infer E ? E extends { at: number } ? Omit<E, "at"> : never : never): void {
    this.journal.push({ at: Date.now(), ...entry } as JournalEntry);
  }

  /** Something readers may wait for changed (records, markers, offsets, assignments). */
  changed(): void {
    for (const listener of [...this.#listeners]) listener();
  }

  /** Resolves on the next change, or after `ms`. */
  nextChange(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.#listeners.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.#listeners.add(done);
    });
  }
}

class MemoryConsumer implements GroupConsumer {
  readonly #kafka: MemoryKafka;
  readonly #options: ConsumerOptions;
  readonly #group: Group;
  /** Member id now; undefined before the first join and while the group has forgotten this member. */
  memberId: string | undefined;
  /** The member id and generation of the last join (what `groupMetadata` tells). */
  #joined: { memberId: string; generation: number } | undefined;
  #owned = new Map<string, TopicPartition>();
  /** Next offset to hand out, per owned partition. */
  readonly #position = new Map<string, bigint>();
  /** Newly assigned partitions waiting for their stable committed offset. */
  readonly #held = new Set<string>();
  /** From the rebalance hook until the next assignment: poll hands out nothing. */
  #rebalancing = false;
  #started = false;
  #closed = false;
  #rotation = 0;
  #firstJoin: (() => void) | undefined;
  lastSeen = Date.now();
  /** The GroupMetadata values this client's consumers handed out. */
  readonly #issued: WeakSet<GroupMetadata>;

  constructor(kafka: MemoryKafka, options: ConsumerOptions, issued: WeakSet<GroupMetadata>) {
    this.#kafka = kafka;
    this.#options = options;
    this.#issued = issued;
    this.#group = kafka.group(options.groupId);
  }

  get name(): string {
    return this.#options.groupInstanceId ?? this.#options.clientId;
  }

  get topics(): string[] {
    return this.#options.topics;
  }

  get sessionTimeoutMs(): number {
    return this.#options.sessionTimeoutMs ?? 10_000;
  }

  async start(): Promise<void> {
    if (this.#started) return;
    this.#started = true;
    const joined = new Promise<void>((resolve) => (this.#firstJoin = resolve));
    this.#touch();
    this.memberId = this.#group.join(this, this.#options.clientId);
    await joined;
  }

  /** Asked by the group at a rebalance: run the loop's hook, then rejoin. */
  async rejoin(): Promise<void> {
    this.#rebalancing = true;
    this.#kafka.changed();
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      // A failing hook does not keep the member out of the group.
      Promise.resolve(this.#options.listener?.onRebalance?.()).catch(() => {}),
      new Promise<void>((resolve) => (timer = setTimeout(resolve, this.#kafka.rebalanceHookTimeoutMs))),
    ]);
    clearTimeout(timer);
    if (this.#closed || !this.memberId) return;
    this.lastSeen = Date.now();
    this.#group.rejoined(this);
  }

  /** The group forgot this member: its next poll joins again, with a new member id. */
  forgotten(): void {
    this.memberId = undefined;
    this.#rebalancing = true;
    this.#kafka.changed();
  }

  /**
   * The next generation formed. Partitions kept from the last one keep their positions only if
   * this join follows on from it (same member id, next generation); otherwise every partition is
   * revoked and assigned anew, as the adapters do.
   */
  assigned(memberId: string, generation: number, partitions: TopicPartition[]): void {
    const next = new Map(partitions.map((tp) => [tpKey(tp.topic, tp.partition), tp]));
    const previous = this.#joined;
    const continuous = previous !== undefined && previous.memberId === memberId && generation === previous.generation + 1;
    this.#joined = { memberId, generation };
    const kept = continuous ? this.#owned : new Map<string, TopicPartition>();
    const revoked = [...this.#owned].filter(([k]) => !next.has(k) || !kept.has(k)).map(([, tp]) => tp);
    const assigned = [...next].filter(([k]) => !kept.has(k)).map(([, tp]) => tp);
    this.#owned = next;
    for (const tp of [...revoked, ...assigned]) {
      this.#position.delete(tpKey(tp.topic, tp.partition));
      this.#held.delete(tpKey(tp.topic, tp.partition));
    }
    for (const tp of assigned) {
      if (this.#options.stableOffsets) this.#held.add(tpKey(tp.topic, tp.partition));
      else this.#position.set(tpKey(tp.topic, tp.partition), this.#startOffset(tp));
    }
    this.#rebalancing = false;
    this.#firstJoin?.();
    this.#firstJoin = undefined;
    if (assigned.length || revoked.length) this.#options.listener?.onAssignment?.({ assigned, revoked, owned: [...next.values()] });
    this.#kafka.changed();
  }

  /** The committed offset, or the reset position where there is none. */
  #startOffset(tp: TopicPartition): bigint {
    const committed = this.#group.committed.get(tpKey(tp.topic, tp.partition));
    if (committed !== undefined) return committed;
    return this.#options.offsetReset === "earliest" ? 0n : this.#kafka.log(tp.topic, tp.partition).stableEnd;
  }

  #touch(): void {
    const now = Date.now();
    this.lastSeen = now;
    this.#group.expireSilent(now);
  }

  async poll(max: number, timeoutMs: number): Promise<InboundRecord[]> {
    if (!this.#started) throw new FvError("KAFKA_FATAL", "poll before start");
    if (this.#closed) return [];
    this.#touch();
    this.#kafka.fault("poll");
    let out = this.#drain(max);
    if (out.length > 0) return out;
    await this.#kafka.nextChange(timeoutMs);
    if (this.#closed) return [];
    this.#touch();
    out = this.#drain(max);
    return out;
  }

  #drain(max: number): InboundRecord[] {
    // Forgotten by the group: join again as a new member (the assignment revokes everything).
    if (!this.memberId && !this.#closed && !this.#group.rebalancing) this.memberId = this.#group.join(this, this.#options.clientId);
    if (this.#rebalancing || !this.memberId) return [];
    for (const k of [...this.#held]) {
      if (this.#group.pending.has(k)) continue;
      this.#held.delete(k);
      this.#position.set(k, this.#startOffset(this.#owned.get(k)!));
    }
    const out: InboundRecord[] = [];
    const owned = [...this.#owned];
    const start = this.#rotation++ % Math.max(owned.length, 1);
    for (let i = 0; i < owned.length && out.length < max; i++) {
      const [k, tp] = owned[(start + i) % owned.length]!;
      const position = this.#position.get(k);
      if (position === undefined) continue; // held
      const { records, next } = this.#kafka.log(tp.topic, tp.partition).readCommitted(position, max - out.length);
      this.#position.set(k, next);
      out.push(...records);
    }
    return out;
  }

  async commit(offsets: CommitOffset[]): Promise<void> {
    this.#touch();
    await this.#kafka.slowdown("commit-offsets");
    this.#kafka.fault("commit-offsets", offsets.map((o) => o.topic));
    if (offsets.length === 0) return;
    if (!this.memberId || this.#joined?.generation !== this.#group.generation || this.#joined.memberId !== this.memberId) {
      throw new FvError("KAFKA_FENCED", `committing offsets of group ${this.#options.groupId}: this member is not in generation ${this.#group.generation} (ILLEGAL_GENERATION)`);
    }
    for (const o of offsets) this.#group.committed.set(tpKey(o.topic, o.partition), o.offset);
    this.#kafka.note({ kind: "commit-offsets", groupId: this.#options.groupId, offsets: offsets.map((o) => ({ ...o })) });
    this.#kafka.changed();
  }

  owned(): TopicPartition[] {
    return [...this.#owned.values()];
  }

  generation(): number {
    return this.#joined?.generation ?? -1;
  }

  groupMetadata(): GroupMetadata {
    const metadata = Object.freeze({ groupId: this.#options.groupId, generationId: this.#joined?.generation ?? -1, memberId: this.#joined?.memberId ?? "" });
    this.#issued.add(metadata);
    return metadata;
  }

  held(): TopicPartition[] {
    return [...this.#held].map((k) => this.#owned.get(k)!);
  }

  async endOffsets(): Promise<CommitOffset[]> {
    return this.#options.topics.flatMap((topic) =>
      Array.from({ length: this.#kafka.partitionCount(topic) ?? 0 }, (_, partition) => ({ topic, partition, offset: this.#kafka.log(topic, partition).stableEnd }))
    );
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#firstJoin?.();
    if (this.memberId) this.#group.leave(this.memberId, "closed");
    this.memberId = undefined;
    this.#kafka.changed();
  }
}

class MemoryProducer implements Producer {
  readonly #kafka: MemoryKafka;
  constructor(kafka: MemoryKafka) {
    this.#kafka = kafka;
  }

  async send(records: OutboundRecord[]): Promise<Written> {
    if (records.length === 0) return [];
    this.#kafka.fault("send", records.map((r) => r.topic));
    await this.#kafka.slowdown("send", records.map((r) => r.topic));
    return this.#kafka.append(records, undefined);
  }

  async close(): Promise<void> {}
}

class MemoryTransactionalProducer implements TransactionalProducer {
  readonly #kafka: MemoryKafka;
  readonly #transactionalId: string;
  #epoch: number | undefined;
  #transaction: Transaction | undefined;
  /** The GroupMetadata values the consumers of this producer's client handed out. */
  readonly #issued: WeakSet<GroupMetadata>;

  constructor(kafka: MemoryKafka, transactionalId: string, issued: WeakSet<GroupMetadata>) {
    this.#kafka = kafka;
    this.#transactionalId = transactionalId;
    this.#issued = issued;
  }

  /** Refuses group metadata that no consumer of this client handed out, as the adapters do. */
  #checkIssued(group: GroupMetadata, what: string): void {
    if (!this.#issued.has(group)) {
      throw new FvError("KAFKA_FATAL", `${what}: the group metadata was not handed out by a consumer of this memory client (pass consumer.groupMetadata() itself, not a copy)`);
    }
  }

  get inTransaction(): boolean {
    return this.#transaction !== undefined;
  }

  async ready(): Promise<void> {
    if (this.#epoch === undefined) this.#epoch = this.#kafka.initTransactions(this.#transactionalId).epoch;
  }

  /** The registration, unless a newer producer with the same transactional id fenced this one. */
  #registration(what: string): Registration {
    const registration = this.#kafka.registration(this.#transactionalId);
    if (this.#epoch === undefined || !registration) throw new FvError("KAFKA_FATAL", `${what}: ready() was not called`);
    if (registration.epoch !== this.#epoch) {
      throw new FvError("KAFKA_FENCED", `${what}: producer ${this.#transactionalId} epoch ${this.#epoch} was fenced by epoch ${registration.epoch} (PRODUCER_FENCED)`);
    }
    return registration;
  }

  #begin(registration: Registration): Transaction {
    if (!this.#transaction) {
      this.#transaction = new Transaction(this.#transactionalId, registration.producerId, registration.epoch);
      registration.open = this.#transaction;
    }
    return this.#transaction;
  }

  async send(records: OutboundRecord[]): Promise<Written> {
    if (records.length === 0) return [];
    const registration = this.#registration("producing in a transaction");
    const transaction = this.#begin(registration);
    this.#kafka.fault("send", records.map((r) => r.topic));
    await this.#kafka.slowdown("send", records.map((r) => r.topic));
    this.#registration("producing in a transaction");
    return this.#kafka.append(records, transaction);
  }

  async sendOffsets(group: GroupMetadata, offsets: CommitOffset[]): Promise<void> {
    if (offsets.length === 0) return;
    this.#checkIssued(group, "adding offsets to a transaction");
    const registration = this.#registration("adding offsets to a transaction");
    const transaction = this.#begin(registration);
    this.#kafka.fault("send-offsets", offsets.map((o) => o.topic));
    const current = this.#kafka.group(group.groupId);
    // KIP-447: the offsets are on behalf of the member that read the work; the group moved on.
    if (current.generation !== group.generationId || !current.members.has(group.memberId)) {
      transaction.failed = new FvError(
        "KAFKA_FENCED",
        `adding offsets to a transaction: group ${group.groupId} is at generation ${current.generation}, not ${group.generationId} of member ${group.memberId} (ILLEGAL_GENERATION)`,
      );
      throw transaction.failed;
    }
    let byPartition = transaction.offsets.get(group.groupId);
    if (!byPartition) transaction.offsets.set(group.groupId, (byPartition = new Map()));
    for (const o of offsets) {
      const k = tpKey(o.topic, o.partition);
      byPartition.set(k, { ...o });
      current.pending.set(k, transaction);
    }
  }

  async commit(): Promise<void> {
    const transaction = this.#transaction;
    if (!transaction) return;
    this.#registration("committing a transaction");
    this.#kafka.fault("commit-transaction");
    await this.#kafka.slowdown("commit-transaction");
    this.#registration("committing a transaction");
    if (transaction.failed) throw transaction.failed;
    this.#transaction = undefined;
    this.#kafka.endTransaction(transaction, "commit");
  }

  async abort(): Promise<void> {
    const transaction = this.#transaction;
    if (!transaction) return;
    this.#transaction = undefined;
    // A fenced producer's transaction was aborted by the producer that fenced it.
    this.#registration("aborting a transaction");
    this.#kafka.endTransaction(transaction, "abort");
  }

  /** Drops pending offset commits of this producer that no open transaction ends. */
  async releasePendingOffsets(metadata: GroupMetadata, held: TopicPartition, written: readonly TopicPartition[] = []): Promise<void> {
    if (this.#transaction) throw new FvError("KAFKA_FATAL", "releasePendingOffsets with a transaction open");
    this.#checkIssued(metadata, "releasing pending offset commits");
    const registration = this.#registration("releasing pending offset commits");
    // An aborted transaction that holds the written partitions: an abort marker in each.
    if (written.length) {
      const aborted = new Transaction(this.#transactionalId, registration.producerId, registration.epoch);
      for (const tp of written) aborted.logs.add(this.#kafka.log(tp.topic, tp.partition));
      this.#kafka.endTransaction(aborted, "abort");
    }
    const group = this.#kafka.group(metadata.groupId);
    const k = tpKey(held.topic, held.partition);
    const pending = group.pending.get(k);
    if (pending && pending.producerId === registration.producerId && pending.state !== "open") group.pending.delete(k);
    this.#kafka.changed();
  }

  async close(): Promise<void> {
    await this.abort().catch(() => {});
  }
}

class MemoryAdmin implements Admin {
  readonly #kafka: MemoryKafka;
  constructor(kafka: MemoryKafka) {
    this.#kafka = kafka;
  }

  async partitionCounts(topics: string[]): Promise<Map<string, number | undefined>> {
    return new Map(topics.map((t) => [t, this.#kafka.partitionCount(t)]));
  }

  async createTopics(specs: TopicSpec[]): Promise<void> {
    for (const spec of specs) this.#kafka.createTopic(spec.topic, spec.partitions);
  }

  async readPartition(topic: string, partition: number, options: ReadPartitionOptions = {}): Promise<InboundRecord[]> {
    const log = this.#kafka.log(topic, partition);
    const start = options.from ?? 0n;
    const end = log.stableEnd;
    const read = log.readCommitted(start);
    options.onProgress?.({ position: read.next, start, end, logEnd: start > end ? log.end : end, topicId: this.#kafka.topicId(topic) });
    return read.records;
  }

  async committedOffsets(groupId: string, topics: string[], options: { stable?: boolean; partitions?: number[] } = {}): Promise<CommitOffset[]> {
    const group = this.#kafka.group(groupId);
    const wanted = topics.flatMap((topic) =>
      Array.from({ length: this.#kafka.partitionCount(topic) ?? 0 }, (_, partition) => ({ topic, partition }))
        .filter((tp) => !options.partitions || options.partitions.includes(tp.partition))
    );
    if (options.stable) {
      // KIP-447 require_stable: the broker answers UNSTABLE_OFFSET_COMMIT while a transaction holds them.
      const until = Date.now() + this.#kafka.stableWaitMs;
      while (wanted.some((tp) => group.pending.has(tpKey(tp.topic, tp.partition)))) {
        if (Date.now() >= until) throw new FvError("KAFKA_RETRYABLE", `committed offsets of group ${groupId} stayed unstable for ${this.#kafka.stableWaitMs} ms (UNSTABLE_OFFSET_COMMIT)`);
        await this.#kafka.nextChange(50);
      }
    }
    return wanted.map((tp) => ({ ...tp, offset: group.committed.get(tpKey(tp.topic, tp.partition)) ?? -1n }));
  }

  async close(): Promise<void> {}
}

/** The port's methods that talk to Kafka (asynchronous): a crashed process calls none of them any more. */
const KAFKA_CALLS = new Set([
  "start", "poll", "commit", "endOffsets", "close", "send", "sendOffsets", "abort", "ready", "releasePendingOffsets",
  "partitionCounts", "createTopics", "readPartition", "committedOffsets", "rejoin",
]);

/**
 * A client whose process can be killed at a chosen point, as kill -9 does it: from then on none of
 * its calls reaches Kafka or returns (they hang), so nothing it had not finished happens, and its
 * group membership stays until `MemoryKafka.expire`. `release()` ends the hung calls with an error
 * so a test can stop the dead loop.
 *
 * @example
 * const victim = crashable(kafka.client());
 * victim.crashAfter("commit"); // right after its next transaction commits
 */
export function crashable(inner: KafkaClient) {
  let crashed = false;
  let released = false;
  let after: string | undefined;
  const hung: Array<(error: Error) => void> = [];
  const hang = () => new Promise<never>((_, reject) => hung.push(reject));
  const wrap = <T extends object>(target: T, kind: "consumer" | "producer" | "tx" | "admin"): T =>
    new Proxy(target, {
      get(t, property) {
        const value = Reflect.get(t, property, t);
        if (typeof value !== "function") return value;
        if (!KAFKA_CALLS.has(String(property))) return value.bind(t);
        return async (...args: unknown[]) => {
          if (released) throw new FvError("KAFKA_FENCED", "the process was killed");
          if (crashed) return hang();
          const result = await value.apply(t, args);
          // Killed right after this call reached Kafka: its caller never hears back.
          if (kind === "tx" && property === after) crashed = true;
          if (crashed) return hang();
          return result;
        };
      },
    });
  const client: KafkaClient = {
    name: inner.name,
    consumer: (options) => wrap(inner.consumer(options), "consumer"),
    producer: (options) => wrap(inner.producer(options), "producer"),
    transactionalProducer: (options) => wrap(inner.transactionalProducer(options), "tx"),
    admin: (options) => wrap(inner.admin(options), "admin"),
  };
  return {
    client,
    get crashed() {
      return crashed;
    },
    /** Kills the process right after its transactional producer's next call of this method returns from Kafka. */
    crashAfter(method: "commit" | "send" | "sendOffsets") {
      after = method;
    },
    /** Ends the hung calls, and fails every later one (a fenced error), so the dead loop can be stopped at the end of a test. */
    release() {
      released = true;
      for (const reject of hung.splice(0)) reject(new FvError("KAFKA_FENCED", "the process was killed"));
    },
  };
}
