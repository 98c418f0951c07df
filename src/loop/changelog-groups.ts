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
 * rule holds on a compacted log too, with one limit: once the cut group's segment is no longer the
 * active one, the cleaner may remove the committed version of a key the cut group changed, and its
 * repair then writes a tombstone (docs/operators.md). The restore writes the keys of the cut group
 * again with the values it restored (`repairs`), so a later complete group can never make them
 * count.
 *
 * Changelogs written before this rule ended a group with its offsets only when they moved (a
 * checkpoint that only fired timers wrote none), so the rule holds only after an offsets record that
 * carries `GROUPS_MARK`; after an unmarked one every record is applied, as it was then.
 */
import type { InboundRecord } from "../kafka/port.ts";

/** Key of the changelog entry that records which input offsets a task's state covers; it ends every group. */
export const OFFSETS_KEY = "\u0000offsets";
/**
 * Key of the changelog entry with the task's event-time progress: `{ eventTimes: { topic: ms },
 * heard: { source: ms } }`. Restored, it lets windows that were due close without new rows.
 */
export const TIME_KEY = "\u0000time";

/** The field of an offsets value that says its writer ends every group with it (never a topic name: Kafka's allow no `@`). */
export const GROUPS_MARK = "@groups";

/** The offsets value of a task: `{ "@groups": 1, <topic or hop source>: "<next offset>", ... }`. */
export function offsetsValue(covered: ReadonlyMap<string, bigint>): string {
  const value: Record<string, string | number> = { [GROUPS_MARK]: 1 };
  for (const [topic, offset] of covered) value[topic] = String(offset);
  return JSON.stringify(value);
}

/** The covered offsets of an offsets value (parsed), without the mark. */
export function coveredOf(value: unknown): Map<string, bigint> {
  const covered = new Map<string, bigint>();
  for (const [topic, offset] of Object.entries((value ?? {}) as Record<string, string>)) if (topic !== GROUPS_MARK) covered.set(topic, BigInt(offset));
  return covered;
}

// The number 1 only: an older version read the mark as a topic and wrote it back as "1", and it
// still wrote timer-only groups without offsets.
const marked = (value: unknown): boolean => typeof value === "object" && value !== null && (value as Record<string, unknown>)[GROUPS_MARK] === 1;

/** One stage's view of changelog records: how many of them (from the start) hold its complete groups, and what comes after. */
export interface StageGroups {
  /** Records `[0, complete)` hold every complete group of the stage (and other stages' records). */
  complete: number;
  /** The stage's records after its last offsets record, in log order: a group cut short or still being written. */
  cut: InboundRecord[];
}

const decoder = new TextDecoder();

/**
 * Splits `records` (one changelog partition, in offset order) for the stage whose keys start with
 * `prefix`. `before` is the stage's offsets value from before these records (a local store's), if
 * any: it says whether the rule holds when the records hold no offsets record of the stage.
 * `transactional`: the changelog is written in transactions (exactly-once) and read_committed, so
 * every group is whole and everything is applied (a member of an older version in a rolling
 * upgrade may still write a timer-only group without offsets after a marked one).
 */
export function stageGroups(records: readonly InboundRecord[], prefix: string, before?: unknown, transactional = false): StageGroups {
  if (transactional) return { complete: records.length, cut: [] };
  const end = prefix + OFFSETS_KEY;
  const cut: InboundRecord[] = [];
  for (let i = records.length - 1; i >= 0; i--) {
    const record = records[i]!;
    if (!record.key) continue;
    const key = decoder.decode(record.key);
    if (key === end) {
      let value: unknown;
      try {
        value = record.value === null ? null : JSON.parse(decoder.decode(record.value));
      } catch {
        value = null; // not JSON: the restore names it when it reads it
      }
      return marked(value) ? { complete: i + 1, cut: cut.reverse() } : { complete: records.length, cut: [] };
    }
    if (key.startsWith(prefix)) cut.push(record);
  }
  // No offsets record here: everything of the stage is cut, unless what came before was written
  // before the rule.
  return before !== undefined && !marked(before) ? { complete: records.length, cut: [] } : { complete: 0, cut: cut.reverse() };
}
