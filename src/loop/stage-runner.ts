/**
 * Records through the stages (Kafka Streams' StreamTask, without its I/O): a batch of records in,
 * its emissions out (outputs, hop rows, dead letters, drops, poison by reason). Operators are
 * reached through OperatorTasks and compute steps through their handles; nothing here sends,
 * commits or polls, so a test drives it with plain arrays.
 */
import type { ComputeResult, ComputeStep } from "../compute/index.ts";
import { outputKeyColumns, rowKeyText } from "../topology/keying.ts";
import type { CompiledStage } from "../topology/compile-topology.ts";
import { recoveryOf } from "../errors.ts";
import type { Row } from "../expr/index.ts";
import type { InboundRecord, OutboundRecord, TopicPartition } from "../kafka/port.ts";
import type { Metrics } from "../metrics/index.ts";
import { eventTimeOf } from "../ops/index.ts";
import type { LoopCounters } from "./counters.ts";
import type { Logger } from "../logger.ts";
import type { OperatorTasks, Task } from "./operator-tasks.ts";
import type { LoopPlan } from "./plan.ts";
import { appendable, appendColumns, decodeRow } from "./record-codec.ts";
import { deadLetterRecord } from "./record-collector.ts";
import type { SinkRow } from "../sinks/sink.ts";
import { hopInputOf, hopRecord, hopSource, readWatermark, type UpstreamTracker } from "./repartition.ts";

/** Where records of one input topic go: each stage that reads it. */
export interface Route {
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
  /** The output is a sink (postgres, http), not a topic: its dataset. Rows go to `Emissions.sink`. */
  sink?: string;
}

/** The routes of every topic the loop reads: the stages' inputs, and the repartition topics of hops. */
export function routesOf(stages: readonly CompiledStage[], plan: Pick<LoopPlan, "bindings" | "hops">): Map<string, Route[]> {
  const routes = new Map<string, Route[]>();
  const addRoute = (topic: string, route: Route) => routes.set(topic, [...(routes.get(topic) ?? []), route]);
  for (const stage of stages) {
    const output = plan.bindings[stage.def.output]!;
    const hop = plan.hops?.[stage.index];
    const stageLabel = `stage ${stage.index + 1} (${stage.def.inputs.join(", ")} → ${stage.def.output})`;
    const outputKey = stage.operator ? (outputKeyColumns(stage) ?? []) : [];
    for (const [inputIndex, input] of stage.def.inputs.entries()) {
      // A global table is read whole by each loop (global-tables.ts), not consumed in the group.
      if (stage.operator?.compiled.global && stage.operator.compiled.tableInput === inputIndex) continue;
      const binding = plan.bindings[input]!;
      addRoute(binding.topic, {
        stage,
        inputIndex,
        outputTopic: output.topic,
        deadLetterTopic: binding.policy.deadLetter,
        stageLabel,
        outputKey,
        ...(output.sink !== "kafka" ? { sink: stage.def.output } : {}),
        // (A tableJoin's table has no key columns: it is read as it is, not re-keyed.)
        ...(hop && hop.keyColumns[inputIndex]!.length > 0 ? { toHop: { topic: hop.topic, partitions: hop.partitions, keyColumns: hop.keyColumns[inputIndex]! } } : {}),
      });
    }
    if (hop) {
      const deadLetterTopic = plan.bindings[stage.def.inputs[0]!]!.policy.deadLetter;
      addRoute(hop.topic, { stage, inputIndex: 0, outputTopic: output.topic, deadLetterTopic, stageLabel, outputKey, fromHop: true, ...(output.sink !== "kafka" ? { sink: stage.def.output } : {}) });
    }
  }
  return routes;
}

/** What one batch produced, and its counts (added to the loop's counters once it is sent or committed). */
export interface Emissions {
  /** Outputs, hop rows and dead letters, in the order they were made. */
  out: OutboundRecord[];
  /** Rows for sinks (postgres, http), by dataset: written at the next checkpoint. */
  sink?: Map<string, SinkRow[]>;
  consumed: number;
  emitted: number;
  dropped: number;
  deadLettered: number;
  repartitioned: number;
  /** The reason of each poison row. */
  poison: string[];
  /** Time spent per stage, for the step-latency histogram. */
  stageMs: Map<CompiledStage, number>;
}

export const emptyEmissions = (): Emissions => ({ out: [], consumed: 0, emitted: 0, dropped: 0, deadLettered: 0, repartitioned: 0, poison: [], stageMs: new Map() });

/** Adds a batch's counts into counters (the loop's, or those of the open transaction). */
export function countEmissions(c: LoopCounters, e: Emissions): void {
  c.consumed += e.consumed;
  c.dropped += e.dropped;
  c.emitted += e.emitted;
  c.deadLettered += e.deadLettered;
  c.repartitioned += e.repartitioned;
  c.poison += e.poison.length;
  for (const reason of e.poison) c.poisonByReason[reason] = (c.poisonByReason[reason] ?? 0) + 1;
}

/** A batch's rows for one stage's compute step: parts handed over (their results to come), and rows waiting. */
interface ComputeRows {
  step: ComputeStep;
  /** Parts handed over, with when (for the step-latency histogram) and when they were answered. */
  handed: Array<{ rows: Array<{ record: InboundRecord; row: Row }>; results: Promise<ComputeResult[]>; handedAt: number; answeredAt: number }>;
  waiting: Array<{ record: InboundRecord; row: Row }>;
}

/** Hands the waiting rows to the step. A part whose results are never taken (the batch failed) fails quietly. */
function handOver(rows: ComputeRows): void {
  if (rows.waiting.length === 0) return;
  const waiting = rows.waiting;
  rows.waiting = [];
  const handedAt = performance.now();
  const part = { rows: waiting, results: rows.step.processBatch(waiting.map((w) => w.row), waiting.map((w) => w.record.key)), handedAt, answeredAt: handedAt };
  part.results.then(() => void (part.answeredAt = performance.now()), () => {});
  rows.handed.push(part);
}

/** Where a produced row came from: a source record, or a timer (a fired row has no source record). */
type Origin = { record: InboundRecord } | { fired: Row; partition: number };

/** What a batch may reach besides its records; all optional for stateless stages. */
export interface BatchContext {
  /** The stateful operators of this session. */
  tasks?: OperatorTasks;
  /** Started compute steps by stage index. */
  compute?: ReadonlyMap<number, ComputeStep>;
  /** Upstream side of hops: told the event time of each row sent into one. */
  upstream?: UpstreamTracker;
  /** Partitions revoked while the batch runs: their remaining records are not processed. */
  revoked?: { readonly size: number; has(tp: TopicPartition): boolean };
  /** Whether a sink holds this record's rows already (its own offsets are past it): the record is skipped for that sink's stage. */
  written?: (sink: string, record: InboundRecord) => boolean;
}

export interface StageRunnerOptions {
  /** STREAM_LATE_ROWS: a row refused as late is dropped, or also dead-lettered. */
  lateRows: "drop" | "deadLetter";
  metrics: Pick<Metrics, "lateRecordsDropped" | "stepLatency">;
  /** Where debug lines go, when wanted. */
  debug?: Logger;
}

/** Runs batches of records through the stages of one loop. */
export class StageRunner {
  readonly routes: ReadonlyMap<string, readonly Route[]>;
  readonly #options: StageRunnerOptions;
  /** Every stage that has a route (measured together as the inline part of a batch). */
  readonly #inlineStages: ReadonlySet<CompiledStage>;

  constructor(routes: ReadonlyMap<string, readonly Route[]>, options: StageRunnerOptions) {
    this.routes = routes;
    this.#options = options;
    this.#inlineStages = new Set([...routes.values()].flat().map((r) => r.stage));
  }

  /**
   * One batch: each record's row through the inline steps of every stage that reads its topic,
   * then, per stage, through its hop, its operator (one by one) or its compute step (together, or
   * a `batchSize` at a time as they are read when the step `overlaps`; results in order).
   */
  async run(records: InboundRecord[], ctx: BatchContext = {}): Promise<Emissions> {
    const e = emptyEmissions();
    const revoked = ctx.revoked ?? { size: 0, has: () => false };
    /** Rows for a stage's compute step, with the record each came from: handed over, and waiting. */
    let toCompute: Map<Route, ComputeRows> | undefined;
    const batchStarted = performance.now();
    for (const record of records) {
      const routes = this.routes.get(record.topic);
      if (!routes) continue;
      if (revoked.size && revoked.has(record)) continue;
      // Rows read back from a repartition topic were counted when they were first consumed.
      if (!routes[0]!.fromHop) e.consumed++;
      for (let r = 0; r < routes.length; r++) {
        const route = routes[r]!;
        if (route.sink && ctx.written?.(route.sink, record)) continue;
        const heard = route.fromHop ? readWatermark(record) : undefined;
        if (heard) {
          ctx.tasks!.hearWatermark(route.stage, record.partition, heard.source, heard.watermark, heard.idle);
          continue;
        }
        // A tableJoin's table: a record without a value deletes its key.
        if (record.value === null && !route.fromHop && route.stage.operator?.compiled.tableInput === route.inputIndex) {
          await this.#tombstone(e, route, record, ctx.tasks!, revoked);
          continue;
        }
        // Each route gets its own parse: steps may change the row in place.
        const decoded = decodeRow(record.value);
        if ("poison" in decoded) {
          this.#poison(e, route, decoded.poison, decoded.detail, { record });
          continue;
        }
        // A stage that only filters and sets new columns writes a row that had none of them as its
        // source text with them appended (checked before its steps set them).
        const appends = route.stage.appends;
        const source = appends && !route.sink && appendable(decoded, appends) ? decoded.text : undefined;
        let row;
        try {
          row = route.fromHop ? decoded.row : route.stage.before(decoded.row);
        } catch (error) {
          this.#isolate(e, route, error, { record });
          continue;
        }
        if (row === null) {
          e.dropped++;
        } else if (route.toHop) {
          // Upstream side of a hop: re-key the row by the operator's key and send it through the
          // repartition topic; a row without a usable event time is poison here, at its source.
          let time;
          try {
            const compiled = route.stage.operator!.compiled;
            time = compiled.eventTime ? compiled.eventTime(row, route.inputIndex) : eventTimeOf(row, compiled.timeColumn);
          } catch (error) {
            this.#isolate(e, route, error, { record });
            continue;
          }
          e.out.push(hopRecord(route.toHop, row, record, { index: route.inputIndex, join: route.stage.def.inputs.length > 1, unchanged: route.stage.nothingBefore }));
          e.repartitioned++;
          ctx.upstream!.note(route.stage.index, record, time);
        } else if (route.stage.operator) {
          // A task already restored takes the row at once; only a first row waits for its restore.
          // Revoked since the check above (while an earlier route of this record waited for a
          // restore): not this member's to process, as after the wait in #operator.
          const task = ctx.tasks!.ready(route.stage, record.partition);
          if (!task) await this.#operator(e, route, record, row, ctx.tasks!, revoked);
          else if (!(revoked.size && revoked.has(record))) this.#operatorRow(e, route, record, row, ctx.tasks!, task);
        } else if (route.stage.compute) {
          toCompute ??= new Map();
          let rows = toCompute.get(route);
          if (!rows) toCompute.set(route, (rows = { step: ctx.compute!.get(route.stage.index)!, handed: [], waiting: [] }));
          rows.waiting.push({ record, row });
          // A step that takes batches while it works on others gets each full one at once, so the
          // plugin computes while this thread reads the rest of the batch.
          if (rows.step.overlaps && rows.waiting.length >= rows.step.batchSize) handOver(rows);
        } else {
          this.#emit(e, route, row, { record }, undefined, source);
        }
      }
    }
    // The inline part of every stage, measured as one: per-row timers would cost more than the steps.
    const inlineMs = performance.now() - batchStarted;
    if (records.length) for (const stage of this.#inlineStages) e.stageMs.set(stage, inlineMs / this.#inlineStages.size);
    // Compute steps get the rest of the batch's rows (the step splits them into its batch size);
    // their results are taken in order, each part as it comes: a poison result is isolated like
    // any poison row; zero outputs count as dropped.
    for (const rows of toCompute?.values() ?? []) handOver(rows);
    for (const [route, rows] of toCompute ?? []) {
      let answeredAt = 0;
      for (const part of rows.handed) {
        const results = await part.results;
        answeredAt = Math.max(answeredAt, part.answeredAt);
        results.forEach((result, i) => {
          const { record } = part.rows[i]!;
          if ("poison" in result) return this.#poison(e, route, result.poison.reason, result.poison.message, { record });
          if (result.rows.length === 0) e.dropped++;
          this.#after(e, route, result.rows, { record }, { keyed: false, dropIsCounted: true });
        });
      }
      // From the first rows handed over to the last answer (the rows' decode and the steps after it left out).
      this.#options.metrics.stepLatency(route.stage.index, route.stage.compute!.step, route.stage.compute!.op, answeredAt - rows.handed[0]!.handedAt);
    }
    return e;
  }

  /** Rows a stage's timers fired (its watermark moved): through the steps after its operator. */
  fire(e: Emissions, stage: CompiledStage, rows: readonly Row[], partition: number): void {
    const route = [...this.routes.values()].flat().find((r) => r.stage === stage && !r.toHop)!;
    for (const fired of rows) this.#after(e, route, [fired], { fired, partition }, { keyed: true, dropIsCounted: true });
  }

  /** One row into the operator of its partition, restored first if this is its first row here. */
  async #operator(e: Emissions, route: Route, record: InboundRecord, row: Row, tasks: OperatorTasks, revoked: { has(tp: TopicPartition): boolean }): Promise<void> {
    if (this.#options.debug && !tasks.has(route.stage, record.partition)) this.#options.debug("debug", `task ${route.stage.index}:${record.partition}: waiting for restore`);
    const task = await tasks.task(route.stage, record.partition);
    // Revoked while its state was being restored: the task is not kept, and the row is not this member's to process.
    if (revoked.has(record)) return;
    this.#operatorRow(e, route, record, row, tasks, task);
  }

  /** One row into its operator's task, ready. */
  #operatorRow(e: Emissions, route: Route, record: InboundRecord, row: Row, tasks: OperatorTasks, task: Task): void {
    // Only a join's hop records name their input (hopRecord).
    const inputIndex = route.fromHop ? (route.stage.def.inputs.length > 1 ? hopInputOf(record) : 0) : route.inputIndex;
    const source = route.fromHop ? hopSource(record) : undefined;
    let result;
    try {
      result = tasks.process(task, record, row, inputIndex, source);
    } catch (error) {
      return this.#isolate(e, route, error, { record });
    }
    if (result.late.length) {
      this.#options.metrics.lateRecordsDropped(route.stage.index, result.late.length);
      if (this.#options.lateRows === "deadLetter" && route.deadLetterTopic) {
        e.out.push(deadLetterRecord(route.deadLetterTopic, { reason: "late", message: "the row arrived after its window closed", stageLabel: route.stageLabel }, { record }));
        e.deadLettered++;
      }
    }
    // (A row of the operator that the steps after it filter out is not counted as dropped, unlike
    // a compute step's or a fired one: the counters have always read so.)
    this.#after(e, route, result.rows, { record }, { keyed: true, dropIsCounted: false });
  }

  /** A tombstone on a tableJoin's table, into the operator of its partition (restored first, as for a row). */
  async #tombstone(e: Emissions, route: Route, record: InboundRecord, tasks: OperatorTasks, revoked: { has(tp: TopicPartition): boolean }): Promise<void> {
    const task = await tasks.task(route.stage, record.partition);
    if (revoked.has(record)) return;
    try {
      tasks.tombstone(task, record, route.inputIndex);
    } catch (error) {
      this.#isolate(e, route, error, { record });
    }
  }

  /**
   * The one place a stage's "after" steps run over rows its compute step or operator produced (or
   * its timers fired). `keyed`: the output is keyed by the operator's key columns, read from the
   * produced row; else it keeps the source record's key. A row the steps refuse is poison like any.
   */
  #after(e: Emissions, route: Route, produced: readonly Row[], origin: Origin, how: { keyed: boolean; dropIsCounted: boolean }): void {
    for (const row of produced) {
      let out;
      try {
        out = route.stage.after(row);
      } catch (error) {
        // A fired row that the steps after the operator cannot take is poison like any row;
        // it has no source record, so its dead letter carries the fired row itself.
        this.#isolate(e, route, error, origin);
        continue;
      }
      if (out === null) {
        if (how.dropIsCounted) e.dropped++;
        continue;
      }
      this.#emit(e, route, out, origin, how.keyed ? row : undefined);
    }
  }

  /**
   * An output record: key and headers of the source record kept (a fired row has neither), unless
   * keyed by the produced row. `source`: the row's source text, its value with the stage's new
   * columns appended (CompiledStage.appends); a row no step changed is its source record's bytes.
   */
  #emit(e: Emissions, route: Route, row: Row, origin: Origin, keyedBy?: Row, source?: string): void {
    const key = keyedBy ? rowKeyText(keyedBy, route.outputKey) : "record" in origin ? origin.record.key : null;
    if (route.sink) {
      e.sink ??= new Map();
      const rows = e.sink.get(route.sink) ?? [];
      const textKey = key === null || typeof key === "string" ? key : keyDecoder.decode(key);
      rows.push("record" in origin
        ? { row, key: textKey, partition: origin.record.partition, source: origin.record, deadLetterTopic: route.deadLetterTopic, stageLabel: route.stageLabel }
        : { row, key: textKey, partition: origin.partition, deadLetterTopic: route.deadLetterTopic, stageLabel: route.stageLabel });
      e.sink.set(route.sink, rows);
      e.emitted++;
      return;
    }
    const appends = route.stage.appends;
    const value = source === undefined || !appends ? JSON.stringify(row) : appends.length === 0 && "record" in origin && origin.record.value ? origin.record.value : appendColumns(source, row, appends);
    e.out.push("record" in origin ? { topic: route.outputTopic, key, value, headers: origin.record.headers } : { topic: route.outputTopic, key, value });
    e.emitted++;
  }

  /** A step's failure: a poison row is isolated (counted by reason, dead-lettered); anything else fails the batch. */
  #isolate(e: Emissions, route: Route, error: unknown, origin: Origin): void {
    if (recoveryOf(error) !== "poison") throw error;
    this.#poison(e, route, poisonReason(error), (error as Error).message, origin);
  }

  #poison(e: Emissions, route: Route, reason: string, message: string, origin: Origin): void {
    e.poison.push(reason);
    if (!route.deadLetterTopic) return;
    e.out.push(deadLetterRecord(route.deadLetterTopic, { reason, message, stageLabel: route.stageLabel }, origin));
    e.deadLettered++;
  }
}

const keyDecoder = new TextDecoder();

/** The reason a poison error gives: the expression error's reason, or its code. */
function poisonReason(error: unknown): string {
  // deno-lint-ignore no-explicit-any
  const e = error as any;
  return e?.reason ?? e?.context?.reason ?? e?.code ?? "step_error";
}
