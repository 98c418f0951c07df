import { SerialQueue } from "../async.ts";
import { asFvError, FvError, recoveryOf } from "../errors.ts";
import type { CommitOffset, OutboundRecord, Written } from "../kafka/port.ts";
import type { SinkBatch, SinkSet } from "./sink-set.ts";
import { PartitionSet } from "../kafka/topic-partition.ts";
import type { MetricsRecorder } from "../metrics/index.ts";
import type { Checkpointer, CheckpointStep } from "../state/checkpointer.ts";
import { addCounters, type LoopCounters } from "./counters.ts";
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
  /**
   * Unsafe, for tests only: a transaction's commit takes the offsets pending when it runs, not when
   * it was queued, so it commits the offsets of later batches whose records wait for the next
   * transaction. A crash between the two commits then loses those records. The kill test must
   * catch this (`FV_UNSAFE_COMMIT_AHEAD=1`).
   */
  unsafeCommitAhead?: boolean;
  /** The loop's sinks (postgres, http): each checkpoint writes their rows, with the offsets they cover, before Kafka's offsets. */
  sinks?: SinkSet;
  /** Whether the loop is stopping: a sink that cannot be reached is then given up on (its rows are read again next run). */
  stopping?: () => boolean;
}

/**
 * The loop's checkpoints, under either guarantee: the exactly-once transaction commit, queued
 * behind the transaction's sends while the loop goes on, and the at-least-once commit chain (one
 * at a time, in order, also off the loop's path).
 */
export class Commits {
  readonly #deps: CommitsDeps;
  /** The session current when a chained commit fails: its poll loop throws the failure. */
  readonly #current: () => Session | undefined;
  readonly #chain = new SerialQueue();
  /** At-least-once checkpoints queued or running in the chain. */
  #chained = 0;

  constructor(deps: CommitsDeps, current: () => Session | undefined) {
    this.#deps = deps;
    this.#current = current;
  }

  /**
   * The checkpoint between batches, not awaited by the loop beyond taking its snapshot; a rebalance
   * hook waiting for it makes it a flush (everything committed before the member rejoins), and the
   * hooks go on once it is done. Returns false when it did not start (a commit still runs).
   */
  async checkpoint(session: Session): Promise<boolean> {
    const waiters = session.rebalanceWaiters.splice(0);
    const flush = waiters.length > 0;
    try {
      if (session.tx) return await this.transaction(session, { flush });
      // At most one at-least-once checkpoint is written while the loop goes on: when the next is
      // due and the last is still being written, the loop waits for it. Without that, a loop that
      // reads faster than its changelog is written (a stateful stage creating a key per row) kept
      // the CPU, its checkpoints queued without end, and each ran past its deadline.
      if (this.#chained > 0) await this.#chain.run(async () => {});
      if (session.checkpointFailed) throw session.backgroundError ?? new FvError("KAFKA_RETRYABLE", "the last checkpoint failed");
      await this.atLeastOnce(session, { flush });
      return true;
    } finally {
      // Committed or not (a failed one ends the session), the member may rejoin now.
      for (const resolve of waiters) resolve();
    }
  }

  /**
   * Exactly-once checkpoint: the open transaction is closed and its commit queued behind its sends.
   * What it commits is taken now, between batches, so it matches the records queued before it:
   *   1. state: operator changelogs (dirty keys, covered input offsets) go into the transaction;
   *   2. offsets: the next offsets to read, on behalf of the member that read the work (a member
   *      that has left is fenced);
   *   3. transaction: commit — outputs, dead letters, state and offsets become visible together.
   * The loop goes on meanwhile; batches it processes fill the next transaction, whose records go
   * out on the loop's other transactional producer while this commit runs (with one producer, they
   * wait in the queue until it is done). While a commit runs no other is queued: the next
   * transaction grows instead. With `flush`, waits for every queued request and this commit.
   */
  async transaction(session: Session, options: { flush?: boolean } = {}): Promise<boolean> {
    const { counters, metrics, debug, unsafeCommitAhead } = this.#deps;
    const collector = session.collector;
    if (options.flush) await collector.settled();
    else if (collector.committing) return false;
    const work = session.open;
    const owned = new PartitionSet(session.consumer.owned());
    for (const tp of work.partitions) if (!owned.has(tp)) session.revokedMidTransaction = true;
    if (session.revokedMidTransaction) throw new FvError("KAFKA_FENCED", "partitions were revoked mid-transaction: aborting it and rejoining");
    // A rebalance since the transaction's first batch (even one that gave the same partitions
    // back, e.g. after a pause): another member may have processed these records meanwhile.
    // (The adapters hold a rejoin until this member has checkpointed, so this is the rare case of
    // a member that lost its membership, e.g. paused past its session timeout.)
    const generation = session.consumer.groupMetadata().generationId;
    const group = work.group ?? session.consumer.groupMetadata();
    if (work.partitions.size > 0 && generation !== group.generationId) {
      throw new FvError("KAFKA_FENCED", `the group moved from generation ${group.generationId} to ${generation} during the transaction: aborting it and rejoining`);
    }
    const offsets = unsafeCommitAhead ? [] : session.takeCommittable();
    await session.tasks.noteConsumed(offsets);
    const changelog = session.tasks.drainChangelog();
    const sinkRows = this.#deps.sinks?.take();
    if (work.records === 0 && offsets.length === 0 && changelog.length === 0 && !sinkRows?.size && !unsafeCommitAhead) return true;
    session.closeTransaction();
    debug?.("debug", `commit transaction: queued (${work.records} records, ${offsets.length} offsets)`);
    // On the producer whose transaction took this work's sends (two take turns: RecordCollector).
    const committed = collector.commit(async (tx) => {
      const sent = unsafeCommitAhead ? session.takeCommittable() : offsets;
      let written: Written | void;
      await this.#checkpoint([
        // The sinks first (their own transaction, with these offsets): if the Kafka commit then
        // fails, a stateless stage skips what the sink holds, and a stateful one writes the same
        // upserts again.
        ...this.#sinkStep(session, sinkRows, sent, (records) => tx.send(records).then(() => {}), (leftOut) => {
          // Rows of a partition that moved while the sink was waited for were left out: the
          // transaction must not commit their offsets (the group moved on, so it is refused anyway).
          if (leftOut.size > 0) throw new FvError("KAFKA_FENCED", "partitions moved while a sink was waited for: aborting the transaction and rejoining");
        }),
        { name: "state", run: async () => void (written = await tx.send(changelog)) },
        // On behalf of the member that read this work: the broker refuses it if the group moved on.
        { name: "offsets", run: () => tx.sendOffsets(group, sent) },
        { name: "transaction", run: () => tx.commit() },
      ]);
      debug?.("debug", "commit transaction: done");
      metrics.transaction("commit");
      counters.transactionsCommitted++;
      addCounters(counters, work.counters);
      session.transactionCommitted(work);
      // Committed: the local stores may take the changes now (never before: an aborted
      // transaction's state never reaches them).
      session.tasks.persist(changelog, written);
      this.#committed(session, sent);
      await this.#deps.sinks?.committed();
    });
    // Not awaited: a failure stops the collector's queue and reaches the poll loop (backgroundError).
    if (options.flush) await committed;
    else committed.catch(() => {});
    return true;
  }

  /**
   * At-least-once checkpoint. The outputs are acknowledged first (the last batch's send may still
   * be in flight); what is committed is taken then, between batches, and written off the loop's path, one checkpoint at a time, in order:
   *   1. sinks: the rows kept for them since the last checkpoint are written (they are outputs, but
   *      held until now: state that covers their records must not be durable before they are, or a
   *      crash in between loses them: the restore would skip those records as done);
   *   2. state: operator changelogs (dirty keys, covered input offsets) are written and acknowledged;
   *   3. offsets: then the offsets are committed — never ahead of the state they depend on.
   * With `flush`, waits for it and every checkpoint before it.
   */
  async atLeastOnce(session: Session, options: { flush?: boolean } = {}): Promise<void> {
    // The batch send in flight first: its offsets are taken with the others, and the state drained
    // below covers its rows, so it must not be written before they are acknowledged.
    await session.settleSends();
    const taken = session.takeCommittable();
    await session.tasks.noteConsumed(taken);
    const changelog = session.tasks.drainChangelog();
    const sinkRows = this.#deps.sinks?.take();
    this.#chained++;
    const written = this.#chain.run(async () => {
      // A checkpoint before this one failed: its records were not committed, so nothing after
      // them may be (its offsets would cover them). The session ends on that failure.
      if (session.checkpointFailed) return;
      // A partition revoked since (a member that lost its membership: a rebalance hook flushes
      // first) is left to its new owner.
      const owned = new PartitionSet(session.consumer.owned());
      const offsets = taken.filter((o) => owned.has(o));
      if (offsets.length === 0 && changelog.length === 0 && !sinkRows?.size) return;
      let written: Written | void;
      // Offsets whose rows a sink left out (their partition moved while it was waited for) are not committed.
      let committing = offsets;
      try {
        await this.#checkpoint([
          // The rows into the sinks, with the offsets they cover (Postgres: in one SQL transaction), then the state, then Kafka's offsets.
          ...this.#sinkStep(session, sinkRows, offsets, (records) => session.collector.send(records).then(() => {}), (leftOut) => {
            if (leftOut.size === 0) return;
            // The state drained for this checkpoint covers those rows' records too: written, the
            // partition's next owner would restore it and skip them. It is given up with the
            // session, which starts again from the last commit (the state as it was then).
            if (changelog.length > 0) throw new FvError("KAFKA_RETRYABLE", "partitions moved while a sink was waited for: the checkpoint is given up and the session starts again from the last commit");
            committing = offsets.filter((o) => !leftOut.has(o));
          }),
          { name: "state", run: async () => void (written = await session.collector.send(changelog)) },
          { name: "offsets", run: () => session.consumer.commit(committing) },
        ]);
      } catch (error) {
        // Rows taken for a sink cannot be put back either: the offsets must not go without them.
        try {
          this.#commitFailed(session, offsets, changelog.length > 0 || (sinkRows?.size ?? 0) > 0, error);
        } catch (fatal) {
          session.checkpointFailed = true;
          throw fatal;
        }
        return;
      }
      session.tasks.persist(changelog, written);
      this.#committed(session, committing);
      await this.#deps.sinks?.committed();
    }).finally(() => this.#chained--);
    if (options.flush) return await written;
    // Its failure ends the session current when it fails (not a later one: it starts from the last commit anyway).
    written.catch((error) => {
      if (this.#current() === session) session.backgroundError ??= asFvError(error);
    });
  }

  /** The sinks' step of a checkpoint, when the loop has sinks: no deadline (an unreachable sink is waited for, until a stop). */
  #sinkStep(session: Session, rows: SinkBatch | undefined, offsets: CommitOffset[], deadLetter: (records: OutboundRecord[]) => Promise<void>, leftOut: (partitions: PartitionSet) => void): CheckpointStep[] {
    const { sinks, stopping } = this.#deps;
    if (!sinks || !rows) return [];
    const owned = () => new PartitionSet(session.consumer.owned());
    return [{ name: "sinks", deadlineMs: Infinity, run: async () => leftOut(await sinks.write(rows, offsets, deadLetter, stopping ?? (() => false), owned)) }];
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

  #commitFailed(session: Session, offsets: CommitOffset[], hadState: boolean, error: unknown): void {
    // A sink found another member's claim on a partition: this member may still be assigned it
    // (a zombie let back in), so skipping to the next checkpoint would commit past these rows.
    // The session ends; the next one starts from the last commit and claims again.
    if (error instanceof FvError && error.code === "SINK_FENCED") throw error;
    const recovery = recoveryOf(error);
    // State changes already drained cannot be put back: a session restart reads the state again
    // from the changelog, consistent with the last committed offsets.
    if (hadState && recovery === "retryable") throw error;
    // Put the offsets back unless newer ones arrived meanwhile; the next commit retries.
    if (recovery === "retryable") session.putBack(offsets);
    if (recovery !== "fenced" && recovery !== "retryable") throw error;
    // Fenced (the group moved on): the partitions' new owners restart from the last commit.
    this.#deps.log("warn", `offset commit skipped: ${(error as Error).message}`);
  }
}
