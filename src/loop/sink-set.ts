/**
 * The sinks of one consumer loop: the rows each stage made for them since the last checkpoint,
 * and, for a stateless stage into Postgres, how far the database says each input partition is
 * written (records below are skipped: the rows are in the table already).
 */
import { backoffMs, delay } from "../async.ts";
import { asFvError, FvError } from "../errors.ts";
import type { CommitOffset, InboundRecord, OutboundRecord, TopicPartition } from "../kafka/port.ts";
import { PartitionSet } from "../kafka/topic-partition.ts";
import type { Logger } from "../logger.ts";
import { FileStateStore } from "../ops/file-state-store.ts";
import { nodeFiles } from "../state/node-files.ts";
import type { CompiledStage } from "../topology/compile-topology.ts";
import type { BuildMetrics, TopicBinding } from "../control/types.ts";
import { type SinkConfig, withEnvironment } from "../sinks/config.ts";
import { HttpSink } from "../sinks/http-sink.ts";
import { PostgresSink } from "../sinks/postgres-sink.ts";
import type { Sink, SinkRow } from "../sinks/sink.ts";

export interface SinkSetOptions {
  pipeline: string;
  bindings: Record<string, TopicBinding>;
  /** Where the http sinks keep their windows of delivered ids (the state folder). */
  stateDir: string;
  env: Record<string, string | undefined>;
  /**
   * STREAM_EXACTLY_ONCE: the sink commits before the Kafka transaction, which may then abort and
   * take the stage's dead letters with it; so no record is skipped (the upserts are written again).
   */
  exactlyOnce: boolean;
  log: Logger;
  /**
   * Repartition hops by stage index: a stage behind one makes its rows from the hop topic's
   * records (and fires its windows per hop partition), so that is the input its sink follows.
   */
  hops?: Record<number, { topic: string }>;
  /** For tests: the sink of a dataset, instead of the real one its config names. */
  createSink?: (config: SinkConfig, dataset: string) => Sink;
  /** Backoff while a sink is unreachable (ms, doubling up to `maxMs`). */
  retry?: { firstMs: number; maxMs: number };
}

interface Entry {
  sink: Sink;
  /** Input topics of the stage that writes it (its repartition topic, behind a hop). */
  inputs: Set<string>;
  /** The stage keeps no state: records the sink holds already are skipped (the sink's offsets are the truth). */
  skipWritten: boolean;
}

/** The counters a SinkSet keeps (the loop's). */
export type SinkCounters = Pick<BuildMetrics, "poison" | "poisonByReason" | "deadLettered" | "sinkWritten" | "sinkDuplicates" | "sinksWaiting">;

/** Rows taken for one checkpoint, by sink. */
export type SinkBatch = Map<string, SinkRow[]>;

/**
 * Whether `row` belongs to a partition `test` accepts: its source record's topic and partition,
 * or, for a row a timer fired (no source record), the partition of any of the sink's inputs.
 */
function rowOf(entry: Entry, row: SinkRow, test: (tp: TopicPartition) => boolean): boolean {
  if (row.source) return test(row.source);
  for (const topic of entry.inputs) if (test({ topic, partition: row.partition })) return true;
  return false;
}

/** The input partitions a write stands for: its offsets', its rows' sources', and for a row a timer fired, its partition of each owned input. */
function inputsOf(entry: Entry, rows: readonly SinkRow[], offsets: readonly CommitOffset[], mine: { has(tp: TopicPartition): boolean }): TopicPartition[] {
  const inputs = new PartitionSet(offsets);
  for (const row of rows) {
    if (row.source) inputs.add(row.source);
    else for (const topic of entry.inputs) if (mine.has({ topic, partition: row.partition })) inputs.add({ topic, partition: row.partition });
  }
  return [...inputs];
}

export class SinkSet {
  readonly #entries = new Map<string, Entry>();
  readonly #options: SinkSetOptions;
  #buffer: SinkBatch = new Map();
  /**
   * Per sink, "topic:partition" → the next offset it has not written, as its own table says; read
   * before the first batch that needs it (batches run one at a time) and again after a rebalance.
   */
  #known = new Map<string, Map<string, bigint>>();
  /** The loop's counters: sinkWritten, sinkDuplicates, sinksWaiting (the build record; `/readyz` reads the last), poison. */
  readonly #counters: SinkCounters;
  /** Closed with the loop: a write still waiting for its sink gives up. */
  #closed = false;

  constructor(stages: readonly CompiledStage[], options: SinkSetOptions, counters: SinkCounters) {
    this.#options = options;
    this.#counters = counters;
    counters.sinkWritten ??= 0;
    counters.sinkDuplicates ??= 0;
    counters.sinksWaiting ??= {};
    for (const stage of stages) {
      const dataset = stage.def.output;
      const binding = options.bindings[dataset]!;
      if (binding.sink === "kafka" || !binding.sinkConfig) continue;
      const config = withEnvironment(binding.sinkConfig, dataset, options.env);
      const sink: Sink = options.createSink?.(config, dataset) ?? (config.kind === "postgres"
        ? new PostgresSink(config, { pipeline: options.pipeline, dataset, log: options.log })
        : new HttpSink(config, { pipeline: options.pipeline, dataset, log: options.log, store: new FileStateStore(`${options.stateDir}/sinks/${dataset}`, nodeFiles()) }));
      const hop = options.hops?.[stage.index];
      const inputs = new Set(hop ? [hop.topic] : stage.def.inputs.map((d) => options.bindings[d]!.topic));
      const previous = this.#entries.get(dataset);
      if (previous) {
        // Two stages into one sink: one sink, the inputs of both, skipping only when both are stateless.
        for (const topic of inputs) previous.inputs.add(topic);
        previous.skipWritten &&= !stage.operator;
        void sink.close();
        continue;
      }
      this.#entries.set(dataset, { sink, inputs, skipWritten: !stage.operator && !options.exactlyOnce && sink.positions !== undefined });
    }
  }

  get size(): number {
    return this.#entries.size;
  }

  /**
   * A new session (a join of the group): rows buffered by the last one were never committed and
   * its offsets go back with them; the sinks' positions are read again (another member may have
   * written meanwhile), and http sinks read their windows again.
   */
  reset(): void {
    this.#buffer = new Map();
    this.#known = new Map();
    for (const { sink } of this.#entries.values()) {
      if (sink instanceof HttpSink) sink.forgetAll();
      if (sink instanceof PostgresSink) sink.releaseAll();
    }
  }

  /**
   * Partitions moved: rows buffered for revoked ones are dropped (their offsets are, and the new
   * owner reads them again); the positions and Deduplicator windows of moved partitions are read
   * again before their next row (another member may have written meanwhile).
   */
  assigned(assigned: readonly TopicPartition[], revoked: readonly TopicPartition[]): void {
    for (const [dataset, entry] of this.#entries) {
      const moved = [...assigned, ...revoked].filter((tp) => entry.inputs.has(tp.topic));
      if (moved.length === 0) continue;
      this.#known.delete(dataset);
      if (entry.sink instanceof HttpSink) for (const { partition } of moved) entry.sink.forget(partition);
      if (entry.sink instanceof PostgresSink) entry.sink.release(moved);
      const gone = new PartitionSet(revoked);
      const rows = this.#buffer.get(dataset);
      if (rows && gone.size > 0) this.#buffer.set(dataset, rows.filter((row) => !rowOf(entry, row, (tp) => gone.has(tp))));
    }
  }

  /**
   * Before a batch: a Postgres sink claims the batch's input partitions it has not claimed since
   * they were assigned (so a member paused from here on is fenced), and then the positions of the
   * sinks the batch's records may be skipped for are read.
   */
  async prepare(records: readonly InboundRecord[], stopping: () => boolean): Promise<void> {
    for (const [dataset, entry] of this.#entries) {
      if (!(entry.sink instanceof PostgresSink)) continue;
      const sink = entry.sink;
      const inputs = new PartitionSet();
      for (const r of records) if (entry.inputs.has(r.topic)) inputs.add(r);
      if (inputs.size > 0) await this.#waiting(dataset, () => sink.claim([...inputs]), stopping);
    }
    for (const [dataset, entry] of this.#entries) {
      if (!entry.skipWritten || this.#known.has(dataset) || !records.some((r) => entry.inputs.has(r.topic))) continue;
      this.#known.set(dataset, await this.#waiting(dataset, () => entry.sink.positions!(), stopping));
    }
  }

  /** Whether `sink` holds the rows of `record` already (prepare read its positions). */
  written(sink: string, record: InboundRecord): boolean {
    const positions = this.#known.get(sink);
    if (!positions) return false;
    const next = positions.get(`${record.topic}:${record.partition}`);
    return next !== undefined && record.offset < next;
  }

  /** Rows of a batch, kept until the next checkpoint; rows of partitions revoked while it ran are not (their new owner reads them). */
  add(rows: Map<string, SinkRow[]>, revoked: { readonly size: number; has(tp: TopicPartition): boolean }): void {
    for (const [dataset, list] of rows) {
      const entry = this.#entries.get(dataset)!;
      const kept = revoked.size > 0 ? list.filter((row) => !rowOf(entry, row, (tp) => revoked.has(tp))) : list;
      const buffered = this.#buffer.get(dataset);
      if (buffered) for (const row of kept) buffered.push(row);
      else this.#buffer.set(dataset, kept);
    }
  }

  /** The rows of the checkpoint being taken (between batches, with its offsets). */
  take(): SinkBatch {
    const taken = this.#buffer;
    this.#buffer = new Map();
    return taken;
  }

  /**
   * Writes a checkpoint's rows into each sink, with the offsets of that sink's inputs; waits out
   * an unreachable sink (backoff, `status.waiting` says why) until it answers or the loop stops.
   * Answers the offsets whose rows were left out, their partition not owned when the write went
   * through: their Kafka offsets must not be committed either (at-least-once commits after this).
   */
  async write(batch: SinkBatch, offsets: readonly CommitOffset[], deadLetter: (records: OutboundRecord[]) => Promise<void>, stopping: () => boolean, owned: () => { has(tp: TopicPartition): boolean }): Promise<PartitionSet> {
    const counters = this.#counters;
    const leftOut = new PartitionSet();
    for (const [dataset, entry] of this.#entries) {
      const all = batch.get(dataset) ?? [];
      const allCovered = offsets.filter((o) => entry.inputs.has(o.topic));
      if (all.length === 0 && allCovered.length === 0) continue;
      let deadLettered = 0;
      const send = (records: OutboundRecord[]) => ((deadLettered += records.length), deadLetter(records));
      // Each attempt writes only what this member still owns: a partition revoked while the sink
      // was waited for is its new owner's (it reads those records again from the last commit).
      let mine: { has(tp: TopicPartition): boolean } = owned();
      const attempt = () => {
        mine = owned();
        const rows = all.filter((row) => rowOf(entry, row, (tp) => mine.has(tp)));
        const covered = allCovered.filter((o) => mine.has(o));
        return entry.sink.write(rows, covered, send, inputsOf(entry, rows, covered, mine));
      };
      const result = await this.#waiting(dataset, attempt, stopping);
      for (const o of allCovered) if (!mine.has(o)) leftOut.add(o);
      counters.sinkWritten! += result.written;
      counters.sinkDuplicates! += result.duplicates;
      // A refused row is poison like any: counted by reason, dead-lettered when its input has a topic for it.
      for (const { reason } of result.refused) counters.poisonByReason[reason] = (counters.poisonByReason[reason] ?? 0) + 1;
      counters.poison += result.refused.length;
      counters.deadLettered += deadLettered;
      // What the sink holds now, for a session that goes on reading (e.g. after a rebalance that kept the partition).
      const known = this.#known.get(dataset);
      if (known) for (const o of allCovered) if (mine.has(o)) known.set(`${o.topic}:${o.partition}`, o.offset);
    }
    return leftOut;
  }

  /** A checkpoint committed (Kafka's offsets, or its transaction): what the sinks reported in it is durable. */
  async committed(): Promise<void> {
    for (const { sink } of this.#entries.values()) if (sink instanceof HttpSink) await sink.committed();
  }

  async close(): Promise<void> {
    this.#closed = true;
    await Promise.all([...this.#entries.values()].map(({ sink }) => sink.close()));
  }

  /** Runs `work` until it does not find the sink unreachable; gives up (retryable) once the loop stops. */
  async #waiting<T>(dataset: string, work: () => Promise<T>, stopping: () => boolean): Promise<T> {
    const backoff = this.#options.retry ?? { firstMs: 200, maxMs: 5000 };
    for (let attempt = 1; ; attempt++) {
      try {
        const result = await work();
        if (this.#counters.sinksWaiting![dataset] !== undefined) {
          delete this.#counters.sinksWaiting![dataset];
          this.#options.log("info", `sink "${dataset}" answers again: the stream goes on`);
        }
        return result;
      } catch (error) {
        const failure = asFvError(error);
        if (failure.code !== "SINK_UNAVAILABLE") throw failure;
        if (this.#counters.sinksWaiting![dataset] === undefined) this.#options.log("warn", `${failure.message}; the stream waits and retries (/readyz answers 503 meanwhile)`);
        this.#counters.sinksWaiting![dataset] = failure.message;
        const giveUp = () => stopping() || this.#closed;
        if (giveUp()) throw new FvError("SINK_UNAVAILABLE", `stopping while ${failure.message}: the rows of the last checkpoint are read again by the next run`, { cause: failure });
        // In short steps, so a stop does not wait out a long backoff.
        const until = Date.now() + backoffMs(attempt, backoff);
        while (Date.now() < until && !giveUp()) await delay(Math.min(250, until - Date.now()));
      }
    }
  }
}
