import { deadline } from "../async.ts";
import type { CompiledStage } from "../topology/compile-topology.ts";
import type { FvError } from "../errors.ts";
import type { Admin, CommitOffset, GroupConsumer, GroupMetadata, InboundRecord, KafkaClient, OutboundRecord, Producer, TopicPartition, TransactionalProducer } from "../kafka/port.ts";
import { PartitionMap, PartitionSet, partitionText } from "../kafka/topic-partition.ts";
import type { MetricsRecorder } from "../metrics/index.ts";
import { emptyCounters, type LoopCounters } from "./counters.ts";
import type { Logger } from "../logger.ts";
import { OperatorTasks } from "./operator-tasks.ts";
import { LocalStateStores } from "../state/local-store.ts";
import { StandbyTasks } from "./standby-tasks.ts";
import { clientIdOf, type LoopPlan, memberNameOf, stateTopicOf, transactionalIdOf } from "./plan.ts";
import type { DepartedOwners } from "./departed-owners.ts";
import { RecordCollector } from "./record-collector.ts";
import { type UpstreamHop, UpstreamTracker } from "./repartition.ts";
import type { LoopTimings } from "./timings.ts";

/** What opening a session needs from its loop. */
export interface SessionDeps {
  plan: LoopPlan;
  client: KafkaClient;
  stages: readonly CompiledStage[];
  /** Every topic the loop reads (the stages' inputs and the hops' repartition topics). */
  topics: string[];
  upstreamHops: readonly UpstreamHop[];
  /** The loop's counters: the operator tasks keep late rows, restore figures and state size there. */
  counters: LoopCounters;
  /** Who owned which partition (the loop's, kept across sessions). */
  departed?: DepartedOwners;
  metrics: MetricsRecorder;
  log: Logger;
  timings: LoopTimings;
  /** Told each assignment change, after the session's own bookkeeping (the loop's sinks forget what moved). */
  onAssignment?: (assigned: TopicPartition[], revoked: TopicPartition[]) => void;
}

const TIMED_OUT = Symbol("timed out");
/** How often standby copies read their changelog's tail. */
const STANDBY_INTERVAL_MS = 500;

/** The local state stores' directory: STREAM_STATE_DIR, else `.fv-state/<pipeline>` (under the working directory); undefined when "off". */
export function stateDirOf(setting: string | undefined, pipeline: string): string | undefined {
  if (setting === "off") return undefined;
  return setting ?? `.fv-state/${pipeline}`;
}

/** Exactly-once: one transaction's work, from its first batch until its commit is done. */
export interface TransactionWork {
  /** Partitions with work in it (records read, state changed, rows fired). */
  readonly partitions: PartitionSet;
  /** Who this member was in the group when its first batch was read: the offsets are sent on its behalf. */
  group: GroupMetadata | undefined;
  /** Counters of its batches, added to the loop's once it commits (an aborted batch is counted when redone). */
  readonly counters: LoopCounters;
  /** Records queued into it (outputs, dead letters, hop rows and watermarks). */
  records: number;
}

const newTransactionWork = (): TransactionWork => ({ partitions: new PartitionSet(), group: undefined, counters: emptyCounters(), records: 0 });

/**
 * One join of the group, until stop or a recoverable failure: its clients, and everything that
 * lives as long as they do (offsets, positions, the open transaction). A new session is a new
 * object: nothing of the last one is carried over by hand.
 */
export class Session {
  readonly consumer: GroupConsumer;
  readonly producer: Producer | undefined;
  /** Exactly-once: the first of `txs` (undefined: at-least-once). */
  readonly tx: TransactionalProducer | undefined;
  /** Exactly-once: the transactional producers, taking turns transaction by transaction (RecordCollector); empty at-least-once. */
  readonly txs: readonly TransactionalProducer[];
  readonly admin: Admin;
  /** Stateful operators, restored per partition from the state topic. */
  readonly tasks: OperatorTasks;
  /** Standby copies of other members' task states (STREAM_STANDBY_REPLICAS), when on. */
  readonly standbys: StandbyTasks | undefined;
  readonly collector: RecordCollector;
  /** Upstream side of repartition hops: how far each input partition got, and what was announced. */
  readonly upstream: UpstreamTracker;
  /** Next offset to commit per partition, for records already acknowledged downstream. */
  readonly pending = new PartitionMap<CommitOffset>();
  /** Last committed offset per owned partition: a commit never moves an offset back. */
  readonly committed = new PartitionMap<bigint>();
  /** Next offset to process (for lag). */
  readonly positions = new PartitionMap<bigint>();
  /** Committed offsets of partitions not read yet this session (see Watchdog.positionOf). */
  readonly startOffsets = new PartitionMap<bigint>();
  /** Exactly-once: the work of the transaction being filled (it commits at the next checkpoint). */
  open: TransactionWork = newTransactionWork();
  /** Exactly-once: transactions whose commit is queued or running, oldest first. */
  readonly committing: TransactionWork[] = [];
  /** Exactly-once: a partition with work in an uncommitted transaction was revoked before it committed. */
  revokedMidTransaction = false;
  /**
   * Partitions revoked while the batch in hand was being processed (a rebalance can land during
   * any await of a batch: a state restore, a compute step, the send). Their remaining records are
   * not processed and their offsets never become pending: the new owner, or this member when it
   * gets them back, reads them again from the last checkpoint.
   */
  revokedDuringBatch: PartitionSet | undefined;
  /** A rebalance started: checkpoint at the next batch boundary. */
  checkpointNow = false;
  /** Between the start of a rebalance and the assignment that ends it (state reads are marked stale). */
  rebalancing = false;
  /** Rebalance hooks waiting for the next checkpoint: the adapter rejoins once they resolve. */
  readonly rebalanceWaiters: Array<() => void> = [];
  /** Whether the poll loop runs (only then can it answer a rebalance hook). */
  polling = false;
  /** Batches processed (a failed session that made progress resets the restart count). */
  batches = 0;
  /** An at-least-once checkpoint failed (and was not put back): no later one may commit. */
  checkpointFailed = false;
  /** A commit or a transactional send that was not awaited failed: the poll loop throws it. */
  backgroundError: FvError | undefined;
  /** Aborted when the session closes: work it started in the background stops. */
  readonly #closing = new AbortController();

  constructor(deps: SessionDeps) {
    const { plan, client, metrics, log } = deps;
    const { settings } = plan;
    const clientId = clientIdOf(plan);
    const admin = (this.admin = client.admin({ clientId: `${clientId}-state` }));
    const stateDir = stateDirOf(settings.stateDir, plan.pipeline);
    const stores = stateDir && deps.stages.some((s) => s.operator) ? new LocalStateStores(stateDir, log) : undefined;
    const stateTopic = stateTopicOf(plan.pipeline);
    const memberName = memberNameOf(plan);
    this.tasks = new OperatorTasks(deps.stages, admin, {
      stateTopic,
      idlePartitionMs: settings.idlePartitionMs,
      maxStateKeys: settings.stateMaxKeys,
      cacheKeys: settings.stateCacheKeys,
      pipeline: plan.pipeline,
      log,
      ...(stores ? { stores } : {}),
      beforeOpen: (stage, partition) => this.standbys?.release(stage, partition) ?? Promise.resolve(),
      transactional: settings.exactlyOnce,
      // Restore reads the changelog only once the input's committed offsets are stable, and
      // checks that the state it read covers them (see OperatorTasks.#load).
      committedOffsets: (topics, partition) => admin.committedOffsets(plan.groupId, topics, { stable: true, partitions: [partition] }),
    }, deps.counters);
    this.tasks.onStoreError = (error) => void (this.backgroundError ??= error);
    if (stores && settings.standbyReplicas > 0) {
      if (admin.groupMembers) {
        this.standbys = new StandbyTasks(deps.stages, admin, stores, {
          groupId: plan.groupId,
          name: memberName,
          replicas: settings.standbyReplicas,
          stateTopic,
          identityOf: (stage, partition) => this.tasks.storeIdentity(stage, partition),
          intervalMs: STANDBY_INTERVAL_MS,
          transactional: settings.exactlyOnce,
          log,
          onFailure: (error) => void (this.backgroundError ??= error),
        });
        this.standbys.start();
      } else {
        log("warn", `STREAM_STANDBY_REPLICAS=${settings.standbyReplicas} is ignored: the ${plan.kafkaClient} Kafka client cannot tell the group's members (standbys need the pure-JS client, STREAM_KAFKA_CLIENT=platformatic)`);
      }
    }
    this.upstream = new UpstreamTracker(deps.upstreamHops, settings.idlePartitionMs);
    for (const stage of deps.stages) {
      if (!stage.operator) continue;
      const hop = plan.hops?.[stage.index];
      if (hop) {
        this.tasks.setStageTopics(stage, [hop.topic]);
        this.tasks.setUpstream(stage, hop.upstream);
      } else {
        this.tasks.setStageTopics(stage, stage.def.inputs.map((d) => plan.bindings[d]!.topic));
      }
    }
    // Stable transactional ids: a restarted loop with the same instance id fences its predecessor's producers.
    this.txs = settings.exactlyOnce
      ? Array.from({ length: settings.transactionProducers }, (_, turn) => client.transactionalProducer({ clientId, transactionalId: transactionalIdOf(plan.pipeline, memberName, turn), log }))
      : [];
    this.tx = this.txs[0];
    this.producer = settings.exactlyOnce ? undefined : client.producer({ clientId });
    this.consumer = client.consumer({
      groupId: plan.groupId,
      clientId,
      topics: deps.topics,
      offsetReset: settings.offsetReset,
      maxBuffered: settings.batchSize * 4,
      sessionTimeoutMs: settings.sessionTimeoutMs,
      stableOffsets: settings.exactlyOnce,
      ...(settings.instanceId ? { groupInstanceId: `${settings.instanceId}-${plan.consumerIndex}` } : {}),
      log: (level, message) => log(level, message),
      listener: {
        // How far the local state of each partition goes: the assignor sends a moving partition there.
        warmPartitions: () => (stores ? stores.warm(plan.pipeline, stateTopic) : new Map()),
        // A rebalance started: checkpoint at the next batch boundary (state, offsets, and under
        // exactly-once the open transaction), while this generation still holds. The adapter
        // rejoins once this resolves, so no work of the old generation stays open.
        onRebalance: () => {
          // Before the first poll (the join inside start()), there is nothing to commit yet.
          if (!this.polling) return;
          this.rebalancing = true;
          return new Promise<void>((resolve) => {
            this.rebalanceWaiters.push(resolve);
            this.checkpointNow = true;
          });
        },
        onAssignment: ({ assigned, revoked, owned }) => {
          this.rebalancing = false;
          this.#assigned(assigned, revoked);
          deps.onAssignment?.(assigned, revoked);
          // Stateful tasks of partitions that moved away are forgotten; their new owner restores them.
          this.tasks.release(owned, revoked);
          this.standbys?.assigned(owned.map((tp) => tp.partition));
          // Restore the state of new partitions now: the process is not ready until it is back.
          this.tasks.prefetch(assigned);
          // A previous owner killed mid-transaction is fenced, rather than waited for (exactly-once).
          void deps.departed?.assigned(assigned, this.admin, client, settings.exactlyOnce, this.#closing.signal);
          metrics.rebalanced();
          log("info", "assignment changed", { owned: owned.map(partitionText), assigned: assigned.length, revoked: revoked.length });
        },
      },
    });
    this.collector = new RecordCollector({ producer: this.producer, txs: this.txs }, log, {
      retries: deps.timings.sendRetries,
      retryPauseMs: deps.timings.sendRetryPauseMs,
      // A commit slower than the batches: up to this many records wait for the next transaction.
      maxQueuedRecords: settings.batchSize * 8,
      onFailure: (failure) => void (this.backgroundError ??= failure),
    });
  }

  #assigned(assigned: TopicPartition[], revoked: TopicPartition[]): void {
    // Revoked partitions: their in-flight work is dropped (the new owner reads it again from the
    // last commit) and nothing more is committed for them.
    for (const tp of revoked) {
      // Its outputs are in the open transaction but its offsets can no longer join them:
      // the transaction must abort, never commit outputs without their offsets.
      if (this.open.partitions.has(tp) || this.committing.some((work) => work.partitions.has(tp))) this.revokedMidTransaction = true;
      this.revokedDuringBatch?.add(tp);
      this.#sendingRevoked?.add(tp);
      this.pending.delete(tp);
      this.committed.delete(tp);
      this.positions.delete(tp);
      this.startOffsets.delete(tp);
      this.upstream.forget(tp);
    }
    for (const tp of assigned) {
      this.committed.delete(tp);
      this.startOffsets.delete(tp); // looked up again: it may have moved while another member owned it
    }
  }

  /** Exactly-once: these partitions have work in the open transaction (the first ones fix who the member is). */
  joinTransaction(partitions: Iterable<TopicPartition>): void {
    // A batch's records come in runs of one partition: each run is added once.
    let last: TopicPartition | undefined;
    for (const tp of partitions) {
      if (last && last.partition === tp.partition && last.topic === tp.topic) continue;
      // Who the member is, taken with the first partition, not before: an empty batch (timers
      // advancing while a rebalance is under way) took it in the old generation, and the next
      // transaction, all of whose work was done in the new one, was refused as fenced. In a soak
      // two members did that to each other at every rejoin: a rebalance a second for minutes.
      this.open.group ??= this.consumer.groupMetadata();
      this.open.partitions.add(tp);
      last = tp;
    }
  }

  /**
   * At-least-once: the last batch's send, still waiting for its acknowledgement, and what follows
   * it (its offsets marked processed). The loop reads and transforms the next batch meanwhile.
   */
  #sending: Promise<void> | undefined;
  /** The partitions of the batch whose send is in flight revoked since the batch began: none of their offsets is marked at its ack. */
  #sendingRevoked: PartitionSet | undefined;

  /** At-least-once: a batch's send is in flight. */
  get sending(): boolean {
    return this.#sending !== undefined;
  }

  /**
   * At-least-once: sends a batch's records without waiting for them; `acknowledged` runs once they
   * are (its offsets may be committed from then on). One send is in flight at a time: this waits
   * for the one before, so sends go out in order, and a failed one is retried (or fails the
   * session) before anything after it goes out. `revoked` is the batch's revoked set: partitions
   * revoked while the send is in flight are added to it, as during the batch.
   */
  async emitInBackground(records: OutboundRecord[], revoked: PartitionSet, acknowledged: () => void): Promise<void> {
    await this.settleSends();
    this.#sendingRevoked = revoked;
    const sending: Promise<void> = this.collector.send(records).then(() => {
      acknowledged();
      if (this.#sending === sending) this.#sendingRevoked = this.#sending = undefined;
    });
    sending.catch(() => {}); // its failure is thrown by the next settleSends
    this.#sending = sending;
  }

  /**
   * At-least-once: waits for the batch send in flight, if any; throws its failure. Before a
   * checkpoint takes offsets and state, and before watermark records that cover its rows.
   */
  async settleSends(): Promise<void> {
    const sending = this.#sending;
    if (!sending) return;
    await sending;
  }

  /**
   * Hands records to the collector: acknowledged before this resolves (at-least-once), or queued
   * into the open transaction (exactly-once).
   */
  async emit(records: OutboundRecord[]): Promise<void> {
    if (this.tx) this.open.records += records.length;
    await this.collector.send(records);
  }

  /** Exactly-once: the open transaction is closed for commit; later batches fill a new one. */
  closeTransaction(): TransactionWork {
    const work = this.open;
    this.committing.push(work);
    this.open = newTransactionWork();
    return work;
  }

  /** Exactly-once: this transaction's commit is done. */
  transactionCommitted(work: TransactionWork): void {
    const index = this.committing.indexOf(work);
    if (index >= 0) this.committing.splice(index, 1);
  }

  /** The batch's records are processed and acknowledged (or in the transaction): their offsets may be committed. */
  markProcessed(records: readonly InboundRecord[], revoked: PartitionSet): void {
    // A batch holds long runs of one partition's records: the maps are touched once per run,
    // with the run's highest offset, not once per record.
    let run: InboundRecord | undefined;
    let highest = -1n;
    for (const record of records) {
      if (run && (record.partition !== run.partition || record.topic !== run.topic)) {
        this.#advance(run, highest + 1n, revoked);
        highest = -1n;
      }
      run = record;
      if (record.offset > highest) highest = record.offset;
    }
    if (run) this.#advance(run, highest + 1n, revoked);
  }

  #advance(tp: TopicPartition, next: bigint, revoked: PartitionSet): void {
    if (revoked.has(tp)) return;
    const pending = this.pending.get(tp);
    if (!pending || pending.offset < next) this.pending.set(tp, { topic: tp.topic, partition: tp.partition, offset: next });
    if ((this.positions.get(tp) ?? -1n) < next) this.positions.set(tp, next);
  }

  /** Takes the pending offsets worth committing: owned partitions, moving forward. */
  takeCommittable(): CommitOffset[] {
    if (this.pending.size === 0) return [];
    const owned = new PartitionSet(this.consumer.owned());
    const offsets: CommitOffset[] = [];
    for (const [tp, o] of this.pending.entries()) {
      const committed = this.committed.get(tp);
      if (owned.has(tp) && (committed === undefined || o.offset > committed)) offsets.push(o);
    }
    this.pending.clear();
    return offsets;
  }

  /** A commit that failed retryably: its offsets go back, unless newer ones arrived meanwhile. */
  putBack(offsets: CommitOffset[]): void {
    for (const o of offsets) if (!this.pending.has(o)) this.pending.set(o, o);
  }

  markCommitted(offsets: CommitOffset[]): void {
    for (const o of offsets) this.committed.set(o, o.offset);
  }

  /** Lets every rebalance hook waiting for a checkpoint go on (the member may rejoin). */
  releaseRebalance(): void {
    for (const resolve of this.rebalanceWaiters.splice(0)) resolve();
  }

  /**
   * Closes the clients, each within `timeoutMs`: a client that cannot finish closing
   * (librdkafka's consumer close waits for a broker that is down) must not wedge the loop, which
   * then neither rejoins nor stops. A client left closing is abandoned; the next session has its own.
   */
  async close(timeoutMs: number, log: Logger): Promise<void> {
    this.#closing.abort();
    const bounded = async (what: string, close: (() => Promise<void>) | undefined) => {
      if (!close) return;
      try {
        await deadline(close(), timeoutMs, () => TIMED_OUT);
      } catch (error) {
        if (error === TIMED_OUT) log("warn", `closing the ${what} took longer than ${timeoutMs} ms: going on without it`);
        else log("warn", `closing the ${what}: ${(error as Error).message}`);
      }
    };
    await bounded("standby replicas", this.standbys && (() => this.standbys!.close()));
    await bounded("local state stores", () => this.tasks.close());
    await bounded("admin client", () => this.admin.close());
    await bounded("consumer", () => this.consumer.close());
    await bounded("producer", this.producer && (() => this.producer!.close()));
    await Promise.all(this.txs.map((tx) => bounded("transactional producer", () => tx.close())));
  }
}
