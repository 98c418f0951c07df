import { compileTopology, type CompiledStage } from "../control/topology.ts";
import { FvError, recoveryOf } from "../errors.ts";
import type {
  Admin,
  CommitOffset,
  GroupConsumer,
  GroupMetadata,
  InboundRecord,
  KafkaClient,
  OutboundRecord,
  Producer,
  TopicPartition,
  TransactionalProducer,
} from "../kafka/port.ts";
import type { ComputeStep } from "../compute/index.ts";
import type { Row } from "../expr/index.ts";
import { MetricsRecorder } from "../metrics/index.ts";
import { Checkpointer, type CheckpointStep } from "../state/checkpointer.ts";
import { closeComputeSteps, startComputeSteps } from "./compute-runtime.ts";
import { OperatorTasks } from "./operator-tasks.ts";
import { PauseDetector } from "./pause-detector.ts";
import { stateTopicOf } from "./plan.ts";
import { addCounters, emptyCounters, type LoopCounters } from "./counters.ts";
import type { Logger } from "./logger.ts";
import type { LoopPlan } from "./plan.ts";
import { decodeRow } from "./record-codec.ts";
import { outputKeyColumns, rowKeyText } from "../control/keying.ts";
import { eventTimeOf } from "../ops/index.ts";

/** Lifecycle of a loop; every change is checked against `transitions`. */
export type LoopState = "CREATED" | "STARTING" | "RUNNING" | "STOPPING" | "STOPPED" | "FAILED";
const transitions: Record<LoopState, LoopState[]> = {
  CREATED: ["STARTING", "STOPPED"],
  STARTING: ["RUNNING", "STOPPING", "FAILED"],
  RUNNING: ["STOPPING", "FAILED"],
  STOPPING: ["STOPPED", "FAILED"],
  STOPPED: [],
  FAILED: [],
};

/** Where records of one input topic go: each stage that reads it. */
interface Route {
  stage: CompiledStage;
  /** Which of the stage's inputs this topic is (0 = left, 1 = right for a join). */
  inputIndex: number;
  outputTopic: string;
  deadLetterTopic: string | undefined;
  stageLabel: string;
  /** Upstream side of a repartition hop: rows go, re-keyed, to this topic instead of the operator. */
  toHop?: { topic: string; partitions: number; keyColumns: readonly string[] };
  /** Downstream side: rows come from the stage's repartition topic (the inline steps before the operator already ran). */
  fromHop?: boolean;
  /** The operator's key columns for what it emits (output records are keyed by them). */
  outputKey: readonly string[];
}

/** Header of a repartition record: which stage input (0 = left, 1 = right) the row came from. */
const HOP_INPUT_HEADER = "fv.input";
/** Headers of a repartition record: the upstream partition and offset it came from (replays change no state twice). */
const HOP_SOURCE_HEADER = "fv.source";
const HOP_OFFSET_HEADER = "fv.offset";
/** Header of a watermark record in a repartition topic; its value is `{ source, watermark, idle }`. */
const HOP_WATERMARK_HEADER = "fv.watermark";
/** A changed upstream watermark is announced at most this often, an unchanged one this often. */
const WATERMARK_CHANGED_MS = 100;
const WATERMARK_REPEAT_MS = 2000;

/** Retries of a send that failed with a retryable error (at-least-once), and the pause between them. */
const SEND_RETRIES = 10;
const SEND_RETRY_PAUSE_MS = 500;
/**
 * Rejoins after recoverable failures (fenced, broker unreachable, aborted transaction) before the
 * loop gives up: with the backoff below (0.2 s doubling to 5 s) that is about two minutes.
 */
const MAX_CONSECUTIVE_RESTARTS = 30;
/** How often end offsets are read for the lag shown on /status: cheap, and fresh enough to watch. */
const END_OFFSETS_INTERVAL_MS = 2000;
const RESTART_BACKOFF_MS = { first: 200, max: 5000 };
/** Most time one client of a session may take to close (it leaves the group, flushes, aborts). */
const CLOSE_TIMEOUT_MS = 15_000;
/**
 * Stall watchdog: no records for this long while an owned partition has records to read (its
 * position is below its end offset) starts a new session with a fresh consumer. The pure-JS
 * client was seen to stop delivering some partitions' records (docs/ARCHITECTURE.md, known issues).
 */
const STALL_RESTART_MS = 15_000;
/**
 * Exactly-once: a partition waiting this long for a stable committed offset waits for a commit no
 * live transaction holds (a transaction ends within its timeout, 15 s, plus the coordinator's
 * abort sweep, 10 s): the member releases its own producer's pending commits.
 */
const HELD_RELEASE_MS = 30_000;
/**
 * With no records coming, stateful tasks still advance this often: partitions turn idle on the
 * wall clock, and the windows their watermark then closes must fire without waiting for a record.
 */
const IDLE_ADVANCE_MS = 500;
const DEBUG_LOOP = typeof process !== "undefined" && process.env?.FV_DEBUG_LOOP === "1";

const tpKey = (topic: string, partition: number) => `${topic}\u0000${partition}`;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The clients of one session: a join of the group until stop or a recoverable failure. */
interface Session {
  consumer: GroupConsumer;
  producer: Producer | undefined;
  tx: TransactionalProducer | undefined;
  /** Stateful operators, restored per partition from the state topic; new each session. */
  tasks: OperatorTasks;
  admin: Admin;
}

/**
 * One partition-owning consumer: consume → transform → emit → commit, on its own.
 *
 * At-least-once (default): offsets are committed only for records whose outputs Kafka has
 * acknowledged, every `checkpointIntervalMs`, when a rebalance starts, and before letting go.
 *
 * Exactly-once: every checkpoint interval is one transaction holding the outputs, the dead
 * letters and the consumer offsets (with the group's generation). A rebalance ends the open
 * transaction at the next batch boundary. Any failure of a transaction aborts it and starts a
 * new session from the last committed offsets (see docs/exactly-once.md).
 */
export class ConsumerLoop {
  readonly #plan: LoopPlan;
  readonly #client: KafkaClient;
  readonly #log: Logger;
  readonly #routes = new Map<string, Route[]>();
  readonly #checkpointer: Checkpointer;
  /** Whether any stage goes through a repartition hop (then watermarks are announced). */
  readonly #hasHops: boolean;
  readonly #stages: readonly CompiledStage[];
  /** Started compute steps by stage index; they live as long as the loop, across sessions. */
  #compute = new Map<number, ComputeStep>();
  readonly counters: LoopCounters = emptyCounters();
  /** Events for /metrics (latencies, rebalances, checkpoints); snapshots cross Worker boundaries. */
  readonly metrics = new MetricsRecorder();
  /** Exactly-once: counters of the open transaction, added to `counters` when it commits. */
  #uncommitted: LoopCounters = emptyCounters();
  #state: LoopState = "CREATED";
  #session: Session | undefined;
  /** Next offset to commit per partition, for records already acknowledged downstream. */
  readonly #pending = new Map<string, CommitOffset>();
  /** Upstream partitions of repartition hops: max event time sent into the hop, and what was announced. */
  readonly #upstream = new Map<string, { max?: number; seenAt?: number; ownedSince: number; sent?: { watermark?: number; idle: boolean; at: number } }>();
  /** Last committed offset per owned partition: a commit never moves an offset back. */
  readonly #committed = new Map<string, bigint>();
  /** Next offset to process, and the partition's end (refreshed every few seconds), for lag. */
  readonly #positions = new Map<string, bigint>();
  readonly #ends = new Map<string, bigint>();
  #endsAt = 0;
  /** When end offsets last came back: a consumer whose requests stop answering is wedged. */
  #endsAnsweredAt = 0;
  #commitChain: Promise<void> = Promise.resolve();
  #stopRequested = false;
  /** Exactly-once: a rebalance started, so end the transaction at the next batch boundary. */
  #checkpointNow = false;
  /** Exactly-once: partitions with records in the open transaction. */
  readonly #txPartitions = new Set<string>();
  /** Exactly-once: who this member was in the group when the open transaction's first batch was read. */
  #txGroup: GroupMetadata | undefined;
  /** Rebalance hooks waiting for the next checkpoint: the adapter rejoins once they resolve. */
  #rebalanceWaiters: Array<() => void> = [];
  /** Exactly-once: a partition with work in the open transaction was revoked before it committed. */
  #revokedMidTransaction = false;
  /**
   * Partitions revoked while the batch in hand was being processed (a rebalance can land during
   * any await of a batch: a state restore, a compute step, the send). Their remaining records are
   * not processed and their offsets never become pending: the new owner, or this member when it
   * gets them back, reads them again from the last checkpoint.
   */
  #revokedDuringBatch: Set<string> | undefined;
  #error: FvError | undefined;
  #backgroundError: FvError | undefined;
  /** Batches processed by the current session (a failed session that made progress resets the restart count). */
  #sessionBatches = 0;

  constructor(plan: LoopPlan, client: KafkaClient, log: Logger) {
    this.#plan = plan;
    this.#client = client;
    this.#log = (level, message, context) => log(level, message, { consumer: plan.consumerIndex, ...context });
    this.#checkpointer = new Checkpointer({
      deadlineMs: plan.settings.checkpointDeadlineMs,
      maxConsecutiveFailures: plan.settings.checkpointMaxFailures,
    });
    const compiled = compileTopology(plan.topology);
    this.#stages = compiled.stages;
    this.#hasHops = Object.keys(plan.hops ?? {}).length > 0;
    const addRoute = (topic: string, route: Route) => this.#routes.set(topic, [...(this.#routes.get(topic) ?? []), route]);
    for (const stage of compiled.stages) {
      const output = plan.bindings[stage.def.output]!;
      const hop = plan.hops?.[stage.index];
      const stageLabel = `stage ${stage.index + 1} (${stage.def.inputs.join(", ")} → ${stage.def.output})`;
      const outputKey = stage.operator ? outputKeyOf(stage) : [];
      for (const [inputIndex, input] of stage.def.inputs.entries()) {
        const binding = plan.bindings[input]!;
        addRoute(binding.topic, {
          stage,
          inputIndex,
          outputTopic: output.topic,
          deadLetterTopic: binding.policy.deadLetter,
          stageLabel,
          outputKey,
          ...(hop ? { toHop: { topic: hop.topic, partitions: hop.partitions, keyColumns: hop.keyColumns[inputIndex]! } } : {}),
        });
      }
      if (hop) {
        addRoute(hop.topic, {
          stage,
          inputIndex: 0,
          outputTopic: output.topic,
          deadLetterTopic: plan.bindings[stage.def.inputs[0]!]!.policy.deadLetter,
          stageLabel,
          outputKey,
          fromHop: true,
        });
      }
    }
  }

  get state(): LoopState {
    return this.#state;
  }

  get error(): FvError | undefined {
    return this.#error;
  }

  get #exactlyOnce(): boolean {
    return this.#plan.settings.exactlyOnce;
  }

  /** Partitions this loop owns now, with the live state size of stateful stages' input partitions. */
  owned(): Array<TopicPartition & { offset?: number; lag?: number; stateKeys?: number; stateBytes?: number; restoring?: boolean }> {
    const session = this.#session;
    if (!session) return [];
    const restoring = session.tasks.active ? session.tasks.restoringPartitions() : undefined;
    return session.consumer.owned().map((tp) => {
      const size = session.tasks.active ? session.tasks.sizeOf(tp.topic, tp.partition) : undefined;
      const k = tpKey(tp.topic, tp.partition);
      // A partition with nothing processed since it was assigned (kept through a rebalance, or
      // no new records) shows its committed offset, looked up at most every 2 s, not none.
      const position = this.#positions.get(k) ?? this.#committed.get(k) ?? this.#positionOf(session, k);
      const end = this.#ends.get(k);
      return {
        ...tp,
        ...(position !== undefined ? { offset: Number(position) } : {}),
        // Lag only where the position is known (a partition with nothing new since the last commit has none yet).
        ...(end !== undefined && position !== undefined ? { lag: Math.max(0, Number(end - position)) } : {}),
        ...(size ? { stateKeys: size.keys, stateBytes: size.bytes } : {}),
        ...(restoring?.has(tp.partition) ? { restoring: true } : {}),
      };
    });
  }

  #to(next: LoopState): void {
    if (!transitions[this.#state].includes(next)) {
      throw new FvError("KAFKA_FATAL", `consumer loop cannot go from ${this.#state} to ${next}`);
    }
    this.#state = next;
  }

  /** Asks the loop to finish its in-flight batch, commit and leave. Idempotent. */
  stop(): void {
    this.#stopRequested = true;
  }

  /** Runs until stopped, idle for `idleTimeoutMs`, or failed. Resolves with the final state. */
  async run(): Promise<LoopState> {
    if (this.#stopRequested) {
      this.#to("STOPPED");
      return this.#state;
    }
    this.#to("STARTING");
    try {
      this.#compute = await startComputeSteps(this.#stages, this.#plan.compute, this.#log);
    } catch (error) {
      this.#error = asFvError(error);
      this.#log("error", `compute steps did not start: ${this.#error.message}`, { code: this.#error.code });
      this.#state = "FAILED";
      return this.#state;
    }
    try {
      return await this.#runSessions();
    } finally {
      await closeComputeSteps(this.#compute);
    }
  }

  async #runSessions(): Promise<LoopState> {
    let restarts = 0;
    while (true) {
      try {
        await this.#runSession();
        break;
      } catch (error) {
        const failure = asFvError(error);
        const recovery = recoveryOf(failure);
        // Consecutive: a session that processed records before it failed starts the count again.
        if (this.#sessionBatches > 0) restarts = 0;
        // Stopping, and the last checkpoint was refused because the group moved on (a scale-in
        // during a rebalance): its transaction is aborted and the partitions' new owners read that
        // work again from the last commit. Nothing is lost, so the stop is still an ordered one.
        if (this.#stopRequested && (recovery === "fenced" || recovery === "retryable")) {
          this.#log("warn", `stopping: the last checkpoint did not go through (${failure.message}); the partitions' next owners read that work again from the last commit`, { code: failure.code });
          break;
        }
        if (recovery === "fatal" || recovery === "corrupted" || this.#stopRequested || ++restarts > MAX_CONSECUTIVE_RESTARTS) {
          this.#error = failure;
          this.#log("error", `consumer loop failed: ${failure.message}`, { code: failure.code });
          this.#state = "FAILED";
          return this.#state;
        }
        this.counters.restarts++;
        this.metrics.loopRestarted();
        const pause = Math.min(RESTART_BACKOFF_MS.first * 2 ** (restarts - 1), RESTART_BACKOFF_MS.max);
        this.#log("warn", `${recovery === "fenced" ? "fenced" : "recoverable failure"}: ${failure.message}; rejoining in ${pause} ms`, { code: failure.code });
        await sleep(pause);
        if (this.#stopRequested) break;
      }
    }
    if (this.#state === "STARTING") this.#to("RUNNING");
    this.#to("STOPPING");
    this.#to("STOPPED");
    return this.#state;
  }

  /** One join of the group: clients up, loop until stop or idle, final checkpoint, clients down. */
  async #runSession(): Promise<void> {
    const plan = this.#plan;
    const { settings } = plan;
    const clientId = `${plan.groupId}-${plan.instanceId}-${plan.consumerIndex}`;
    this.#sessionBatches = 0;
    this.#pending.clear();
    this.#committed.clear();
    this.#positions.clear();
    this.#checkpointNow = false;
    this.#backgroundError = undefined;
    this.#txPartitions.clear();
    this.#txGroup = undefined;
    this.#revokedMidTransaction = false;
    this.#uncommitted = emptyCounters();
    const admin = this.#client.admin({ clientId: `${clientId}-state` });
    const tasks = new OperatorTasks(this.#stages, admin, {
      stateTopic: stateTopicOf(plan.pipeline),
      idlePartitionMs: settings.idlePartitionMs,
      maxStateKeys: settings.stateMaxKeys,
      // Restore reads the changelog only once the input's committed offsets are stable, and
      // checks that the state it read covers them (see OperatorTasks.#load).
      committedOffsets: (topics, partition) =>
        admin.committedOffsets(plan.groupId, topics, { stable: true, partitions: [partition] }),
    }, this.counters);
    this.#upstream.clear();
    this.#startOffsets.clear();
    this.#endsAnsweredAt = Date.now();
    for (const stage of this.#stages) {
      if (!stage.operator) continue;
      const hop = plan.hops?.[stage.index];
      if (hop) {
        tasks.setStageTopics(stage, [hop.topic]);
        tasks.setUpstream(stage, hop.upstream);
      } else {
        tasks.setStageTopics(stage, stage.def.inputs.map((d) => plan.bindings[d]!.topic));
      }
    }
    /** Whether the session's poll loop runs (only then can it answer a rebalance hook). */
    let polling = false;
    /** Tells when this process was frozen, so that the stall watchdog does not blame the consumer. */
    const pauses = new PauseDetector();
    const session: Session = {
      tasks,
      admin,
      // A stable transactional id: a restarted loop with the same instance id fences its predecessor.
      tx: this.#exactlyOnce
        ? this.#client.transactionalProducer({ clientId, transactionalId: `fv-${plan.pipeline}-${settings.instanceId ?? plan.instanceId}-${plan.consumerIndex}` })
        : undefined,
      producer: this.#exactlyOnce ? undefined : this.#client.producer({ clientId }),
      consumer: this.#client.consumer({
        groupId: plan.groupId,
        clientId,
        topics: [...this.#routes.keys()],
        offsetReset: settings.offsetReset,
        maxBuffered: settings.batchSize * 4,
        sessionTimeoutMs: settings.sessionTimeoutMs,
        stableOffsets: this.#exactlyOnce,
        ...(settings.instanceId ? { groupInstanceId: `${settings.instanceId}-${plan.consumerIndex}` } : {}),
        log: (level, message) => this.#log(level, message),
        listener: {
          // A rebalance started: checkpoint at the next batch boundary (state, offsets, and under
          // exactly-once the open transaction), while this generation still holds. The adapter
          // rejoins once this resolves, so no work of the old generation stays open.
          onRebalance: () => {
            // Before the first poll (the join inside start()), there is nothing to commit yet.
            if (!polling) return;
            return new Promise<void>((resolve) => {
              this.#rebalanceWaiters.push(resolve);
              this.#checkpointNow = true;
            });
          },
          onAssignment: ({ assigned, revoked, owned }) => {
            // Revoked partitions: their in-flight work is dropped (the new owner reads it again
            // from the last commit) and nothing more is committed for them.
            for (const tp of revoked) {
              const k = tpKey(tp.topic, tp.partition);
              // Its outputs are in the open transaction but its offsets can no longer join them:
              // the transaction must abort, never commit outputs without their offsets.
              if (this.#txPartitions.has(k)) this.#revokedMidTransaction = true;
              this.#revokedDuringBatch?.add(k);
              this.#pending.delete(k);
              this.#committed.delete(k);
              this.#positions.delete(k);
              this.#startOffsets.delete(k);
              for (const u of this.#upstream.keys()) if (u.endsWith(`:${k}`)) this.#upstream.delete(u);
            }
            for (const tp of assigned) {
              this.#committed.delete(tpKey(tp.topic, tp.partition));
              this.#startOffsets.delete(tpKey(tp.topic, tp.partition)); // looked up again: it may have moved while another member owned it
            }
            // Stateful tasks of partitions that moved away are forgotten; their new owner restores them.
            tasks.release(owned, revoked);
            // Restore the state of new partitions now: the process is not ready until it is back.
            tasks.prefetch(assigned);
            this.metrics.rebalanced();
            this.#log("info", "assignment changed", { owned: owned.map((tp) => `${tp.topic}:${tp.partition}`), assigned: assigned.length, revoked: revoked.length });
          },
        },
      }),
    };
    this.#session = session;
    try {
      // Fence a predecessor with the same transactional id first, so the offsets read next are final.
      await session.tx?.ready();
      await session.consumer.start();
      polling = true;
      if (this.#state === "STARTING") this.#to("RUNNING");
      let lastCheckpoint = Date.now();
      let lastRecord = Date.now();
      let lastAdvance = Date.now();
      let heldWarnedAt = 0;
      /** Since when some partition waits for a stable committed offset, and when this member last released its own pending commits. */
      let heldSince = 0;
      let releasedAt = 0;
      pauses.start();
      while (!this.#stopRequested) {
        const records = await session.consumer.poll(settings.batchSize, settings.pollTimeoutMs);
        const now = Date.now();
        if (pauses.takePause()) {
          // This process was frozen or blocked (SIGSTOP, a long synchronous step): the consumer
          // had no chance meanwhile, so the watchdog's clocks start again.
          lastRecord = now;
          this.#endsAnsweredAt = now;
          heldSince = 0;
        }
        if (DEBUG_LOOP) this.#log("debug", `poll: ${records.length} records`);
        if (records.length > 0) {
          await this.#processBatch(session, records);
          this.#sessionBatches++;
          lastRecord = lastAdvance = now;
        } else {
          if (session.tasks.active && now - lastAdvance >= IDLE_ADVANCE_MS) {
            // No input: only the watermarks move (an empty batch fires what they close).
            lastAdvance = now;
            await this.#processBatch(session, []);
          }
          const held = session.consumer.held?.() ?? [];
          if (held.length && now - lastRecord >= STALL_RESTART_MS && now - heldWarnedAt >= STALL_RESTART_MS) {
            // Waiting, not stalled: a fresh consumer would wait for the same transaction.
            heldWarnedAt = now;
            this.#log("warn", `${held.map((tp) => `${tp.topic}:${tp.partition}`).join(", ")} wait for a stable committed offset: a transaction that commits offsets for them is still pending`);
          }
          if (now - lastRecord >= STALL_RESTART_MS && (this.#lagging(session, held) || now - this.#endsAnsweredAt >= STALL_RESTART_MS)) {
            this.counters.stallRestarts++;
            const why = this.#lagging(session, held) ? `${this.#lagging(session, held)} has records to read` : "the consumer's requests go unanswered";
            throw new FvError("KAFKA_RETRYABLE", `no records for ${Math.round((now - lastRecord) / 1000)} s while ${why}: starting a fresh consumer`);
          }
          if (settings.idleTimeoutMs > 0 && now - lastRecord >= settings.idleTimeoutMs) {
            this.#log("info", `no input for ${settings.idleTimeoutMs} ms: stopping`);
            break;
          }
        }
        // Repartition hops: tell every repartition partition how far each upstream partition got.
        if (this.#hasHops) await this.#announceWatermarks(session, now, now - lastRecord);
        if (this.#checkpointNow || now - lastCheckpoint >= settings.checkpointIntervalMs) {
          this.#checkpointNow = false;
          lastCheckpoint = now;
          const waiters = this.#rebalanceWaiters.splice(0);
          try {
            if (this.#exactlyOnce) await this.#commitTransaction(session);
            // State must be taken between batches, so a stateful pipeline waits for its checkpoint,
            // and so does a rebalance.
            else if (session.tasks.active || waiters.length) await this.#commitAtLeastOnce();
            // Not awaited: the next batch runs while the commit is in flight (commits are chained).
            else void this.#commitAtLeastOnce().catch((error) => (this.#backgroundError ??= asFvError(error)));
          } finally {
            // Committed or not (a failed one ends the session), the member may rejoin now.
            for (const resolve of waiters) resolve();
          }
        }
        if (this.#backgroundError) throw this.#backgroundError;
        if (session.tx) {
          const held = session.consumer.held?.() ?? [];
          heldSince = held.length === 0 ? 0 : heldSince || now;
          // Longer than any live transaction can hold them (its timeout, then the coordinator's
          // abort): the pending commits are stale. Those of this member's own producer id go with
          // an abort; between checkpoints only, never with work open.
          if (heldSince && now - heldSince >= HELD_RELEASE_MS && now - releasedAt >= HELD_RELEASE_MS && !session.tx.inTransaction) {
            releasedAt = now;
            this.#log("warn", `${held.map((tp) => `${tp.topic}:${tp.partition}`).join(", ")} waited ${Math.round((now - heldSince) / 1000)} s for a stable committed offset: aborting a transaction of this member's producer that holds only the group, which drops its offset commits that no transaction ends`);
            await session.tx.releasePendingOffsets(session.consumer, held[0]!);
            // The consumer reads the partitions once it sees the offsets stable: not a stall meanwhile.
            lastRecord = Date.now();
          }
        }
        if (now - this.#endsAt >= END_OFFSETS_INTERVAL_MS) {
          // For /status and the dashboard: lag = end offset − next offset to process.
          this.#endsAt = now;
          void session.consumer.endOffsets().then((ends) => {
            this.#endsAnsweredAt = Date.now();
            for (const e of ends) this.#ends.set(tpKey(e.topic, e.partition), e.offset);
          }, () => {});
        }
        if (this.#revokedMidTransaction) {
          throw new FvError("KAFKA_FENCED", "partitions were revoked while their records were in the open transaction: aborting it and rejoining");
        }
      }
      // The ordered end: the in-flight batch is done; checkpoint, then leave the group.
      if (this.#revokedMidTransaction) throw new FvError("KAFKA_FENCED", "partitions were revoked mid-transaction");
      if (this.#exactlyOnce) await this.#commitTransaction(session);
      else await this.#commitAtLeastOnce();
    } catch (error) {
      if (session.tx?.inTransaction) {
        await session.tx.abort().catch(() => {});
        this.counters.transactionsAborted++;
        this.metrics.transaction("abort");
      }
      throw error;
    } finally {
      this.#session = undefined;
      polling = false;
      pauses.stop();
      for (const resolve of this.#rebalanceWaiters.splice(0)) resolve();
      await this.#close(session);
    }
  }

  /** Transforms one batch, emits its outputs and dead letters, then marks its offsets committable. */
  /** One batch, with the partitions revoked while it runs tracked (see #revokedDuringBatch). */
  async #processBatch(session: Session, records: InboundRecord[]): Promise<void> {
    const revoked = new Set<string>();
    this.#revokedDuringBatch = revoked;
    try {
      await this.#runBatch(session, records, revoked);
    } finally {
      this.#revokedDuringBatch = undefined;
    }
  }

  async #runBatch(session: Session, records: InboundRecord[], revoked: ReadonlySet<string>): Promise<void> {
    const out: OutboundRecord[] = [];
    let emitted = 0;
    let deadLettered = 0;
    let consumed = 0;
    let dropped = 0;
    let repartitioned = 0;
    const poison: Array<{ reason: string }> = [];
    /** Rows waiting for a stage's compute step, with the record each came from. */
    let toCompute: Map<Route, Array<{ record: InboundRecord; row: Row }>> | undefined;
    const isolate = (record: InboundRecord, route: Route, error: unknown) => {
      if (recoveryOf(error) !== "poison") throw error;
      const reason = poisonReason(error);
      poison.push({ reason });
      if (this.#deadLetter(record, route, reason, (error as Error).message, out)) deadLettered++;
    };
    /** An operator's output is keyed by its key columns (read from `keyed`, the row it produced); other rows keep the input's key. */
    const emit = (record: InboundRecord, route: Route, row: Row, keyed?: Row) => {
      out.push({ topic: route.outputTopic, key: keyed ? rowKeyText(keyed, route.outputKey) : record.key, value: JSON.stringify(row), headers: record.headers });
      emitted++;
    };
    /** Time spent per stage in this batch, for the step-latency histogram. */
    const stageMs = new Map<CompiledStage, number>();
    const batchStarted = performance.now();
    // Exactly-once: the batch's partitions join the open transaction before its first await, so
    // a revocation at any point of the batch aborts the transaction (the state the batch changed
    // and the outputs it made go with it).
    if (session.tx) {
      if (this.#txPartitions.size === 0) this.#txGroup = session.consumer.groupMetadata();
      for (const record of records) this.#txPartitions.add(tpKey(record.topic, record.partition));
    }
    for (const record of records) {
      const routes = this.#routes.get(record.topic);
      if (!routes) continue;
      if (revoked.size && revoked.has(tpKey(record.topic, record.partition))) continue;
      // Rows read back from a repartition topic were counted when they were first consumed.
      if (!routes[0]!.fromHop) consumed++;
      for (let r = 0; r < routes.length; r++) {
        const route = routes[r]!;
        if (route.fromHop && record.headers.some(([name]) => name === HOP_WATERMARK_HEADER)) {
          const { source, watermark, idle } = JSON.parse(textDecoder.decode(record.value!)) as { source: string; watermark: number | null; idle: boolean };
          session.tasks.hearWatermark(route.stage, record.partition, source, watermark, idle);
          continue;
        }
        // Each route gets its own parse: steps may change the row in place.
        const decoded = decodeRow(record.value);
        if ("poison" in decoded) {
          poison.push({ reason: decoded.poison });
          if (this.#deadLetter(record, route, decoded.poison, decoded.detail, out)) deadLettered++;
          continue;
        }
        let row;
        try {
          row = route.fromHop ? decoded.row : route.stage.before(decoded.row);
        } catch (error) {
          isolate(record, route, error);
          continue;
        }
        if (row === null) {
          dropped++;
        } else if (route.toHop) {
          // Upstream side of a hop: re-key the row by the operator's key and send it through the
          // repartition topic; a row without a usable event time is poison here, at its source.
          let time;
          try {
            time = eventTimeOf(row, route.stage.operator!.compiled.timeColumn);
          } catch (error) {
            isolate(record, route, error);
            continue;
          }
          out.push({
            topic: route.toHop.topic,
            key: rowKeyText(row, route.toHop.keyColumns),
            value: JSON.stringify(row),
            headers: [
              [HOP_SOURCE_HEADER, `${record.topic}:${record.partition}`],
              [HOP_OFFSET_HEADER, String(record.offset)],
              ...(route.stage.def.inputs.length > 1 ? [[HOP_INPUT_HEADER, String(route.inputIndex)] as [string, string]] : []),
            ],
          });
          repartitioned++;
          this.#noteUpstream(route.stage.index, record, time);
        } else if (route.stage.operator) {
          if (DEBUG_LOOP && !session.tasks.has(route.stage, record.partition)) this.#log("debug", `task ${route.stage.index}:${record.partition}: waiting for restore`);
          const task = await session.tasks.task(route.stage, record.partition);
          // Revoked while its state was being restored: the task is not kept, and the row is not this member's to process.
          if (revoked.has(tpKey(record.topic, record.partition))) continue;
          const inputIndex = route.fromHop ? Number(headerText(record, HOP_INPUT_HEADER) ?? 0) : route.inputIndex;
          const source = route.fromHop ? hopSource(record) : undefined;
          let result;
          try {
            result = session.tasks.process(task, record, row, inputIndex, source);
          } catch (error) {
            isolate(record, route, error);
            continue;
          }
          if (result.late.length) {
            this.metrics.lateRecordsDropped(route.stage.index, result.late.length);
            if (this.#plan.settings.lateRows === "deadLetter" && this.#deadLetter(record, route, "late", "the row arrived after its window closed", out)) deadLettered++;
          }
          for (const produced of result.rows) {
            let afterRow;
            try {
              afterRow = route.stage.after(produced);
            } catch (error) {
              isolate(record, route, error);
              continue;
            }
            if (afterRow !== null) emit(record, route, afterRow, produced);
          }
        } else if (route.stage.compute) {
          toCompute ??= new Map();
          const waiting = toCompute.get(route) ?? [];
          waiting.push({ record, row });
          toCompute.set(route, waiting);
        } else {
          emit(record, route, row);
        }
      }
    }
    // The inline part of every stage, measured as one: per-row timers would cost more than the steps.
    const inlineMs = performance.now() - batchStarted;
    const inlineStages = new Set([...this.#routes.values()].flat().map((r) => r.stage));
    if (records.length) for (const stage of inlineStages) stageMs.set(stage, inlineMs / inlineStages.size);
    // Compute steps run on the batch's rows at once (the step splits them into its batch size):
    // a poison result is isolated like any poison row; zero outputs count as dropped.
    for (const [route, waiting] of toCompute ?? []) {
      const computeStarted = performance.now();
      const results = await this.#compute.get(route.stage.index)!.processBatch(waiting.map((w) => w.row));
      this.metrics.stepLatency(route.stage.index, route.stage.compute!.step, route.stage.compute!.op, performance.now() - computeStarted);
      results.forEach((result, i) => {
        const { record } = waiting[i]!;
        if ("poison" in result) {
          poison.push({ reason: result.poison.reason });
          if (this.#deadLetter(record, route, result.poison.reason, result.poison.message, out)) deadLettered++;
          return;
        }
        if (result.rows.length === 0) dropped++;
        for (const produced of result.rows) {
          let row;
          try {
            row = route.stage.after(produced);
          } catch (error) {
            isolate(record, route, error);
            continue;
          }
          if (row === null) dropped++;
          else emit(record, route, row);
        }
      });
    }
    // Watermarks moved: windows, sessions and join buffers they close fire now.
    if (session.tasks.active) {
      // A partition with records still to read never counts as idle (its rows would become late).
      const backlog = (tp: TopicPartition) => !this.#caughtUp(session, tp);
      const empty = (tp: TopicPartition) => this.#ends.get(tpKey(tp.topic, tp.partition)) === 0n;
      for (const { stage, rows, topics, partitions } of session.tasks.advance(session.consumer.owned(), Date.now(), backlog, empty)) {
        this.metrics.timersFired(stage.index, rows.length);
        // Exactly-once: state that fired is work of the open transaction like a consumed row (its
        // partition revoked before the commit, the transaction must not commit the fired rows).
        if (session.tx) {
          if (this.#txPartitions.size === 0) this.#txGroup = session.consumer.groupMetadata();
          for (const topic of topics) for (const p of partitions) this.#txPartitions.add(tpKey(topic, p));
        }
        const route = [...this.#routes.values()].flat().find((r) => r.stage === stage && !r.toHop)!;
        for (const fired of rows) {
          let row;
          try {
            row = route.stage.after(fired);
          } catch (error) {
            // A fired row that the steps after the operator cannot take is poison like any row;
            // it has no source record, so its dead letter carries the fired row itself.
            if (recoveryOf(error) !== "poison") throw error;
            const reason = poisonReason(error);
            poison.push({ reason });
            if (route.deadLetterTopic) {
              out.push({
                topic: route.deadLetterTopic,
                key: null,
                value: JSON.stringify(fired),
                headers: [["fv.error.reason", reason], ["fv.error.message", (error as Error).message.slice(0, 1000)], ["fv.error.stage", route.stageLabel]],
              });
              deadLettered++;
            }
            continue;
          }
          if (row !== null) {
            out.push({ topic: route.outputTopic, key: rowKeyText(fired, route.outputKey), value: JSON.stringify(row) });
            emitted++;
          } else {
            dropped++;
          }
        }
      }
    }
    if (DEBUG_LOOP) this.#log("debug", `batch: sending ${out.length}`);
    await this.#send(session, out);
    if (DEBUG_LOOP) this.#log("debug", "batch: sent");
    // Counted once the batch is acknowledged (at-least-once), or once its transaction commits
    // (exactly-once: an aborted batch is processed again and counted then).
    const c = session.tx ? this.#uncommitted : this.counters;
    c.consumed += consumed;
    c.dropped += dropped;
    c.emitted += emitted;
    c.deadLettered += deadLettered;
    c.repartitioned += repartitioned;
    c.poison += poison.length;
    for (const { reason } of poison) c.poisonByReason[reason] = (c.poisonByReason[reason] ?? 0) + 1;
    if (stageMs.size) for (const [stage, ms] of stageMs) this.metrics.stepLatency(stage.index, stage.steps.length - 1, "stage", ms);
    for (const record of records) {
      const k = tpKey(record.topic, record.partition);
      if (revoked.has(k)) continue;
      const next = record.offset + 1n;
      const pending = this.#pending.get(k);
      if (!pending || pending.offset < next) this.#pending.set(k, { topic: record.topic, partition: record.partition, offset: next });
      if ((this.#positions.get(k) ?? -1n) < next) this.#positions.set(k, next);
    }
  }

  /** Upstream side of a hop: the highest event time sent into the hop from this input partition. */
  #noteUpstream(stageIndex: number, record: InboundRecord, time: number): void {
    const k = `${stageIndex}:${tpKey(record.topic, record.partition)}`;
    let u = this.#upstream.get(k);
    if (!u) this.#upstream.set(k, (u = { ownedSince: Date.now() }));
    if (u.max === undefined || time > u.max) u.max = time;
    u.seenAt = Date.now();
  }

  /**
   * Watermarks across a hop: for each owned upstream partition of a hop, a watermark record
   * `{ source, watermark, idle }` goes to every partition of the repartition topic, after the
   * rows it covers (same producer, so it is read after them). Sent when it changed (at most every
   * 100 ms) and every 2 s regardless, so a restarted downstream task hears every source soon. A
   * partition without rows for STREAM_IDLE_PARTITION_MS is announced idle: it stops holding the
   * downstream watermark back.
   */
  async #announceWatermarks(session: Session, now: number, loopQuietMs: number): Promise<void> {
    const hops = this.#plan.hops!;
    const idleMs = this.#plan.settings.idlePartitionMs;
    const owned = session.consumer.owned();
    const out: OutboundRecord[] = [];
    for (const [index, hop] of Object.entries(hops)) {
      const stage = this.#stages[Number(index)]!;
      const inputs = new Set(stage.def.inputs.map((d) => this.#plan.bindings[d]!.topic));
      for (const tp of owned) {
        if (!inputs.has(tp.topic)) continue;
        const k = `${index}:${tpKey(tp.topic, tp.partition)}`;
        let u = this.#upstream.get(k);
        if (!u) this.#upstream.set(k, (u = { ownedSince: now }));
        // Idle: no rows for a while, and nothing left to read (or the whole loop gets nothing). A
        // partition with lag is only slow: declaring it idle would make its rows late downstream.
        // (A quiet loop, e.g. starved of CPU or restarting its consumer, says nothing about a
        // partition whose known position is below its known end: that one is still behind.)
        const idle = now - (u.seenAt ?? u.ownedSince) > idleMs && !this.#knownBehind(session, tp) && (loopQuietMs > idleMs || this.#caughtUp(session, tp));
        if (u.max === undefined && !idle) continue;
        const changed = !u.sent || u.sent.watermark !== u.max || u.sent.idle !== idle;
        if (u.sent && now - u.sent.at < (changed ? WATERMARK_CHANGED_MS : WATERMARK_REPEAT_MS)) continue;
        u.sent = { watermark: u.max, idle, at: now };
        const value = JSON.stringify({ source: `${tp.topic}:${tp.partition}`, watermark: u.max ?? null, idle });
        for (let q = 0; q < hop.partitions; q++) out.push({ topic: hop.topic, partition: q, key: null, value, headers: [[HOP_WATERMARK_HEADER, "1"]] });
      }
    }
    if (out.length) await this.#send(session, out);
  }

  /** Committed offsets of upstream partitions not read yet this session (for `#caughtUp`); asked at most every 2 s. */
  readonly #startOffsets = new Map<string, bigint>();
  #startOffsetsAt = 0;

  /** Whether a partition has nothing left to read: its next offset has reached its (read_committed) end. */
  #caughtUp(session: Session, tp: TopicPartition): boolean {
    const k = tpKey(tp.topic, tp.partition);
    const end = this.#ends.get(k);
    if (end === undefined) return false;
    if (end === 0n) return true;
    const position = this.#positionOf(session, k);
    return position !== undefined && position >= end;
  }

  /** The next offset to read of a partition: processed this session, else its committed offset (looked up, at most every 2 s). */
  #positionOf(session: Session, k: string): bigint | undefined {
    const position = this.#positions.get(k) ?? this.#startOffsets.get(k);
    if (position === undefined && Date.now() - this.#startOffsetsAt >= END_OFFSETS_INTERVAL_MS) {
      this.#startOffsetsAt = Date.now();
      const topics = [...new Set(session.consumer.owned().map((tp) => tp.topic))];
      void session.admin.committedOffsets(this.#plan.groupId, topics).then((offsets) => {
        for (const o of offsets) if (o.offset >= 0n) this.#startOffsets.set(tpKey(o.topic, o.partition), o.offset);
      }, () => {});
    }
    return position;
  }

  /** Whether a partition's known position is below its known end (records are waiting there). */
  #knownBehind(session: Session, tp: TopicPartition): boolean {
    const k = tpKey(tp.topic, tp.partition);
    const end = this.#ends.get(k);
    const position = this.#positionOf(session, k);
    return end !== undefined && position !== undefined && position < end;
  }

  /** An owned partition ("topic:partition") whose known position is below its known end, if any. */
  #lagging(session: Session, held: TopicPartition[] = []): string | undefined {
    const waiting = new Set(held.map((tp) => tpKey(tp.topic, tp.partition)));
    for (const tp of session.consumer.owned()) {
      const k = tpKey(tp.topic, tp.partition);
      if (waiting.has(k)) continue;
      const end = this.#ends.get(k);
      const position = this.#positionOf(session, k);
      if (end !== undefined && position !== undefined && position < end) return `${tp.topic}:${tp.partition}`;
    }
    return undefined;
  }

  /** Queues a poison row for the input's dead-letter topic. True when it was queued. */
  #deadLetter(record: InboundRecord, route: Route, reason: string, detail: string, out: OutboundRecord[]): boolean {
    if (!route.deadLetterTopic) return false;
    out.push({
      topic: route.deadLetterTopic,
      key: record.key,
      value: record.value,
      headers: [
        ...record.headers,
        ["fv.error.reason", reason],
        ["fv.error.message", detail.slice(0, 1000)],
        ["fv.error.stage", route.stageLabel],
        ["fv.source.topic", record.topic],
        ["fv.source.partition", String(record.partition)],
        ["fv.source.offset", String(record.offset)],
      ],
    });
    return true;
  }

  async #send(session: Session, records: OutboundRecord[]): Promise<void> {
    // Exactly-once: any failure aborts the transaction; the session restarts from committed offsets.
    if (session.tx) return session.tx.send(records);
    for (let attempt = 1; ; attempt++) {
      try {
        await session.producer!.send(records);
        return;
      } catch (error) {
        if (recoveryOf(error) !== "retryable" || attempt >= SEND_RETRIES) throw error;
        this.#log("warn", `send failed, retrying (${attempt}/${SEND_RETRIES}): ${(error as Error).message}`);
        await sleep(SEND_RETRY_PAUSE_MS);
      }
    }
  }

  /** Takes the pending offsets worth committing: owned partitions, moving forward. */
  #takeCommittable(session: Session): CommitOffset[] {
    if (this.#pending.size === 0) return [];
    const owned = new Set(session.consumer.owned().map((tp) => tpKey(tp.topic, tp.partition)));
    const offsets: CommitOffset[] = [];
    for (const [k, o] of this.#pending) {
      const committed = this.#committed.get(k);
      if (owned.has(k) && (committed === undefined || o.offset > committed)) offsets.push(o);
    }
    this.#pending.clear();
    return offsets;
  }

  #markCommitted(offsets: CommitOffset[]): void {
    for (const o of offsets) this.#committed.set(tpKey(o.topic, o.partition), o.offset);
    this.counters.commits++;
  }

  #syncCheckpointCounters(): void {
    this.counters.checkpointFailures = this.#checkpointer.counters.failures;
    this.counters.checkpointTimeouts = this.#checkpointer.counters.timeouts;
  }

  /**
   * Exactly-once checkpoint: the interval's transaction gets the consumer offsets and commits.
   *   1. state: operator changelogs (dirty keys, covered input offsets) go into the transaction;
   *   2. offsets: the next offsets to read, with the group's generation (a member that left is fenced);
   *   3. transaction: commit — outputs, dead letters, state and offsets become visible together.
   */
  async #commitTransaction(session: Session): Promise<void> {
    const tx = session.tx!;
    if (DEBUG_LOOP) this.#log("debug", "commit transaction: start");
    const owned = new Set(session.consumer.owned().map((tp) => tpKey(tp.topic, tp.partition)));
    for (const k of this.#txPartitions) if (!owned.has(k)) this.#revokedMidTransaction = true;
    if (this.#revokedMidTransaction) throw new FvError("KAFKA_FENCED", "partitions were revoked mid-transaction: aborting it and rejoining");
    // A rebalance since the transaction's first batch (even one that gave the same partitions
    // back, e.g. after a pause): another member may have processed these records meanwhile.
    // (The adapters hold a rejoin until this member has checkpointed, so this is the rare case of
    // a member that lost its membership, e.g. paused past its session timeout.)
    const generation = session.consumer.groupMetadata().generationId;
    const group = this.#txGroup ?? session.consumer.groupMetadata();
    if (this.#txPartitions.size > 0 && generation !== group.generationId) {
      throw new FvError("KAFKA_FENCED", `the group moved from generation ${group.generationId} to ${generation} during the transaction: aborting it and rejoining`);
    }
    const offsets = this.#takeCommittable(session);
    await session.tasks.noteConsumed(offsets);
    const changelog = session.tasks.drainChangelog();
    if (!tx.inTransaction && offsets.length === 0 && changelog.length === 0) return;
    const steps: CheckpointStep[] = [
      { name: "state", run: () => tx.send(changelog) },
      // On behalf of the member that read this work: the broker refuses it if the group moved on.
      { name: "offsets", run: () => tx.sendOffsets(session.consumer, group, offsets) },
      { name: "transaction", run: () => tx.commit() },
    ];
    const started = performance.now();
    try {
      await this.#checkpointer.commit(steps);
    } catch (error) {
      this.metrics.checkpointFailed(asFvError(error).context.timeout ? "timeout" : "error");
      throw error;
    } finally {
      this.#syncCheckpointCounters();
    }
    this.metrics.checkpointCommitted(performance.now() - started);
    if (DEBUG_LOOP) this.#log("debug", "commit transaction: done");
    this.metrics.transaction("commit");
    this.counters.transactionsCommitted++;
    addCounters(this.counters, this.#uncommitted);
    this.#uncommitted = emptyCounters();
    this.#txPartitions.clear();
    this.#txGroup = undefined;
    this.#markCommitted(offsets);
  }

  /**
   * At-least-once checkpoint, serialized (one at a time). The outputs are already acknowledged;
   *   1. state: operator changelogs (dirty keys, covered input offsets) are written and acknowledged;
   *   2. offsets: then the offsets are committed — never ahead of the state they depend on.
   */
  #commitAtLeastOnce(): Promise<void> {
    const send = async () => {
      const session = this.#session;
      if (!session) return;
      const offsets = this.#takeCommittable(session);
      await session.tasks.noteConsumed(offsets);
      const changelog = session.tasks.drainChangelog();
      if (offsets.length === 0 && changelog.length === 0) return;
      const started = performance.now();
      try {
        await this.#checkpointer.commit([
          { name: "state", run: () => this.#send(session, changelog) },
          { name: "offsets", run: () => session.consumer.commit(offsets) },
        ]);
      } catch (error) {
        this.metrics.checkpointFailed(asFvError(error).context.timeout ? "timeout" : "error");
        this.#commitFailed(offsets, error);
        return;
      } finally {
        this.#syncCheckpointCounters();
      }
      this.metrics.checkpointCommitted(performance.now() - started);
      this.#markCommitted(offsets);
    };
    const run = this.#commitChain.then(send);
    this.#commitChain = this.#commitChain.then(() => run).catch(() => {});
    return run;
  }

  #commitFailed(offsets: CommitOffset[], error: unknown): void {
    const recovery = recoveryOf(error);
    if (recovery === "retryable") {
      // Put the offsets back unless newer ones arrived meanwhile; the next commit retries.
      for (const o of offsets) {
        const k = tpKey(o.topic, o.partition);
        if (!this.#pending.has(k)) this.#pending.set(k, o);
      }
    }
    if (recovery !== "fenced" && recovery !== "retryable") throw error;
    // Fenced (the group moved on): the partitions' new owners restart from the last commit.
    this.#log("warn", `offset commit skipped: ${(error as Error).message}`);
  }

  /**
   * Closes a session's clients, each within CLOSE_TIMEOUT_MS: a client that cannot finish closing
   * (librdkafka's consumer close waits for a broker that is down) must not wedge the loop, which
   * then neither rejoins nor stops. A client left closing is abandoned; the next session has its own.
   */
  async #close(session: Session): Promise<void> {
    const bounded = async (what: string, close: (() => Promise<void>) | undefined) => {
      if (!close) return;
      let timer: ReturnType<typeof setTimeout> | undefined;
      const timedOut = new Promise<"timeout">((resolve) => (timer = setTimeout(() => resolve("timeout"), CLOSE_TIMEOUT_MS)));
      try {
        const result = await Promise.race([close().then(() => "closed" as const), timedOut]);
        if (result === "timeout") this.#log("warn", `closing the ${what} took longer than ${CLOSE_TIMEOUT_MS} ms: going on without it`);
      } catch (error) {
        this.#log("warn", `closing the ${what}: ${(error as Error).message}`);
      } finally {
        clearTimeout(timer);
      }
    };
    await bounded("admin client", () => session.admin.close());
    await bounded("consumer", () => session.consumer.close());
    await bounded("producer", session.producer && (() => session.producer!.close()));
    await bounded("transactional producer", session.tx && (() => session.tx!.close()));
  }
}

const textDecoder = new TextDecoder();

function headerText(record: InboundRecord, name: string): string | undefined {
  const header = record.headers.find(([n]) => n === name);
  return header ? textDecoder.decode(header[1]) : undefined;
}

function hopSource(record: InboundRecord): { key: string; offset: bigint } | undefined {
  const key = headerText(record, HOP_SOURCE_HEADER);
  const offset = headerText(record, HOP_OFFSET_HEADER);
  return key !== undefined && offset !== undefined ? { key, offset: BigInt(offset) } : undefined;
}

/** The key columns of what a stateful stage emits, as its rows name them. */
function outputKeyOf(stage: CompiledStage): readonly string[] {
  return outputKeyColumns(stage) ?? [];
}

function asFvError(error: unknown): FvError {
  return error instanceof FvError ? error : new FvError("KAFKA_FATAL", (error as Error)?.message ?? String(error), { cause: error });
}

/** The reason a poison error gives: the expression error's reason, or its code. */
function poisonReason(error: unknown): string {
  // deno-lint-ignore no-explicit-any
  const e = error as any;
  return e?.reason ?? e?.context?.reason ?? e?.code ?? "step_error";
}
