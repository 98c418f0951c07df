/**
 * The changelog's unit is a *group*: what one checkpoint wrote for one task (stage, partition),
 * its entries first and its covered input offsets (`OFFSETS_KEY`) always last. Under exactly-once
 * the transaction makes a group whole. Under at-least-once nothing does: the producer may send a
 * group in several requests (librdkafka with no linger sends records as they come), and a kill
 * between two leaves entries without the offsets that go with them. Applied, those entries count
 * the rows they hold twice, once restored and once read again from the older offsets (CI,
 * node-confluent, the windowed count into Postgres killed five times: 5 windows at 45 of 30).
 *
 * So a reader applies a stage's records only up to that stage's last offsets record: what follows
 * is a group cut short (or, to a standby, one still being written). Compaction never removes that
 * record (nothing of the same key comes after it), and a group cut short never holds one, so the
 * rule holds on a compacted log too. The restore then writes the keys of the cut group again with
 * the values it restored (`repairs`), so a later complete group can never make them count.
 */
import type { InboundRecord } from "../kafka/port.ts";

/** Key of the changelog entry that records which input offsets a task's state covers; it ends every group. */
export const OFFSETS_KEY = "\u0000offsets";
/**
 * Key of the changelog entry with the task's event-time progress: `{ eventTimes: { topic: ms },
 * heard: { source: ms } }`. Restored, it lets windows that were due close without new rows.
 */
export const TIME_KEY = "\u0000time";

/** One stage's view of changelog records: how many of them (from the start) hold its complete groups, and what comes after. */
export interface StageGroups {
  /** Records `[0, complete)` hold every complete group of the stage (and other stages' records). */
  complete: number;
  /** The stage's records after its last offsets record, in log order: a group cut short or still being written. */
  cut: InboundRecord[];
}

const decoder = new TextDecoder();

/** Splits `records` (one changelog partition, in offset order) for the stage whose keys start with `prefix`. */
export function stageGroups(records: readonly InboundRecord[], prefix: string): StageGroups {
  const end = prefix + OFFSETS_KEY;
  const cut: InboundRecord[] = [];
  for (let i = records.length - 1; i >= 0; i--) {
    const record = records[i]!;
    if (!record.key) continue;
    const key = decoder.decode(record.key);
    if (key === end) return { complete: i + 1, cut: cut.reverse() };
    if (key.startsWith(prefix)) cut.push(record);
  }
  return { complete: 0, cut: cut.reverse() };
}
