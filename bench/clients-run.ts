/**
 * One measurement of bench/clients.ts, in the runtime under test (Bun, Deno, or Node from
 * .fv/node/): the filter pipeline or the raw pass-through over a pre-loaded topic with one Kafka
 * client. Prints one JSON line `{"rate": records per second}`.
 *
 *   <runtime> bench/clients-run.ts INPUT RECORDS platformatic|confluent pipeline|raw
 */
import process from "node:process";
import { resolveKafkaClient } from "../src/kafka/clients.ts";
import { BROKERS, nextName, timeEngine } from "./lib.ts";

const [input, n, clientName, mode] = process.argv.slice(2);
const N = Number(n);
if (!input || !(N > 0) || !clientName || (mode !== "pipeline" && mode !== "raw")) {
  process.stderr.write("usage: clients-run.ts INPUT RECORDS platformatic|confluent pipeline|raw\n");
  process.exit(2);
}

/** Consume → produce unchanged → commit through the port, nothing else: the client's ceiling. */
async function raw(): Promise<number> {
  const client = (await resolveKafkaClient(clientName!)).factory(BROKERS.split(","));
  const output = nextName("bench-raw");
  const admin = client.admin({ clientId: "bench-admin" });
  await admin.createTopics([{ topic: output, partitions: 4 }]);
  await admin.close();
  const started = performance.now();
  const consumer = client.consumer({ groupId: output, clientId: "bench-raw", topics: [input!], offsetReset: "earliest", maxBuffered: 4000 });
  const producer = client.producer({ clientId: "bench-raw-p" });
  await consumer.start();
  let done = 0;
  let lastCommit = performance.now();
  const next = new Map<number, { topic: string; partition: number; offset: bigint }>();
  while (done < N) {
    const batch = await consumer.poll(1000, 200);
    if (batch.length === 0) continue;
    await producer.send(batch.map((r) => ({ topic: output, key: r.key, value: r.value, headers: r.headers })));
    done += batch.length;
    for (const r of batch) next.set(r.partition, { topic: r.topic, partition: r.partition, offset: r.offset + 1n });
    if (performance.now() - lastCommit > 200) {
      await consumer.commit([...next.values()]);
      lastCommit = performance.now();
    }
  }
  const seconds = (performance.now() - started) / 1000;
  await consumer.close();
  await producer.close();
  return N / seconds;
}

// The same steps as bench/pipeline.ts's "filter keeps ~50% + computed column".
const steps = [{ op: "filter", expression: "price > 100" }, { op: "applyExpression", column: "notional", expression: "price * qty" }];
const rate = mode === "raw" ? await raw() : await timeEngine(input, N, steps, { STREAM_KAFKA_CLIENT: clientName });
process.stdout.write(JSON.stringify({ rate }) + "\n");
process.exit(0);
