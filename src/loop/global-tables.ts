/**
 * Global tables (`tableJoin` with `global = true`, Kafka Streams' GlobalKTable): every consumer
 * loop reads every partition of the table topic itself, outside the consumer group, into the
 * operator's lookup map. It reads the whole topic before the loop processes its first batch (a
 * bootstrap, as Kafka Streams' global thread does) and then follows it every
 * GLOBAL_REFRESH_MS between batches. Nothing is checkpointed: a restart reads the topic again
 * (it is compacted, so that is its latest rows).
 */
import { FvError } from "../errors.ts";
import type { Row } from "../expr/index.ts";
import type { Admin } from "../kafka/port.ts";
import type { Logger } from "../logger.ts";
import type { GlobalTable } from "../ops/table-join.ts";
import { decodeRow, keyText } from "./record-codec.ts";
import type { LoopCounters } from "./counters.ts";

/** How often a loop reads what was added to its global tables since (between batches). */
export const GLOBAL_REFRESH_MS = 500;

/** One global table of one loop: its topic, the lookup map it fills, and how far each partition was read. */
export class GlobalTableReader {
  readonly topic: string;
  readonly #table: GlobalTable;
  readonly #positions = new Map<number, bigint>();
  readonly #log: Logger;
  readonly #counters: LoopCounters;
  /** Records read so far (the bootstrap's count is logged). */
  read = 0;

  constructor(topic: string, table: GlobalTable, log: Logger, counters: LoopCounters) {
    this.topic = topic;
    this.#table = table;
    this.#log = log;
    this.#counters = counters;
  }

  /**
   * Reads every partition from where it last got to the end. A record that is not a JSON object
   * is poison (counted by reason, and logged: a table has no dead-letter topic here); a record
   * without a value deletes its key.
   */
  async refresh(admin: Admin): Promise<number> {
    const counts = await admin.partitionCounts([this.topic]);
    const partitions = counts.get(this.topic);
    if (partitions === undefined) throw new FvError("KAFKA_RETRYABLE", `global table ${this.topic} does not exist (any more?)`);
    let added = 0;
    for (let p = 0; p < partitions; p++) {
      let position = this.#positions.get(p);
      const records = await admin.readPartition(this.topic, p, {
        ...(position === undefined ? {} : { from: position }),
        onProgress: (progress) => void (position = progress.position),
      });
      for (const record of records) {
        const key = keyText(record.key);
        if (key === null) {
          this.#poison("null_key", `a record of global table ${this.topic} (partition ${p}, offset ${record.offset}) has no key`);
          continue;
        }
        if (record.value === null) {
          this.#table.put(key, null, p, record.offset);
          continue;
        }
        const decoded = decodeRow(record.value);
        if ("poison" in decoded) {
          this.#poison(decoded.poison, `a record of global table ${this.topic} (partition ${p}, offset ${record.offset}) is not a JSON object: ${decoded.detail}`);
          continue;
        }
        this.#table.put(key, decoded.row as Row, p, record.offset);
      }
      added += records.length;
      if (position !== undefined) this.#positions.set(p, position);
    }
    this.read += added;
    return added;
  }

  #poison(reason: string, message: string): void {
    this.#counters.poison++;
    this.#counters.poisonByReason[reason] = (this.#counters.poisonByReason[reason] ?? 0) + 1;
    this.#log("warn", `${message}: skipped`, { reason });
  }
}
