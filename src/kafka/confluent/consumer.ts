/**
 * A group member on librdkafka. `rebalance_cb` hands the consumer the revoke and the assign:
 * librdkafka waits for the `unassign()` / `assign()` calls, so the consumer lets go of revoked
 * partitions only at the loop's next poll, after its commits (the old generation still holds
 * until then), and starts new partitions from offsets it reads itself.
 */
import type * as Rd from "@confluentinc/kafka-javascript";
import { delay } from "../../async.ts";
import { FvError } from "../../errors.ts";
import type { CommitOffset, ConsumerOptions, GroupConsumer, GroupMetadata, InboundRecord, TopicPartition } from "../port.ts";
import { type GroupMembers, HEARTBEAT_INTERVAL_MS, InFlight, OwnedPartitions, partitionKey, SESSION_TIMEOUT_MS, settleRebalanceHook } from "../shared.ts";
import { latestOffsets } from "./admin.ts";
import { classify, classifyConsumer, ERR, fatalEvent } from "./errors.ts";
import { call, connect, disconnect, extras, FETCH_MAX_WAIT_MS, type Library, toInbound } from "./library.ts";

/**
 * Most time the first read of a new assignment's committed offsets may take: the partitions are
 * assigned after it, paused where it failed.
 */
const START_READ_TIMEOUT_MS = 2_000;
/** Most time a read of one held partition's committed offset may take before it is tried again. */
const HELD_READ_TIMEOUT_MS = 1_000;
/**
 * How long new partitions may wait for a committed offset the adapter can start from before the
 * session fails (retryable: the loop starts a fresh consumer). A pending transactional commit ends
 * within the transaction timeout, and the loop releases its own producer's after 30 s.
 */
const START_GIVE_UP_MS = 90_000;
/**
 * How long "never committed" for a partition this client committed itself (at-least-once) is not
 * believed, across consumers. A restarting coordinator gives that answer for moments (seed 25
 * below); past this the group lacks this client's commit (the binding reports a commit queued, not
 * done: after a static member's fencing, one was refused unseen and the partition was held for
 * good), and the partition starts at that offset, which loses nothing: the offset was committed
 * after the outputs of every record below it were acknowledged. An offset only read from the group
 * (exactly-once commits go through the transaction) keeps its partition held: another owner may
 * have committed past it since.
 */
const DISBELIEF_MS = 30_000;
/** "Never committed" answers further apart than this are not one refusal (the partition was elsewhere in between). */
const DISBELIEF_GAP_MS = 20_000;
/** How often the committed offsets of held partitions are read again. */
const HELD_RETRY_MS = 200;
/** librdkafka's logical offsets for `assign`. */
const OFFSET_BEGINNING = -2;
const OFFSET_END = -1;

/** What a transaction of this client needs of the member behind a GroupMetadata. */
export interface ConfluentMember {
  readonly consumer: Rd.KafkaConsumer;
  /** Assignments received so far (see ConfluentConsumer #assignments). */
  generation(): number;
}

/**
 * Committed offsets a client has seen, per group and partition, across its consumers (a loop
 * starts a fresh consumer for every session): read from the group, or committed by this client
 * (queued: see `commit`). Used to refuse "never committed" for a partition whose group is known
 * to have committed it (see ConfluentConsumer #start), and, when this client's own commit is the
 * one the group lacks, as the partition's start once the refusal has lasted `DISBELIEF_MS`.
 */
export class KnownOffsets {
  readonly #offsets = new Map<string, { offset: bigint; ownCommit: boolean }>();
  /** Since when (and last when) the group has answered "never committed" against what is known. */
  readonly #disbelieved = new Map<string, { since: number; last: number }>();

  get(group: string, tp: TopicPartition): { offset: bigint; ownCommit: boolean } | undefined {
    return this.#offsets.get(keyOf(group, tp));
  }

  /** An offset read from the group, or (`ownCommit`) one this client committed. */
  note(group: string, tp: TopicPartition, offset: bigint, ownCommit = false): void {
    const k = keyOf(group, tp);
    this.#disbelieved.delete(k);
    const before = this.#offsets.get(k);
    if (before === undefined || offset > before.offset) this.#offsets.set(k, { offset, ownCommit });
    else if (offset === before.offset && !ownCommit) before.ownCommit = false; // the group has it
  }

  /**
   * How long (ms) "never committed" has been answered for this partition, across consumers, this
   * answer included. Answers further apart than `DISBELIEF_GAP_MS` (the partition went elsewhere
   * meanwhile) start the count again.
   */
  disbelieve(group: string, tp: TopicPartition, now: number): number {
    const k = keyOf(group, tp);
    const seen = this.#disbelieved.get(k);
    const since = seen && now - seen.last <= DISBELIEF_GAP_MS ? seen.since : now;
    this.#disbelieved.set(k, { since, last: now });
    return now - since;
  }

  /** The partition started at its known offset: the count is over. */
  believe(group: string, tp: TopicPartition): void {
    this.#disbelieved.delete(keyOf(group, tp));
  }
}

const keyOf = (group: string, tp: TopicPartition) => `${group}\u0000${partitionKey(tp.topic, tp.partition)}`;

export class ConfluentConsumer implements GroupConsumer {
  readonly #lib: Library;
  readonly #options: ConsumerOptions;
  readonly #consumer: Rd.KafkaConsumer;
  readonly #members: GroupMembers<ConfluentMember>;
  readonly #member: ConfluentMember;
  #admin: Rd.IAdminClient | undefined;
  /**
   * The partitions owned, with the next offset to hand out of each. After a rebalance librdkafka
   * starts every partition again from its committed offset; records below this position of a
   * partition this member kept were already handed to the loop, so they are skipped.
   */
  readonly #owned = new OwnedPartitions();
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
  /** Commits in flight (queued with librdkafka): a revoke waits for them, so they are sent in the generation they belong to. */
  readonly #commits = new InFlight();
  /** Admin requests in flight; close waits for them before it frees the native handles. */
  readonly #adminCalls = new InFlight();
  readonly #brokers: string[];
  /**
   * An assignment librdkafka waits on: `assign()` is called, with an explicit start offset for
   * every partition, once the adapter has read the group's committed offsets itself (see #start).
   */
  #starting: {
    partitions: TopicPartition[];
    since: number;
    /** Partitions not started yet: assigned paused, and not handed out (see poll). */
    held: TopicPartition[];
    warned: boolean;
    /** `assign()` was called for this assignment. */
    assigned: boolean;
    /** When the held partitions' committed offsets were last read. */
    triedAt: number;
    /** That read, while under way, and its answer once it is in (taken at the next poll). */
    reading?: Promise<void>;
    answer?: { partitions: TopicPartition[]; entries: Array<Rd.TopicPartitionOffset | Error | undefined> };
  } | undefined;
  /** Committed offsets this client has seen for the group (see `KnownOffsets`). */
  readonly #known: KnownOffsets;
  #error: unknown;
  #started = false;
  #closed = false;

  constructor(lib: Library, brokers: string[], options: ConsumerOptions, known: KnownOffsets, members: GroupMembers<ConfluentMember>) {
    this.#lib = lib;
    this.#options = options;
    this.#brokers = brokers;
    this.#known = known;
    this.#members = members;
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
    const consumer = this.#consumer;
    this.#member = { consumer, generation: () => this.#assignments };
    this.#consumer.on("event.error", (error) => {
      // Transport errors are retried inside librdkafka; only fatal ones end the session. A fatal
      // one is heard here too: the batch consume can drop it (fatalEvent).
      const fatal = fatalEvent(error);
      if (fatal) this.#error ??= fatal;
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
        // Partitions still held go with the rest.
        this.#starting = undefined;
        // A lost assignment (the session expired while this process was paused): another member
        // may have owned and committed these partitions since; nothing read before counts.
        if (extras(this.#consumer).assignmentLost()) this.#owned.forgetPositions();
        const hook = { settled: false, done: Promise.resolve() };
        hook.done = settleRebalanceHook(this.#options.listener?.onRebalance?.()).then(() => {
          hook.settled = true;
        });
        this.#revokeHook = hook;
      } else if (err?.code === ERR.ASSIGN_PARTITIONS) {
        if (this.#revokePending) this.#unassign();
        this.#assignments++;
        // librdkafka waits for assign() (and heartbeats meanwhile); the next poll calls it once
        // the start offsets are known.
        const partitions = assignment.map(({ topic, partition }) => ({ topic, partition }));
        this.#starting = { partitions, since: Date.now(), held: [], warned: false, assigned: false, triedAt: 0 };
        const { assigned, revoked, owned } = this.#owned.reassign(partitions);
        if (assigned.length || revoked.length) this.#options.listener?.onAssignment?.({ assigned, revoked, owned });
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
   * generation holds) and the commits sent in this generation are queued (librdkafka holds the
   * rebalance until they are answered). False while the hook is still running: the loop must get
   * back control to commit, so poll returns at once.
   */
  async #settleRevoke(timeoutMs: number): Promise<boolean> {
    if (!this.#revokePending) return true;
    const hook = this.#revokeHook;
    if (hook && !hook.settled) {
      await Promise.race([hook.done, delay(Math.min(timeoutMs, 50))]);
      if (!hook.settled) return false;
    }
    while (this.#commits.size) await this.#commits.settled();
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

  async poll(max: number, timeoutMs: number): Promise<InboundRecord[]> {
    if (!this.#started) throw new FvError("KAFKA_FATAL", "poll before start");
    if (this.#error) throw classifyConsumer(this.#error, "fetching", this.#options.groupInstanceId);
    if (this.#closed) return [];
    // Nothing is read while a revoke waits for the loop: librdkafka would move its positions on.
    if (!(await this.#settleRevoke(timeoutMs))) return [];
    if (this.#starting) await this.#start();
    if (this.#revokePending) return [];
    this.#consumer.setDefaultConsumeTimeout(timeoutMs);
    let messages: Rd.Message[];
    try {
      messages = await call<Rd.Message[]>((cb) => this.#consumer.consume(max, cb));
    } catch (error) {
      if ((error as Rd.LibrdKafkaError)?.code === ERR.TIMED_OUT) return [];
      throw classifyConsumer(error, "fetching", this.#options.groupInstanceId);
    }
    if (this.#error) throw classifyConsumer(this.#error, "fetching", this.#options.groupInstanceId);
    const out: InboundRecord[] = [];
    // A held partition is paused, but may have fetched in the moment before: not handed out (it is
    // sought to its start before it is resumed).
    const held = this.#starting?.held;
    for (const message of messages) {
      if (held?.length && held.some((tp) => tp.topic === message.topic && tp.partition === message.partition)) continue;
      if (this.#owned.accept(message.topic, message.partition, BigInt(message.offset))) out.push(toInbound(message));
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
   *   - a failed read holds every new partition, and is tried again at a later poll;
   *   - "no committed offset" for a partition this client has seen one for is not believed
   *     (held, with a warning), so a group's progress is never thrown away;
   *   - only a partition the group never committed starts at `offsetReset`.
   * `assign()` is called at once, the held partitions paused in it: until it is, librdkafka cannot
   * take this member into the group's next rebalance, and every other member, its partitions
   * revoked, waits in that rebalance with nothing to read (fault soak, Node, seed 102: a stall
   * restart). A held partition is sought to its offset and resumed once the offset is stable.
   */
  async #start(): Promise<void> {
    const pending = this.#starting!;
    if (pending.partitions.length === 0) {
      this.#consumer.assign([]);
      this.#starting = undefined;
      return;
    }
    let reading: TopicPartition[];
    let entries: Array<Rd.TopicPartitionOffset | Error | undefined>;
    if (!pending.assigned) {
      reading = pending.partitions;
      entries = await this.#readCommitted(reading, false);
    } else {
      // The held partitions' offsets are read off the poll's path (a read of an unstable one
      // takes its whole timeout), so the partitions already started are read meanwhile.
      const answer = pending.answer;
      if (!answer) {
        if (!pending.reading && Date.now() - pending.triedAt >= HELD_RETRY_MS) {
          const asked = [...pending.held];
          pending.triedAt = Date.now();
          // Tracked: close waits for it before it frees the native handle.
          pending.reading = this.#adminCalls.track(this.#readCommitted(asked, true)).then((got) => {
            pending.reading = undefined;
            pending.answer = { partitions: asked, entries: got };
          });
        }
        return;
      }
      pending.answer = undefined;
      reading = answer.partitions;
      entries = answer.entries;
    }
    const group = this.#options.groupId;
    const giveUp = (why: string) => {
      if (Date.now() - pending.since < START_GIVE_UP_MS) return;
      throw new FvError("KAFKA_RETRYABLE", `new partitions waited ${Math.round((Date.now() - pending.since) / 1000)} s for a committed offset to start from: ${why}`);
    };
    if (this.#starting !== pending || this.#closed) return; // a newer assignment (or a revoke) replaced this one
    const starts: Rd.TopicPartitionOffset[] = [];
    const held: TopicPartition[] = [];
    const reasons: string[] = [];
    let disbelieved = false;
    for (const [i, tp] of reading.entries()) {
      const entry = entries[i];
      const known = this.#known.get(group, tp);
      if (entry instanceof Error || entry === undefined) {
        // e.g. UNSTABLE_OFFSET_COMMIT after librdkafka's own retries: a transaction is pending.
        held.push(tp);
        reasons.push(`${tp.topic}:${tp.partition} ${entry?.message ?? "no answer"}`);
      } else if (typeof entry.offset === "number" && entry.offset >= 0) {
        starts.push({ topic: tp.topic, partition: tp.partition, offset: entry.offset });
        this.#known.note(group, tp, BigInt(entry.offset));
      } else if (known !== undefined && (!known.ownCommit || this.#known.disbelieve(group, tp, performance.now()) < DISBELIEF_MS)) {
        held.push(tp);
        disbelieved = true;
        reasons.push(`${tp.topic}:${tp.partition} read as never committed, but ${known.offset} was committed`);
      } else if (known !== undefined) {
        this.#known.believe(group, tp);
        this.#options.log?.("warn", `${tp.topic}:${tp.partition}: the group has answered "never committed" for ${Math.round(DISBELIEF_MS / 1000)} s, but this client committed ${known.offset}: starting there`);
        starts.push({ topic: tp.topic, partition: tp.partition, offset: Number(known.offset) });
      } else {
        starts.push({ topic: tp.topic, partition: tp.partition, offset: this.#options.offsetReset === "latest" ? OFFSET_END : OFFSET_BEGINNING });
      }
    }
    if (!pending.assigned) {
      // Every partition now, the held ones paused at a placeholder: their records are not handed
      // out (see poll) until they are sought to their start. Paused before the assign (the pause
      // reaches the partition ahead of its fetch start), and the placeholder is an absolute
      // offset: a logical one sends an offset lookup, and librdkafka retries an outdated lookup
      // with its old target after a seek (`rd_kafka_toppar_offset_retry`), which would move the
      // partition from its start to the log end. Paused again after the assign, for a partition
      // librdkafka had no handle of before it.
      pending.assigned = true;
      if (held.length) this.#consumer.pause(held);
      const placeholder = (tp: TopicPartition) => ({ ...tp, offset: Number(this.#known.get(group, tp)?.offset ?? 0n) });
      this.#consumer.assign([...starts, ...held.map(({ topic, partition }) => placeholder({ topic, partition }))]);
      if (held.length) this.#consumer.pause(held);
      // A partition paused while held in an earlier assignment is not left paused in this one.
      if (starts.length) this.#consumer.resume(starts.map(({ topic, partition }) => ({ topic, partition })));
    } else {
      for (const start of starts) {
        // Sought before it is resumed: librdkafka drops what it fetched for the partition before.
        const sought = await call((cb) => this.#consumer.seek(start, START_READ_TIMEOUT_MS, cb)).then(() => true, (error: unknown) => {
          reasons.push(`${start.topic}:${start.partition} seeking to ${start.offset} failed: ${(error as Error)?.message ?? error}`);
          return false;
        });
        if (this.#starting !== pending || this.#closed) return;
        if (sought) this.#consumer.resume([{ topic: start.topic, partition: start.partition }]);
        else held.push({ topic: start.topic, partition: start.partition });
      }
    }
    pending.held = held;
    if (held.length === 0) {
      this.#starting = undefined;
      return;
    }
    if (!pending.warned && disbelieved) {
      pending.warned = true;
      this.#options.log?.("warn", `holding new partitions: ${reasons.join("; ")}`);
    }
    giveUp(reasons.join("; "));
  }

  /**
   * The committed offsets of `partitions`, an Error in place of each that could not be read. A
   * read for several partitions fails whole when one of them is held (librdkafka retries
   * UNSTABLE_OFFSET_COMMIT until the timeout), so once assigned each partition is read by itself,
   * with a short timeout, one after another: the stable ones start, and only the held one waits.
   */
  async #readCommitted(partitions: TopicPartition[], each: boolean): Promise<Array<Rd.TopicPartitionOffset | Error | undefined>> {
    const read = (tps: TopicPartition[], timeoutMs: number) =>
      call<Array<Rd.TopicPartitionOffset | Error>>((cb) => this.#consumer.committed(tps, timeoutMs, cb)).then(
        (answer) => tps.map((_, i) => answer[i]),
        (error: unknown) => tps.map(() => (error instanceof Error ? error : new Error(String(error)))),
      );
    if (!each) return read(partitions, START_READ_TIMEOUT_MS);
    // One after another: each read holds a thread of libuv's pool (4) for up to its timeout, and
    // the consumer's own calls (consume, commits, seeks) need that pool too.
    const entries: Array<Rd.TopicPartitionOffset | Error | undefined> = [];
    for (const tp of partitions) entries.push(...(await read([tp], HELD_READ_TIMEOUT_MS)));
    return entries;
  }

  held(): TopicPartition[] {
    return this.#starting ? [...this.#starting.held] : [];
  }

  /**
   * An at-least-once commit. The binding's `commitCb` runs librdkafka's commitAsync on a worker
   * thread (`KafkaConsumer::Commit`): its callback says the commit was queued, not that the group
   * has it. A commit the broker refuses afterwards (a fenced or departed member) is dropped
   * unseen; that costs duplicates only (the offsets were taken after their outputs were
   * acknowledged, and a later commit or the next owner's start covers them), but the offsets
   * noted as known here may be ones the group never got: hence the limit on disbelieving
   * "never committed" (`DISBELIEF_MS`). librdkafka itself holds a rebalance until the commits it
   * has queued are answered.
   */
  async commit(offsets: CommitOffset[]): Promise<void> {
    if (offsets.length === 0) return;
    const list = offsets.map((o) => ({ topic: o.topic, partition: o.partition, offset: Number(o.offset) }));
    const sent = call((cb) => extras(this.#consumer).commitCb(list, cb)).then(() => {
      for (const o of offsets) this.#known.note(this.#options.groupId, o, o.offset, true);
    }, (error) => {
      throw classifyConsumer(error, "committing offsets", this.#options.groupInstanceId);
    });
    await this.#commits.track(sent);
  }

  owned(): TopicPartition[] {
    return this.#owned.list();
  }

  generation(): number {
    return this.#assignments;
  }

  /** Who this member is now; a transaction of this client finds the library consumer from it (`GroupMembers`). */
  groupMetadata(): GroupMetadata {
    return this.#members.issue({ groupId: this.#options.groupId, generationId: this.#assignments, memberId: this.#options.clientId }, this.#member);
  }

  async endOffsets(): Promise<CommitOffset[]> {
    if (this.#closed) return [];
    // An admin client of its own: one derived from the consumer's handle (createFrom) crashed the
    // process when the consumer closed while a request was in flight.
    this.#admin ??= this.#lib.AdminClient.create({ "bootstrap.servers": this.#brokers.join(","), "client.id": `${this.#options.clientId}-offsets` });
    try {
      return await this.#adminCalls.track(latestOffsets(this.#lib, this.#admin, this.#options.topics));
    } catch (error) {
      throw classify(error, "listing end offsets");
    }
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await Promise.all([this.#commits.settled(), this.#adminCalls.settled()]);
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
