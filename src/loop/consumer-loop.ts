import { backoffMs, deadline, delay } from "../async.ts";
import type { ComputeStep } from "../compute/index.ts";
import type { HttpObserver } from "../compute/http-step.ts";
import { compileTopology, type CompiledStage } from "../topology/compile-topology.ts";
import { asFvError, FvError, recoveryOf } from "../errors.ts";
import type { InboundRecord, KafkaClient, TopicPartition } from "../kafka/port.ts";
import { PartitionSet } from "../kafka/topic-partition.ts";
import { MetricsRecorder } from "../metrics/index.ts";
import { Checkpointer } from "../state/checkpointer.ts";
import { Commits } from "./commits.ts";
import { closeComputeSteps, startComputeSteps } from "./compute-runtime.ts";
import { emptyCounters, type LoopCounters } from "./counters.ts";
import type { Logger } from "../logger.ts";
import { type LoopPlan, memberNameOf, stateTopicOf } from "./plan.ts";
import { DepartedOwners } from "./departed-owners.ts";
import { answerQuery, type StateAnswer, type StateQuery, StateWatches } from "./state-query.ts";
import type { UpstreamHop } from "./repartition.ts";
import type { StandbyPartition } from "./standby-tasks.ts";
import { Session, stateDirOf } from "./session.ts";
import { SinkSet } from "./sink-set.ts";
import { GLOBAL_REFRESH_MS, GlobalTableReader } from "./global-tables.ts";
import type { CompiledTableJoin } from "../ops/table-join.ts";
import { countEmissions, type Emissions, routesOf, StageRunner } from "./stage-runner.ts";
import { defaultTimings, type LoopTimings } from "./timings.ts";
import { type OwnedPartition, Watchdog } from "./watchdog.ts";

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

/** What a host or a test may change of a loop; everything is optional. */
export interface LoopOptions {
  /** The loop's clocks (stall, held release, idle advance, backoff, restarts, close); today's values by default. */
  timings?: Partial<LoopTimings>;
  /** Log every poll, batch and transaction commit at debug level (default: the plan's `debugLoop`). */
  debug?: boolean;
}

/**
 * One partition-owning consumer: consume → transform → emit → commit, on its own (Kafka Streams'
 * StreamThread). It keeps the lifecycle; each join of the group is a Session, records go through
 * the StageRunner, sends through the session's RecordCollector, checkpoints through Commits, and
 * the Watchdog decides when a consumer is stalled.
 *
 * At-least-once (default): offsets are committed only for records whose outputs Kafka has
 * acknowledged, every `checkpointIntervalMs`, when a rebalance starts, and before letting go.
 *
 * Exactly-once: every checkpoint interval is one transaction holding the outputs, the dead
 * letters and the consumer offsets (with the group's generation). A rebalance ends the open
 * transaction at the next batch boundary. Any failure of a transaction aborts it and starts a
 * new session from the last committed offsets (see docs/exactly-once.md).
 *
 * @example
 * const loop = new ConsumerLoop(plan, client, log);
 * const final = await loop.run(); // "STOPPED" or "FAILED", after loop.stop()
 */
export class ConsumerLoop {
  readonly #plan: LoopPlan;
  readonly #client: KafkaClient;
  readonly #log: Logger;
  readonly #debug: Logger | undefined;
  readonly #timings: LoopTimings;
  readonly #stages: readonly CompiledStage[];
  readonly #runner: StageRunner;
  readonly #commits: Commits;
  readonly #watchdog: Watchdog;
  /** Who owned which partition, across sessions: a new owner fences a departed one's open transaction. */
  readonly #departed: DepartedOwners;
  /** Stages with a repartition hop, as their upstream side sees them (then watermarks are announced). */
  readonly #upstreamHops: UpstreamHop[];
  /** Every topic this loop writes to: outputs, dead letters, repartition hops, the state topic. */
  readonly #writtenTopics: string[];
  /** Started compute steps by stage index; they live as long as the loop, across sessions. */
  #compute = new Map<number, ComputeStep>();
  /** Where stages write rows that do not go to Kafka (postgres, http), across sessions. */
  readonly #sinks: SinkSet | undefined;
  /** Global tables this loop reads whole (tableJoin, global = true), across sessions. */
  readonly #globals: GlobalTableReader[];
  readonly counters: LoopCounters = emptyCounters();
  /** Events for /metrics (latencies, rebalances, checkpoints); snapshots cross Worker boundaries. */
  readonly metrics = new MetricsRecorder();
  #state: LoopState = "CREATED";
  /** What the loop is waiting on now, in words (a stop that takes long logs it). */
  #phase = "not started";
  #session: Session | undefined;
  #stopRequested = false;
  #error: FvError | undefined;
  /** When a consumer of this loop was fenced by another with its group.instance.id (`#sharedInstanceId`). */
  #instanceFencings: number[] = [];

  constructor(plan: LoopPlan, client: KafkaClient, log: Logger, options: LoopOptions = {}) {
    this.#plan = plan;
    this.#client = client;
    this.#log = (level, message, context) => log(level, message, { consumer: plan.consumerIndex, ...context });
    this.#debug = (options.debug ?? plan.debugLoop) ? this.#log : undefined;
    this.#timings = { ...defaultTimings, ...options.timings };
    this.#stages = (plan.compiled ?? compileTopology(plan.topology)).stages;
    this.#runner = new StageRunner(routesOf(this.#stages, plan), { lateRows: plan.settings.lateRows, metrics: this.metrics, debug: this.#debug });
    this.#globals = this.#stages.flatMap((stage) => {
      const compiled = stage.operator?.compiled;
      if (!compiled?.global || compiled.tableInput === undefined) return [];
      const topic = plan.bindings[stage.def.inputs[compiled.tableInput]!]!.topic;
      return [new GlobalTableReader(topic, (compiled as CompiledTableJoin).globalTable!, this.#log, this.counters)];
    });
    this.#upstreamHops = Object.entries(plan.hops ?? {}).map(([index, hop]) => ({
      stageIndex: Number(index),
      topic: hop.topic,
      partitions: hop.partitions,
      inputs: new Set(this.#stages[Number(index)]!.def.inputs.map((d) => plan.bindings[d]!.topic)),
    }));
    const written = new Set<string>();
    for (const route of [...this.#runner.routes.values()].flat()) {
      if (!route.sink) written.add(route.outputTopic);
      if (route.deadLetterTopic) written.add(route.deadLetterTopic);
      if (route.toHop) written.add(route.toHop.topic);
    }
    if (this.#stages.some((stage) => stage.operator)) written.add(stateTopicOf(plan.pipeline));
    this.#writtenTopics = [...written];
    const checkpointer = new Checkpointer({ deadlineMs: plan.settings.checkpointDeadlineMs, maxConsecutiveFailures: plan.settings.checkpointMaxFailures });
    const unsafeCommitAhead = plan.unsafeCommitAhead === true && plan.settings.exactlyOnce;
    if (unsafeCommitAhead) this.#log("warn", "FV_UNSAFE_COMMIT_AHEAD=1: exactly-once commits take the offsets of records not yet in their transaction; a crash loses rows (for the kill test only)");
    const sinkBindings = Object.values(plan.bindings).some((b) => b.sink !== "kafka");
    this.#sinks = sinkBindings
      ? new SinkSet(this.#stages, { pipeline: plan.pipeline, bindings: plan.bindings, stateDir: stateDirOf(plan.settings.stateDir, plan.pipeline) ?? `.fv-state/${plan.pipeline}`, env: plan.compute?.env ?? {}, exactlyOnce: plan.settings.exactlyOnce, log: this.#log, ...(plan.hops ? { hops: plan.hops } : {}) }, this.counters)
      : undefined;
    this.#commits = new Commits({ checkpointer, counters: this.counters, metrics: this.metrics, log: this.#log, debug: this.#debug, unsafeCommitAhead, sinks: this.#sinks, stopping: () => this.#stopRequested }, () => this.#session);
    this.#departed = new DepartedOwners({ pipeline: plan.pipeline, groupId: plan.groupId, me: memberNameOf(plan), log: this.#log }, this.counters);
    this.#watchdog = new Watchdog({ timings: this.#timings, groupId: plan.groupId, counters: this.counters, log: this.#log });
  }

  /** What the loop is doing or waiting on now, e.g. "the final checkpoint" (a slow stop names it). */
  get phase(): string {
    return this.#phase;
  }

  get state(): LoopState {
    return this.#state;
  }

  get error(): FvError | undefined {
    return this.#error;
  }

  /** Partitions this loop owns now, with the live state size of stateful stages' input partitions. */
  owned(): OwnedPartition[] {
    return this.#session ? this.#watchdog.owned(this.#session) : [];
  }

  /** Keys being watched (queryable state): each change a row makes to one is handed to its listeners. */
  watches = new StateWatches();

  /** Queryable state: what this loop's stateful tasks hold (nothing between sessions). */
  queryState(query: StateQuery): StateAnswer {
    return answerQuery(this.#session?.tasks, query, this.#session?.rebalancing ?? false, this.#session?.standbys);
  }

  /** The standby copies this loop keeps (STREAM_STANDBY_REPLICAS), with their lag. */
  standbys(): StandbyPartition[] {
    return this.#session?.standbys?.list() ?? [];
  }

  #to(next: LoopState): void {
    if (!transitions[this.#state].includes(next)) {
      throw new FvError("INTERNAL", `consumer loop cannot go from ${this.#state} to ${next}`);
    }
    this.#state = next;
  }

  /**
   * A fenced static member takes its group.instance.id back with a fresh consumer: once is a rejoin
   * a restarting broker answered twice. Fenced again and again, another process holds the same
   * STREAM_INSTANCE_ID, and the two would take it from each other without end: that is a setting
   * to fix, so the loop ends with it.
   */
  #sharedInstanceId(failure: FvError): FvError | undefined {
    if (!failure.context.instanceFenced) return undefined;
    const { times, withinMs } = this.#timings.instanceFencings;
    const now = performance.now();
    this.#instanceFencings = [...this.#instanceFencings.filter((at) => now - at < withinMs), now];
    if (this.#instanceFencings.length < times) return undefined;
    const id = this.#plan.settings.instanceId;
    return new FvError(
      "INVALID_SETTINGS",
      `this consumer was fenced ${times} times within ${Math.round(withinMs / 1000)} s by another consumer with its group.instance.id: another process runs with STREAM_INSTANCE_ID=${id}. Give each process its own STREAM_INSTANCE_ID (last: ${failure.message})`,
      { cause: failure },
    );
  }

  /** Ends the loop FAILED with this error, logged. */
  #fail(failure: FvError, what: string): LoopState {
    this.#error = failure;
    this.#log("error", `${what}: ${failure.message}`, { code: failure.code });
    this.#to("FAILED");
    return this.#state;
  }

  /** An http step's calls, retries and breaker, into the metric events and the build record's counters. */
  #httpObserver(stage: CompiledStage): Partial<HttpObserver> {
    const { counters, metrics } = this;
    const step = stage.compute!.step;
    counters.httpCalls ??= 0;
    counters.httpRetries ??= 0;
    counters.httpInFlight ??= 0;
    counters.httpBreakersOpen ??= 0;
    let open = false;
    return {
      call: (status, ms) => {
        metrics.httpCall(stage.index, step, status, ms);
        counters.httpCalls! += 1;
      },
      retried: () => {
        metrics.httpRetried(stage.index, step);
        counters.httpRetries! += 1;
      },
      inFlight: (delta) => void (counters.httpInFlight! += delta),
      // Open counts as open (readiness fails); half-open, after the cool-down, as ready to try again.
      breaker: (state) => {
        const at = `stage ${stage.index + 1}, step ${step + 1} (http)`;
        if (state === "open") this.#log("warn", `${at}: the circuit breaker is open: the service failed too many calls in a row`);
        else if (state === "half-open") this.#log("info", `${at}: the circuit breaker is half-open: the next call probes the service`);
        else this.#log("info", `${at}: the circuit breaker closed: calls flow again`);
        const nowOpen = state === "open";
        if (nowOpen !== open) counters.httpBreakersOpen! += nowOpen ? 1 : -1;
        open = nowOpen;
      },
    };
  }

  /** Asks the loop to finish its in-flight batch, commit and leave. Idempotent. */
  stop(): void {
    this.#stopRequested = true;
    for (const step of this.#compute.values()) step.interrupt?.();
  }

  /** Runs until stopped, idle for `idleTimeoutMs`, or failed. Resolves with the final state. */
  async run(): Promise<LoopState> {
    try {
      return await this.#run();
    } finally {
      this.#phase = "done";
    }
  }

  async #run(): Promise<LoopState> {
    if (this.#stopRequested) {
      this.#to("STOPPED");
      return this.#state;
    }
    this.#to("STARTING");
    this.#phase = "starting its compute steps";
    try {
      this.#compute = await startComputeSteps(this.#stages, this.#plan.compute, this.#log, { http: (stage) => this.#httpObserver(stage) });
    } catch (error) {
      return this.#fail(asFvError(error), "compute steps did not start");
    }
    try {
      return await this.#runSessions();
    } finally {
      this.#phase = "closing its compute steps";
      await closeComputeSteps(this.#compute);
      this.#phase = "closing its sinks";
      await this.#sinks?.close();
    }
  }

  /** Sessions one after another: a fenced or recoverable failure rejoins with backoff, until stopped. */
  async #runSessions(): Promise<LoopState> {
    const timings = this.#timings;
    let restarts = 0;
    while (true) {
      let session: Session | undefined;
      try {
        session = this.#openSession();
        await this.#runSession(session);
        break;
      } catch (error) {
        const failure = asFvError(error);
        const recovery = recoveryOf(failure);
        // Consecutive: a session that processed records before it failed starts the count again.
        if (session && session.batches > 0) restarts = 0;
        // Stopping, and the last checkpoint was refused because the group moved on (a scale-in
        // during a rebalance): its transaction is aborted and the partitions' new owners read that
        // work again from the last commit. Nothing is lost, so the stop is still an ordered one.
        if (this.#stopRequested && (recovery === "fenced" || recovery === "retryable")) {
          this.#log("warn", `stopping: the last checkpoint did not go through (${failure.message}); the partitions' next owners read that work again from the last commit`, { code: failure.code });
          break;
        }
        if (recovery === "fatal" || this.#stopRequested || ++restarts > timings.maxConsecutiveRestarts) return this.#fail(failure, "consumer loop failed");
        const shared = this.#sharedInstanceId(failure);
        if (shared) return this.#fail(shared, "consumer loop failed");
        this.counters.restarts++;
        this.metrics.loopRestarted();
        const pause = backoffMs(restarts, timings.restartBackoff);
        this.#log("warn", `${recovery === "fenced" ? "fenced" : "recoverable failure"}: ${failure.message}; rejoining in ${pause} ms`, { code: failure.code });
        this.#phase = `waiting ${pause} ms to rejoin`;
        await delay(pause);
        if (this.#stopRequested) break;
      }
    }
    if (this.#state === "STARTING") this.#to("RUNNING");
    this.#to("STOPPING");
    this.#to("STOPPED");
    return this.#state;
  }

  #openSession(): Session {
    const session = new Session({
      plan: this.#plan,
      client: this.#client,
      stages: this.#stages,
      topics: [...this.#runner.routes.keys()],
      upstreamHops: this.#upstreamHops,
      counters: this.counters,
      departed: this.#departed,
      metrics: this.metrics,
      log: this.#log,
      timings: this.#timings,
      onAssignment: (assigned, revoked) => this.#sinks?.assigned(assigned, revoked),
    });
    session.tasks.watches = this.watches;
    // What the last session buffered for the sinks was never committed: its records are read again.
    this.#sinks?.reset();
    this.#watchdog.opened();
    return session;
  }

  /** One join of the group: clients up, loop until stop or idle, final checkpoint, clients down. */
  async #runSession(session: Session): Promise<void> {
    this.#session = session;
    try {
      // Fence the predecessors with the same transactional ids first, so the offsets read next are final.
      this.#phase = "fencing earlier producers of its transactional ids";
      for (const tx of session.txs) await tx.ready();
      this.#phase = "reading its global tables";
      // Global tables are read to their end before the first row is joined to them.
      for (const table of this.#globals) {
        const before = table.read;
        await table.refresh(session.admin);
        if (before === 0) this.#log("info", `global table ${table.topic}: ${table.read} records read`);
      }
      this.#phase = "joining the group";
      await session.consumer.start();
      session.polling = true;
      if (this.#state === "STARTING") this.#to("RUNNING");
      await this.#poll(session);
      // The ordered end: the in-flight batch is done; the watermarks of its rows, checkpoint, then leave the group.
      if (session.revokedMidTransaction) throw new FvError("KAFKA_FENCED", "partitions were revoked mid-transaction");
      this.#phase = "the final checkpoint";
      if (session.tx) {
        await this.#announce(session, Date.now(), true);
        await this.#commits.transaction(session, { flush: true });
      } else await this.#finalAtLeastOnce(session);
    } catch (error) {
      // Exactly-once: nothing queued runs any more, and the request under way settles, before the abort.
      this.#phase = "ending a failed session (settling sends, aborting its transactions)";
      if (session.tx) await session.collector.cancel(asFvError(error));
      // At-least-once: the batch send in flight ends (acknowledged or failed, bounded) before the
      // member leaves the group, so no write of this member lands after its partitions' next owner's.
      else await deadline(session.settleSends(), this.#timings.closeTimeoutMs).catch(() => {});
      for (const tx of session.txs) {
        if (!tx.inTransaction) continue;
        await tx.abort().catch(() => {});
        this.counters.transactionsAborted++;
        this.metrics.transaction("abort");
      }
      throw error;
    } finally {
      this.#session = undefined;
      session.polling = false;
      this.#watchdog.stop();
      session.releaseRebalance();
      this.#phase = "closing its Kafka clients and state stores";
      await session.close(this.#timings.closeTimeoutMs, this.#log);
    }
  }

  /**
   * The last at-least-once checkpoint of a session that ends in order (the watermarks of its rows,
   * then its commit), within `finalFlushMs`. Past it the stop goes on and nothing more is
   * committed (a commit request already sent may still land: its records were acknowledged); the
   * partitions' next owners read the rest again. A send that is never acknowledged (the pure-JS
   * client's idempotent producer retries without end) made this wait unbounded. Exactly-once is
   * bounded by its transaction's own deadlines, and a commit under way there must not be raced
   * by an abort.
   */
  async #finalAtLeastOnce(session: Session): Promise<void> {
    const ms = this.#timings.finalFlushMs;
    const checkpoint = (async () => {
      await this.#announce(session, Date.now(), true);
      await this.#commits.atLeastOnce(session, { flush: true });
    })();
    await deadline(checkpoint, ms, () => {
      // Nothing of it commits later either, should its sends be acknowledged after all.
      session.checkpointFailed = true;
      return new FvError("KAFKA_RETRYABLE", `the last checkpoint did not finish within ${ms} ms (sends not acknowledged, or the brokers slow to answer): it is not committed`);
    });
  }

  /**
   * Sends the hops' watermark records that are due (`changedNow`: every changed one, as a
   * checkpoint's offsets need) after the rows they cover.
   */
  async #announce(session: Session, now: number, changedNow: boolean): Promise<void> {
    if (!this.#upstreamHops.length) return;
    const watchdog = this.#watchdog;
    const lag = { knownBehind: (tp: TopicPartition) => watchdog.knownBehind(session, tp), caughtUp: (tp: TopicPartition) => watchdog.caughtUp(session, tp) };
    const out = session.upstream.announce(now, watchdog.quietMs(now), session.consumer.owned(), lag, changedNow);
    if (!out.length) return;
    // After the rows they cover: exactly-once queues them behind those rows' sends. At-least-once
    // sends them once the batch send in flight is acknowledged, and goes on without waiting for
    // their own acknowledgement (a checkpoint waits for it before it takes offsets they cover).
    if (session.tx) await session.emit(out);
    else await session.emitInBackground(out, new PartitionSet(), () => {});
  }

  /** The poll loop of a session, until stopped or idle; a failure throws. */
  async #poll(session: Session): Promise<void> {
    const { settings } = this.#plan;
    const watchdog = this.#watchdog;
    let lastCheckpoint = Date.now();
    let lastAdvance = Date.now();
    let lastGlobal = Date.now();
    watchdog.start();
    while (!this.#stopRequested) {
      this.#phase = "polling";
      const records = await session.consumer.poll(settings.batchSize, settings.pollTimeoutMs);
      this.#phase = "processing a batch";
      const now = Date.now();
      if (this.#globals.length && now - lastGlobal >= GLOBAL_REFRESH_MS) {
        lastGlobal = now;
        for (const table of this.#globals) await table.refresh(session.admin);
      }
      const paused = watchdog.polled(now);
      if (paused >= settings.sessionTimeoutMs && !settings.exactlyOnce && this.#stages.some((stage) => stage.operator)) {
        // Frozen past its session, this member may have been dropped from the group and its
        // partitions processed by another meanwhile, then handed back to it unchanged (a static
        // member): its state in memory is behind theirs. Nothing fences at-least-once, so its
        // windows would fire from that state (the fault soak, Node + librdkafka: windows of 8 and
        // 357 rows for 400). Starting over restores the state from the changelog.
        throw new FvError("KAFKA_RETRYABLE", `this process was frozen for ${Math.round(paused / 1000)} s, past its session (${settings.sessionTimeoutMs} ms): its partitions may have been processed by another member meanwhile, so its state is read again`);
      }
      this.#debug?.("debug", `poll: ${records.length} records`);
      if (records.length > 0) {
        await this.#processBatch(session, records);
        session.batches++;
        watchdog.recordsArrived(now);
        lastAdvance = now;
      } else {
        if (session.tasks.active && (now - lastAdvance >= this.#timings.idleAdvanceMs || session.tasks.firing)) {
          // No input: only the watermarks move (an empty batch fires what they close), or windows
          // due wait to be fired in steps from the local store.
          lastAdvance = now;
          await this.#processBatch(session, []);
        }
        watchdog.checkStall(session, now);
        if (settings.idleTimeoutMs > 0 && watchdog.quietMs(now) >= settings.idleTimeoutMs) {
          this.#log("info", `no input for ${settings.idleTimeoutMs} ms: stopping`);
          break;
        }
      }
      const checkpointDue = session.checkpointNow || now - lastCheckpoint >= settings.checkpointIntervalMs;
      // Repartition hops: tell every repartition partition how far each upstream partition got
      // (before a checkpoint, every change: its offsets must not go ahead of their watermarks;
      // not while an exactly-once commit still runs, which makes this checkpoint wait anyway).
      const takesOffsets = checkpointDue && (!session.tx || !session.collector.committing || session.rebalanceWaiters.length > 0);
      await this.#announce(session, now, takesOffsets);
      if (checkpointDue) {
        this.#phase = "checkpointing";
        session.checkpointNow = false;
        // Exactly-once: while the last commit still runs this one waits, and its transaction grows.
        if (await this.#commits.checkpoint(session)) lastCheckpoint = now;
      }
      if (session.backgroundError) throw session.backgroundError;
      if (session.tx) {
        const flush = async () => (await this.#announce(session, Date.now(), true), await this.#commits.transaction(session, { flush: true }));
        await watchdog.releaseHeld(session, now, flush, () => this.#written(session));
      }
      watchdog.refreshEnds(session, now);
      if (session.revokedMidTransaction) {
        throw new FvError("KAFKA_FENCED", "partitions were revoked while their records were in the open transaction: aborting it and rejoining");
      }
    }
  }

  /**
   * One batch: transformed, its outputs and dead letters sent (or added to the transaction), then
   * its offsets marked committable. Partitions revoked while it runs are tracked (see
   * Session.revokedDuringBatch).
   */
  async #processBatch(session: Session, records: InboundRecord[]): Promise<void> {
    const revoked = new PartitionSet();
    session.revokedDuringBatch = revoked;
    try {
      // Exactly-once: the batch's partitions join the open transaction before its first await, so
      // a revocation at any point of the batch aborts the transaction (the state the batch changed
      // and the outputs it made go with it).
      if (session.tx) session.joinTransaction(records);
      const sinks = this.#sinks;
      // A stateless stage into Postgres skips records whose rows the table holds already.
      if (sinks) await sinks.prepare(records, () => this.#stopRequested);
      const written = sinks ? (sink: string, record: InboundRecord) => sinks.written(sink, record) : undefined;
      const emissions = await this.#runner.run(records, { tasks: session.tasks, compute: this.#compute, upstream: session.upstream, revoked, written });
      if (session.tasks.active) this.#fire(session, emissions);
      if (emissions.sink) sinks!.add(emissions.sink, revoked);
      this.#debug?.("debug", `batch: sending ${emissions.out.length}`);
      for (const [stage, ms] of emissions.stageMs) this.metrics.stepLatency(stage.index, stage.steps.length - 1, "stage", ms);
      if (session.tx) {
        await session.emit(emissions.out);
        // Counted once its transaction commits (an aborted batch is processed again and counted then).
        countEmissions(session.open.counters, emissions);
        session.markProcessed(records, revoked);
      } else {
        // At-least-once: the loop goes on with the next batch while this one's send is acknowledged;
        // it is counted, and its offsets become committable, once it is.
        await session.emitInBackground(emissions.out, revoked, () => {
          countEmissions(this.counters, emissions);
          session.markProcessed(records, revoked);
        });
      }
      this.#debug?.("debug", "batch: sent");
    } finally {
      session.revokedDuringBatch = undefined;
    }
  }

  /** Every partition of the topics this loop writes to. */
  async #written(session: Session): Promise<TopicPartition[]> {
    const counts = await session.admin.partitionCounts(this.#writtenTopics);
    return [...counts].flatMap(([topic, count]) => Array.from({ length: count ?? 0 }, (_, partition) => ({ topic, partition })));
  }

  /** Watermarks moved: windows, sessions and join buffers they close fire now. */
  #fire(session: Session, emissions: Emissions): void {
    // A partition with records still to read never counts as idle (its rows would become late).
    const backlog = (tp: TopicPartition) => !this.#watchdog.caughtUp(session, tp);
    const empty = (tp: TopicPartition) => this.#watchdog.isEmpty(tp);
    for (const { stage, rows, topics, partition } of session.tasks.advance(session.consumer.owned(), Date.now(), backlog, empty)) {
      this.metrics.timersFired(stage.index, rows.length);
      // Exactly-once: state that fired is work of the open transaction like a consumed row (its
      // partition revoked before the commit, the transaction must not commit the fired rows).
      if (session.tx) session.joinTransaction(topics.map((topic) => ({ topic, partition })));
      this.#runner.fire(emissions, stage, rows, partition);
    }
  }
}
