import { retry } from "../async.ts";
import { recoveryOf } from "../errors.ts";
import type { Row } from "../expr/index.ts";
import type { InboundRecord, OutboundRecord, Producer, TransactionalProducer } from "../kafka/port.ts";
import type { Logger } from "../logger.ts";

/** What a dead letter says about its failure: the reason, the message, and the stage's label. */
export interface Failure {
  reason: string;
  message: string;
  stageLabel: string;
}

/**
 * A dead letter, with its headers (the one place that writes them). Of a source record: its key,
 * value and headers, with the failure and where the record came from. Of a fired row (timers
 * fire with no source record): the row itself, with the failure only.
 *
 * @example
 * deadLetterRecord("in-dlq", { reason: "invalid_json", message: "...", stageLabel: "stage 1 (in → out)" }, { record });
 */
export function deadLetterRecord(topic: string, failure: Failure, from: { record: InboundRecord } | { fired: Row }): OutboundRecord {
  const reported: Array<[string, string]> = [
    ["fv.error.reason", failure.reason],
    ["fv.error.message", failure.message.slice(0, 1000)],
    ["fv.error.stage", failure.stageLabel],
  ];
  if ("fired" in from) return { topic, key: null, value: JSON.stringify(from.fired), headers: reported };
  const { record } = from;
  return {
    topic,
    key: record.key,
    value: record.value,
    headers: [
      ...record.headers,
      ...reported,
      ["fv.source.topic", record.topic],
      ["fv.source.partition", String(record.partition)],
      ["fv.source.offset", String(record.offset)],
    ],
  };
}

/**
 * Sends a session's records, under either guarantee (Kafka Streams' RecordCollector).
 * Exactly-once: into the open transaction; any failure aborts it, and the session restarts from
 * the committed offsets. At-least-once: acknowledged by every replica (acks=all), a retryable
 * failure retried `retries` times, `retryPauseMs` apart.
 */
export class RecordCollector {
  readonly #producer: Producer | undefined;
  readonly #tx: TransactionalProducer | undefined;
  readonly #log: Logger;
  readonly #retries: number;
  readonly #retryPauseMs: number;

  constructor(clients: { producer?: Producer; tx?: TransactionalProducer }, log: Logger, options: { retries: number; retryPauseMs: number }) {
    this.#producer = clients.producer;
    this.#tx = clients.tx;
    this.#log = log;
    this.#retries = options.retries;
    this.#retryPauseMs = options.retryPauseMs;
  }

  send(records: OutboundRecord[]): Promise<void> {
    // Exactly-once: any failure aborts the transaction; the session restarts from committed offsets.
    if (this.#tx) return this.#tx.send(records);
    return retry(() => this.#producer!.send(records), {
      attempts: this.#retries,
      pause: this.#retryPauseMs,
      retryable: (error) => recoveryOf(error) === "retryable",
      onRetry: (error, attempt) => this.#log("warn", `send failed, retrying (${attempt}/${this.#retries}): ${(error as Error).message}`),
    });
  }
}
