/**
 * The best pass-through fv-streams' own Kafka client reaches: consume → produce unchanged →
 * commit every second, no decode, no transform (the loop of bench/pipeline.ts's `raw`, as a
 * process of its own so that bench/peers/run.ts times it like every other engine).
 *
 *   bun bench/peers/passthrough.ts INPUT OUTPUT GROUP      runs until SIGTERM
 */
import { platformaticClient } from "../../src/kafka/platformatic/index.ts";

const [input, output, group] = process.argv.slice(2) as [string, string, string];
const client = platformaticClient((process.env.STREAM_BROKERS ?? "127.0.0.1:9092").split(","));
const consumer = client.consumer({ groupId: group, clientId: `${group}-c`, topics: [input], offsetReset: "earliest", maxBuffered: 4000 });
const producer = client.producer({ clientId: `${group}-p` });
let stopping = false;
for (const signal of ["SIGTERM", "SIGINT"] as const) process.on(signal, () => { stopping = true; });

await consumer.start();
let lastCommit = performance.now();
const next = new Map<number, { topic: string; partition: number; offset: bigint }>();
while (!stopping) {
  const batch = await consumer.poll(1000, 200);
  if (batch.length === 0) continue;
  await producer.send(batch.map((r) => ({ topic: output, key: r.key, value: r.value, headers: r.headers })));
  for (const r of batch) next.set(r.partition, { topic: r.topic, partition: r.partition, offset: r.offset + 1n });
  if (performance.now() - lastCommit > 1000) {
    await consumer.commit([...next.values()]);
    lastCommit = performance.now();
  }
}
await consumer.close();
await producer.close();
process.exit(0);
