import type { BuildMetrics } from "../control/types.ts";
import { FvError } from "../errors.ts";
import type { TopicPartition } from "../kafka/port.ts";
import { PartitionMap, PartitionSet, partitionText } from "../kafka/topic-partition.ts";
import type { LoopCounters } from "./counters.ts";
import type { Logger } from "../logger.ts";
import { PauseDetector } from "./pause-detector.ts";
import type { Session } from "./session.ts";
import type { LoopTimings } from "./timings.ts";

/** An owned partition as /status shows it: its position and lag, and the live state it feeds. */
export type OwnedPartition = BuildMetrics["partitions"][number];

/**
 * What the loop knows of its partitions' progress (positions, end offsets, lag), and the
 * decisions made from it: a stalled consumer, a partition held too long on an unstable committed
 * offset, and a process that was frozen rather than stalled.
 *
 * End offsets live as long as the loop (a new session sees the last ones read until it reads its
 * own); the clocks start again with every session.
 */
export class Watchdog {
  readonly #timings: LoopTimings;
  readonly #groupId: string;
  readonly #counters: LoopCounters;
  readonly #log: Logger;
  /** Each partition's end (refreshed every few seconds), for lag. */
  readonly #ends = new PartitionMap<bigint>();
  #endsAt = 0;
  /** When end offsets last came back: a consumer whose requests stop answering is wedged. */
  #endsAnsweredAt = 0;
  /** When committed offsets of partitions not read yet were last asked for. */
  #startOffsetsAt = 0;
  /** The session's clocks: last record, last held warning, since when a partition is held, last release. */
  #lastRecord = 0;
  #heldWarnedAt = 0;
  #heldSince = 0;
  #releasedAt = 0;
  /** How many partitions were held at the last stall check. */
  #heldCount = 0;
  /** Tells when this process was frozen, so that the stall watchdog does not blame the consumer. */
  #pauses: PauseDetector | undefined;

  constructor(options: { timings: LoopTimings; groupId: string; counters: LoopCounters; log: Logger }) {
    this.#timings = options.timings;
    this.#groupId = options.groupId;
    this.#counters = options.counters;
    this.#log = options.log;
  }

  /** A session's clients were made: its consumer's requests count as answered from now. */
  opened(): void {
    this.#endsAnsweredAt = Date.now();
    this.#pauses = new PauseDetector(this.#timings.pauseMs);
  }

  /** The session polls from now: its clocks start. */
  start(): void {
    this.#lastRecord = Date.now();
    this.#heldWarnedAt = this.#heldSince = this.#releasedAt = this.#heldCount = 0;
    this.#pauses?.start();
  }

  stop(): void {
    this.#pauses?.stop();
  }

  /** After each poll: how long this process was frozen before it, in ms (0: it was not). */
  polled(now: number): number {
    const paused = this.#pauses?.takePause() ?? 0;
    if (paused > 0) {
      // This process was frozen or blocked (SIGSTOP, a long synchronous step): the consumer
      // had no chance meanwhile, so the watchdog's clocks start again.
      this.#lastRecord = now;
      this.#endsAnsweredAt = now;
      this.#heldSince = 0;
    }
    return paused;
  }

  /** A poll brought records. */
  recordsArrived(now: number): void {
    this.#lastRecord = now;
  }

  /** How long no records came. */
  quietMs(now: number): number {
    return now - this.#lastRecord;
  }

  /**
   * After a poll that brought nothing: a partition held for a stable offset is waiting, not
   * stalled (warned about); no records for `stallRestartMs` while an owned partition has records
   * to read, or while the consumer's requests go unanswered, throws to start a fresh consumer.
   */
  checkStall(session: Session, now: number): void {
    const stallMs = this.#timings.stallRestartMs;
    const held = session.consumer.held?.() ?? [];
    if (held.length < this.#heldCount) {
      // A partition stopped being held (its offset became stable, or it was revoked with the
      // rest in a rebalance): the time it waited is not the consumer's, so the clock starts
      // again. Without this, the first empty poll after a 30 s hold restarted a consumer that
      // had just started the partition, or that was waiting in the group's next rebalance
      // (fault soak, Node, seed 102, 2026-12-07 04:06: three stall restarts).
      this.#lastRecord = Math.max(this.#lastRecord, now);
    }
    this.#heldCount = held.length;
    if (held.length && now - this.#lastRecord >= stallMs && now - this.#heldWarnedAt >= stallMs) {
      // Waiting, not stalled: a fresh consumer would wait for the same transaction.
      this.#heldWarnedAt = now;
      this.#log("warn", `${held.map(partitionText).join(", ")} wait for a stable committed offset: a transaction that commits offsets for them is still pending`);
    }
    if (now - this.#lastRecord < stallMs) return;
    // At-least-once: a batch send still waiting for its acknowledgement has not moved the positions yet.
    if (session.sending) return;
    const lagging = this.lagging(session, held);
    if (lagging || now - this.#endsAnsweredAt >= stallMs) {
      this.#counters.stallRestarts++;
      const why = lagging ? `${lagging} has records to read` : "the consumer's requests go unanswered";
      throw new FvError("KAFKA_RETRYABLE", `no records for ${Math.round((now - this.#lastRecord) / 1000)} s while ${why}: starting a fresh consumer`);
    }
  }

  /**
   * Exactly-once, between checkpoints: partitions held longer than any live transaction can hold
   * them (its timeout, then the coordinator's abort) wait for stale pending commits. Those of this
   * member's own producer id go with an abort; between checkpoints only, never with work open.
   */
  async releaseHeld(session: Session, now: number, flush: () => Promise<unknown>, written: () => Promise<TopicPartition[]>): Promise<void> {
    const releaseMs = this.#timings.heldReleaseMs;
    const held = session.consumer.held?.() ?? [];
    this.#heldSince = held.length === 0 ? 0 : this.#heldSince || now;
    if (!this.#heldSince || now - this.#heldSince < releaseMs || now - this.#releasedAt < releaseMs) return;
    // The release needs no transaction open: the work so far commits first.
    await flush();
    if (session.txs.some((tx) => tx.inTransaction)) return;
    this.#releasedAt = now;
    this.#log("warn", `${held.map(partitionText).join(", ")} waited ${Math.round((now - this.#heldSince) / 1000)} s for a stable committed offset: aborting a transaction of this member's producer that holds the group and every partition it writes, which drops its offset commits that no transaction ends and the records they go with`);
    // With the partitions this member writes: records its producer left open go with the offsets.
    // Each producer's: a stale pending commit may be of either (they take turns).
    const partitions = await written();
    for (const tx of session.txs) await tx.releasePendingOffsets(session.consumer.groupMetadata(), held[0]!, partitions);
    // The consumer reads the partitions once it sees the offsets stable: not a stall meanwhile.
    this.#lastRecord = Date.now();
  }

  /** Reads the end offsets again, at most every `endOffsetsIntervalMs` (not awaited). */
  refreshEnds(session: Session, now: number): void {
    if (now - this.#endsAt < this.#timings.endOffsetsIntervalMs) return;
    // For /status and the dashboard: lag = end offset − next offset to process.
    this.#endsAt = now;
    void session.consumer.endOffsets().then((ends) => {
      this.#endsAnsweredAt = Date.now();
      for (const e of ends) this.#ends.set(e, e.offset);
    }, () => {});
  }

  /** The session's partitions, with the live state size of stateful stages' input partitions. */
  owned(session: Session): OwnedPartition[] {
    const tasks = session.tasks;
    const restoring = tasks.active ? tasks.restoringPartitions() : undefined;
    // A partition restores one task per stateful stage: its progress is their sum.
    const progress = new Map<number, NonNullable<OwnedPartition["restore"]>>();
    for (const p of restoring?.size ? tasks.restoreProgress() : []) {
      const sum = progress.get(p.partition) ?? { read: 0, total: 0, fromStore: 0, rate: 0, etaSeconds: null };
      sum.read += p.read;
      sum.total += p.total;
      sum.fromStore += p.fromStore;
      sum.rate += p.rate;
      sum.etaSeconds = sum.rate > 0 ? Math.ceil((sum.total - sum.read) / sum.rate) : null;
      progress.set(p.partition, sum);
    }
    return session.consumer.owned().map((tp) => {
      const size = tasks.active ? tasks.sizeOf(tp.topic, tp.partition) : undefined;
      // A partition with nothing processed since it was assigned (kept through a rebalance, or
      // no new records) shows its committed offset, looked up at most every 2 s, not none.
      const position = session.positions.get(tp) ?? session.committed.get(tp) ?? this.positionOf(session, tp);
      const end = this.#ends.get(tp);
      return {
        ...tp,
        ...(position !== undefined ? { offset: Number(position) } : {}),
        // Lag only where the position is known (a partition with nothing new since the last commit has none yet).
        ...(end !== undefined && position !== undefined ? { lag: Math.max(0, Number(end - position)) } : {}),
        ...(size ? { stateKeys: size.keys, stateBytes: size.bytes } : {}),
        ...(size?.store ? { storeKeys: size.store.keys, storeBytesOnDisk: size.store.bytesOnDisk } : {}),
        ...(size?.cache ? { cacheKeys: size.cache.resident, cacheHitRate: hitRate(size.cache.hits, size.cache.misses) } : {}),
        ...(restoring?.has(tp.partition) ? { restoring: true, ...(progress.has(tp.partition) ? { restore: progress.get(tp.partition)! } : {}) } : {}),
      };
    });
  }

  /** Whether the partition never had a record (its end offset is 0). */
  isEmpty(tp: TopicPartition): boolean {
    return this.#ends.get(tp) === 0n;
  }

  /** The next offset to read of a partition: processed this session, else its committed offset (looked up, at most every 2 s). */
  positionOf(session: Session, tp: TopicPartition): bigint | undefined {
    const position = session.positions.get(tp) ?? session.startOffsets.get(tp);
    if (position === undefined && Date.now() - this.#startOffsetsAt >= this.#timings.endOffsetsIntervalMs) {
      this.#startOffsetsAt = Date.now();
      const topics = [...new Set(session.consumer.owned().map((tp) => tp.topic))];
      void session.admin.committedOffsets(this.#groupId, topics).then((offsets) => {
        for (const o of offsets) if (o.offset >= 0n) session.startOffsets.set(o, o.offset);
      }, () => {});
    }
    return position;
  }

  /** Whether a partition has nothing left to read: its next offset has reached its (read_committed) end. */
  caughtUp(session: Session, tp: TopicPartition): boolean {
    const end = this.#ends.get(tp);
    if (end === undefined) return false;
    if (end === 0n) return true;
    const position = this.positionOf(session, tp);
    return position !== undefined && position >= end;
  }

  /** Whether a partition's known position is below its known end (records are waiting there). */
  knownBehind(session: Session, tp: TopicPartition): boolean {
    const end = this.#ends.get(tp);
    const position = this.positionOf(session, tp);
    return end !== undefined && position !== undefined && position < end;
  }

  /** An owned partition ("topic:partition"), not held, whose known position is below its known end, if any. */
  lagging(session: Session, held: TopicPartition[] = []): string | undefined {
    const waiting = new PartitionSet(held);
    for (const tp of session.consumer.owned()) {
      if (waiting.has(tp)) continue;
      const end = this.#ends.get(tp);
      const position = this.positionOf(session, tp);
      if (end !== undefined && position !== undefined && position < end) return partitionText(tp);
    }
    return undefined;
  }
}

/** Hits over lookups, to 4 decimals; null before the first lookup. */
function hitRate(hits: number, misses: number): number | null {
  return hits + misses === 0 ? null : Math.round((hits / (hits + misses)) * 10_000) / 10_000;
}
