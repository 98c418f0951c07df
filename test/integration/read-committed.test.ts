/**
 * The pure-JS adapter reads committed data only, including the cases its library got wrong:
 * several aborted transactions of one producer (a restarted transactional id keeps its producer
 * id) and an aborted transaction larger than one fetch.
 */
import { expect, test } from "bun:test";
import type { InboundRecord } from "../../src/kafka/port.ts";
import { client, createTopic, json, uniqueName } from "../helpers/kafka.ts";

async function readAll(topic: string, expected: number): Promise<InboundRecord[]> {
  const consumer = client.consumer({ groupId: uniqueName("rc-reader"), clientId: "rc-reader", topics: [topic], offsetReset: "earliest" });
  await consumer.start();
  const out: InboundRecord[] = [];
  const until = Date.now() + 20_000;
  // Read past the expected count for a while, so a leaked record would be seen.
  let quietSince = Date.now();
  while (Date.now() < until && (out.length < expected || Date.now() - quietSince < 1500)) {
    const batch = await consumer.poll(5000, 200);
    if (batch.length) quietSince = Date.now();
    out.push(...batch);
  }
  await consumer.close();
  return out;
}

test("aborted transactions stay invisible: two of one producer, and one larger than a fetch", async () => {
  const topic = uniqueName("read-committed");
  await createTopic(topic, 1);
  const tx = client.transactionalProducer({ clientId: "rc-writer", transactionalId: `${topic}-tx` });
  await tx.ready();
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
  await tx.close();

  const tally = (records: InboundRecord[]) => {
    const counts: Record<string, number> = {};
    for (const r of records) counts[json(r).tag] = (counts[json(r).tag] ?? 0) + 1;
    return counts;
  };
  expect(tally(await readAll(topic, 15))).toEqual({ "committed-1": 5, "committed-2": 10 });
  const admin = client.admin({ clientId: "rc-admin" });
  try {
    expect(tally(await admin.readPartition(topic, 0))).toEqual({ "committed-1": 5, "committed-2": 10 });
  } finally {
    await admin.close();
  }
}, 60_000);
