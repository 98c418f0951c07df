/**
 * The pure-JS adapter reads committed data only, including the cases its library got wrong:
 * several aborted transactions of one producer (a restarted transactional id keeps its producer
 * id) and an aborted transaction larger than one fetch.
 */
import { expect, test } from "bun:test";
import { client, createTopic, uniqueName } from "../helpers/kafka.ts";
import { countTags, pollFor, pollUntil, writeAbortedAndCommitted } from "../helpers/port.ts";

test("aborted transactions stay invisible: two of one producer, and one larger than a fetch", async () => {
  const topic = uniqueName("read-committed");
  await createTopic(topic, 1);
  const tx = client.transactionalProducer({ clientId: "rc-writer", transactionalId: `${topic}-tx` });
  await tx.ready();
  await writeAbortedAndCommitted(tx, topic);
  await tx.close();

  const consumer = client.consumer({ groupId: uniqueName("rc-reader"), clientId: "rc-reader", topics: [topic], offsetReset: "earliest" });
  await consumer.start();
  const read = await pollUntil(consumer, 15, 20_000);
  // Read past the expected count for a while, so a leaked record would be seen.
  read.push(...(await pollFor(consumer, 1500)));
  await consumer.close();
  expect(countTags(read)).toEqual({ "committed-1": 5, "committed-2": 10 });
  const admin = client.admin({ clientId: "rc-admin" });
  try {
    expect(countTags(await admin.readPartition(topic, 0))).toEqual({ "committed-1": 5, "committed-2": 10 });
  } finally {
    await admin.close();
  }
}, 60_000);
