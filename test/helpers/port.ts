/**
 * Helpers over the Kafka port alone (src/kafka/port.ts): no Bun API and no adapter, so that the
 * Node port suite (test/kafka/adapters.node.ts, compiled by tsconfig.node.json) imports them as
 * the Bun suites do.
 */
import type { GroupConsumer, InboundRecord, TransactionalProducer } from "../../src/kafka/port.ts";

/** Polls until `count` records arrived or `timeoutMs` passed. */
export async function pollUntil(consumer: GroupConsumer, count: number, timeoutMs = 30_000): Promise<InboundRecord[]> {
  const out: InboundRecord[] = [];
  const until = Date.now() + timeoutMs;
  while (out.length < count && Date.now() < until) out.push(...(await consumer.poll(1000, 200)));
  return out;
}

/** Polls for `ms` and returns whatever came (to show that nothing more does). */
export async function pollFor(consumer: GroupConsumer, ms: number): Promise<InboundRecord[]> {
  const out: InboundRecord[] = [];
  const until = Date.now() + ms;
  while (Date.now() < until) out.push(...(await consumer.poll(1000, 200)));
  return out;
}

/**
 * Writes the cases a read_committed reader must get right to `topic` (one partition), all from
 * one transactional producer (a restarted transactional id keeps its producer id): 30 rows
 * aborted, 5 committed, 30 aborted, 3000 rows of about 1 kB aborted (more than one fetch of the
 * partition returns), 10 committed. Each value is JSON with a `tag` ("aborted-1", "committed-1",
 * "aborted-2", "aborted-big", "committed-2"); see `countTags`.
 */
export async function writeAbortedAndCommitted(tx: TransactionalProducer, topic: string): Promise<void> {
  const rows = (tag: string, n: number, pad = 10) => Array.from({ length: n }, (_, i) => ({ topic, key: null, value: JSON.stringify({ tag, i, pad: "p".repeat(pad) }) }));
  await tx.send(rows("aborted-1", 30));
  await tx.abort();
  await tx.send(rows("committed-1", 5));
  await tx.commit();
  await tx.send(rows("aborted-2", 30));
  await tx.abort();
  // About 3 MB in one transaction: more than one fetch of the partition returns.
  await tx.send(rows("aborted-big", 3000, 1000));
  await tx.abort();
  await tx.send(rows("committed-2", 10));
  await tx.commit();
}

/** How many of the records carry each `tag` (the JSON values `writeAbortedAndCommitted` writes). */
export function countTags(records: InboundRecord[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const r of records) {
    const tag = JSON.parse(new TextDecoder().decode(r.value!)).tag as string;
    counts[tag] = (counts[tag] ?? 0) + 1;
  }
  return counts;
}
