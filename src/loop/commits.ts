import { SerialQueue } from "../async.ts";
import { asFvError, FvError, recoveryOf } from "../errors.ts";
import type { CommitOffset } from "../kafka/port.ts";
import { PartitionSet } from "../kafka/topic-partition.ts";
import type { MetricsRecorder } from "../metrics/index.ts";
import type { Checkpointer, CheckpointStep } from "../state/checkpointer.ts";
import { addCounters, emptyCounters, type LoopCounters } from "./counters.ts";
import type { Logger } from "../logger.ts";
import type { Session } from "./session.ts";

export interface CommitsDeps {
  /** Loop-lived: its circuit breaker counts failures across sessions. */
  checkpointer: Checkpointer;
  counters: LoopCounters;
  metrics: MetricsRecorder;
  log: Logger;
  /** Where debug lines go, when wanted. */
  debug?: Logger;
}

/**
 * The loop's checkpoints, under either guarantee: the exactly-once transaction commit, and the
 * at-least-once commit chain (one at a time, in order, across sessions).
 */
export class Commits {
  readonly #deps: CommitsDeps;
  /** The session current when a chained commit runs (not when it was queued): it commits what that session has pending. */
  readonly #current: () => Session | undefined;
  readonly #chain = new SerialQueue();

  constructor(deps: CommitsDeps, current: () => Session | undefined) {
    this.#deps = deps;
    this.#current = current;
  }

  /** The checkpoint between batches; the rebalance hooks waiting for it go on once it is done. */
  async checkpoint(session: Session): Promise<void> {
    const waiters = session.rebalanceWaiters.splice(0);
    try {
      if (session.tx) await this.transaction(session);
      // State must be taken between batches, so a stateful pipeline waits for its checkpoint,
      // and so does a rebalance.
      else if (session.tasks.active || waiters.length) await this.atLeastOnce();
      // Not awaited: the next batch runs while the commit is in flight (commits are chained). Its
      // failure ends the session current when it fails.
      else void this.atLeastOnce().catch((error) => {
        const current = this.#current();
        if (current) current.backgroundError ??= asFvError(error);
      });
    } finally {
      // Committed or not (a failed one ends the session), the member may rejoin now.
      for (const resolve of waiters) resolve();
    }
  }

  /**
   * Exactly-once checkpoint: the interval's transaction gets the consumer offsets and commits.
   *   1. state: operator changelogs (dirty keys, covered input offsets) go into the transaction;
   *   2. offsets: the next offsets to read, with the group's generation (a member that left is fenced);
   *   3. transaction: commit — outputs, dead letters, state and offsets become visible together.
   */
  async transaction(session: Session): Promise<void> {
    const { counters, metrics, debug } = this.#deps;
    const tx = session.tx!;
    debug?.("debug", "commit transaction: start");
    const owned = new PartitionSet(session.consumer.owned());
    for (const tp of session.txPartitions) if (!owned.has(tp)) session.revokedMidTransaction = true;
    if (session.revokedMidTransaction) throw new FvError("KAFKA_FENCED", "partitions were revoked mid-transaction: aborting it and rejoining");
    // A rebalance since the transaction's first batch (even one that gave the same partitions
    // back, e.g. after a pause): another member may have processed these records meanwhile.
    // (The adapters hold a rejoin until this member has checkpointed, so this is the rare case of
    // a member that lost its membership, e.g. paused past its session timeout.)
    const generation = session.consumer.groupMetadata().generationId;
    const group = session.txGroup ?? session.consumer.groupMetadata();
    if (session.txPartitions.size > 0 && generation !== group.generationId) {
      throw new FvError("KAFKA_FENCED", `the group moved from generation ${group.generationId} to ${generation} during the transaction: aborting it and rejoining`);
    }
    const offsets = session.takeCommittable();
    await session.tasks.noteConsumed(offsets);
    const changelog = session.tasks.drainChangelog();
    if (!tx.inTransaction && offsets.length === 0 && changelog.length === 0) return;
    await this.#checkpoint([
      { name: "state", run: () => tx.send(changelog) },
      // On behalf of the member that read this work: the broker refuses it if the group moved on.
      { name: "offsets", run: () => tx.sendOffsets(group, offsets) },
      { name: "transaction", run: () => tx.commit() },
    ]);
    debug?.("debug", "commit transaction: done");
    metrics.transaction("commit");
    counters.transactionsCommitted++;
    addCounters(counters, session.uncommitted);
    session.uncommitted = emptyCounters();
    session.txPartitions.clear();
    session.txGroup = undefined;
    this.#committed(session, offsets);
  }

  /**
   * At-least-once checkpoint, serialized (one at a time). The outputs are already acknowledged;
   *   1. state: operator changelogs (dirty keys, covered input offsets) are written and acknowledged;
   *   2. offsets: then the offsets are committed — never ahead of the state they depend on.
   */
  atLeastOnce(): Promise<void> {
    return this.#chain.run(async () => {
      const session = this.#current();
      if (!session) return;
      const offsets = session.takeCommittable();
      await session.tasks.noteConsumed(offsets);
      const changelog = session.tasks.drainChangelog();
      if (offsets.length === 0 && changelog.length === 0) return;
      try {
        await this.#checkpoint([
          { name: "state", run: () => session.collector.send(changelog) },
          { name: "offsets", run: () => session.consumer.commit(offsets) },
        ]);
      } catch (error) {
        this.#commitFailed(session, offsets, error);
        return;
      }
      this.#committed(session, offsets);
    });
  }

  /** Runs a checkpoint's steps through the Checkpointer, with its metric events and counters. */
  async #checkpoint(steps: CheckpointStep[]): Promise<void> {
    const { checkpointer, counters, metrics } = this.#deps;
    const started = performance.now();
    try {
      await checkpointer.commit(steps);
    } catch (error) {
      metrics.checkpointFailed(asFvError(error).context.timeout ? "timeout" : "error");
      throw error;
    } finally {
      counters.checkpointFailures = checkpointer.counters.failures;
      counters.checkpointTimeouts = checkpointer.counters.timeouts;
    }
    metrics.checkpointCommitted(performance.now() - started);
  }

  #committed(session: Session, offsets: CommitOffset[]): void {
    session.markCommitted(offsets);
    this.#deps.counters.commits++;
  }

  #commitFailed(session: Session, offsets: CommitOffset[], error: unknown): void {
    const recovery = recoveryOf(error);
    // Put the offsets back unless newer ones arrived meanwhile; the next commit retries.
    if (recovery === "retryable") session.putBack(offsets);
    if (recovery !== "fenced" && recovery !== "retryable") throw error;
    // Fenced (the group moved on): the partitions' new owners restart from the last commit.
    this.#deps.log("warn", `offset commit skipped: ${(error as Error).message}`);
  }
}
