import type { CommitOffset, InboundRecord, OutboundRecord, TopicPartition } from "../kafka/port.ts";
import type { Row } from "../expr/index.ts";

/** One row a stage produced for a sink, with what its dead letter needs should the sink refuse it. */
export interface SinkRow {
  row: Row;
  /** The output key (the source record's, or the operator's key columns). */
  key: string | null;
  /** The input partition it came from: its source record's, or the operator task's that fired it. */
  partition: number;
  /** The source record, when the row came from one (not from a timer). */
  source?: InboundRecord;
  deadLetterTopic?: string;
  stageLabel: string;
}

/** Rows a sink refused (constraint, type, a 4xx), each with the sink's own words. */
export interface Refused {
  row: SinkRow;
  /** `sink_rejected`, or `sink_in_doubt` (the http sink: a request the last run stopped while writing) */
  reason: string;
  message: string;
}

/** What one checkpoint's write did. */
export interface SinkWritten {
  /** Rows the sink holds now (upserted, delivered). */
  written: number;
  /** Rows skipped as delivered before (the Deduplicator's window). */
  duplicates: number;
  refused: Refused[];
}

/**
 * Where a stage's output goes when it is not a Kafka topic. The loop hands it each checkpoint's
 * rows, with the input offsets they cover, and waits: `write` resolves once the rows are
 * durable in the sink (or refused and dead-lettered), and only then are the offsets committed to
 * Kafka. An unreachable sink throws `SINK_UNAVAILABLE`, and the loop calls again after a backoff.
 */
export interface Sink {
  readonly kind: "postgres" | "http";
  readonly dataset: string;
  /**
   * The sink's own record of how far each input partition is written (`"topic:partition"` → next
   * offset), when the sink keeps one (Postgres, in the same transaction as the rows).
   */
  positions?(): Promise<Map<string, bigint>>;
  /**
   * Writes one checkpoint's rows; refused rows are dead-lettered with `deadLetter` before the write
   * is final. `inputs`: the input partitions the write stands for (its offsets', and its rows',
   * timer-fired ones included), which a sink that fences (Postgres) checks are still this member's.
   */
  write(rows: readonly SinkRow[], offsets: readonly CommitOffset[], deadLetter: (records: OutboundRecord[]) => Promise<void>, inputs?: readonly TopicPartition[]): Promise<SinkWritten>;
  close(): Promise<void>;
}

/**
 * A sink's dead letters, each row's sent once: a checkpoint's write that is tried again (the sink
 * went away after its rows were refused) hands the same rows, and their dead letters are not sent
 * again. (After a crash the rows are new objects: a replay dead-letters them again, at least once.)
 */
export class DeadLetters {
  readonly #sent = new WeakMap<SinkRow, Refused>();

  async send(refused: readonly Refused[], sink: string, deadLetter: (records: OutboundRecord[]) => Promise<void>): Promise<void> {
    const fresh = refused.filter((r) => !this.#sent.has(r.row));
    if (fresh.length === 0) return;
    await deadLetter(fresh.flatMap((r) => sinkDeadLetter(r, sink) ?? []));
    for (const r of fresh) this.#sent.set(r.row, r);
  }

  /** The refusal whose dead letter went out already for `row`, if any. */
  of(row: SinkRow): Refused | undefined {
    return this.#sent.get(row);
  }
}

/** The dead letter of a row a sink refused: the row as the sink saw it, with the source record's place. */
export function sinkDeadLetter(refused: Refused, sink: string): OutboundRecord | undefined {
  const { row } = refused;
  if (!row.deadLetterTopic) return undefined;
  const headers: Array<[string, string | Uint8Array]> = [
    ["fv.error.reason", refused.reason],
    ["fv.error.message", refused.message.slice(0, 1000)],
    ["fv.error.stage", row.stageLabel],
    ["fv.error.sink", sink],
  ];
  if (row.source) {
    headers.unshift(...row.source.headers);
    headers.push(["fv.source.topic", row.source.topic], ["fv.source.partition", String(row.source.partition)], ["fv.source.offset", String(row.source.offset)]);
  }
  return { topic: row.deadLetterTopic, key: row.key, value: JSON.stringify(row.row), headers };
}
