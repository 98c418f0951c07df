/**
 * End-to-end throughput of a filter pipeline against the raw pass-through ceiling of the same
 * client, in one run, on the real local broker.
 *
 *   bun bench/pipeline.ts [records=200000] [consumers=1]
 *
 * All read the same pre-loaded 4-partition topic of ~200-byte JSON rows with a fresh group and
 * are timed from start (group join included) until every input record is processed and its
 * outputs are acknowledged. Prints records/s and ratios to the raw rate. Nothing is asserted.
 */
import { BROKERS, client, fmt, load, median, nextName, runtimeName, timeEngine } from "./lib.ts";

const N = Number(process.argv[2] ?? 200_000);
const CONSUMERS = Number(process.argv[3] ?? 1);
const ROUNDS = 3;
const input = nextName("bench-in");

/** Consume → produce unchanged → commit, nothing else: the client's ceiling. */
async function raw(): Promise<number> {
  const output = nextName("bench-raw");
  const admin = client.admin({ clientId: "bench-admin" });
  await admin.createTopics([{ topic: output, partitions: 4 }]);
  await admin.close();
  const started = performance.now();
  const members = await Promise.all(Array.from({ length: CONSUMERS }, async (_, i) => {
    const consumer = client.consumer({ groupId: output, clientId: `bench-raw-${i}`, topics: [input], offsetReset: "earliest", maxBuffered: 4000 });
    const producer = client.producer({ clientId: `bench-raw-p${i}` });
    await consumer.start();
    return { consumer, producer };
  }));
  let done = 0;
  await Promise.all(members.map(async ({ consumer, producer }) => {
    let lastCommit = performance.now();
    while (done < N) {
      const batch = await consumer.poll(1000, 200);
      if (batch.length === 0) continue;
      await producer.send(batch.map((r) => ({ topic: output, key: r.key, value: r.value, headers: r.headers })));
      done += batch.length;
      if (performance.now() - lastCommit > 200) {
        const next = new Map<number, { topic: string; partition: number; offset: bigint }>();
        for (const r of batch) next.set(r.partition, { topic: r.topic, partition: r.partition, offset: r.offset + 1n });
        await consumer.commit([...next.values()]);
        lastCommit = performance.now();
      }
    }
  }));
  const seconds = (performance.now() - started) / 1000;
  await Promise.all(members.map(async ({ consumer, producer }) => {
    await consumer.close();
    await producer.close();
  }));
  return N / seconds;
}

const steps = (filter: string) => [{ op: "filter", expression: filter }, { op: "applyExpression", column: "notional", expression: "price * qty" }];
const env = { STREAM_CONSUMERS: String(CONSUMERS) };

await load(input, N);
console.log(`fv-streams pipeline benchmark: ${N} records (~200 B JSON), 4 partitions, ${CONSUMERS} consumer(s), ${runtimeName()}, brokers ${BROKERS}, median of ${ROUNDS} interleaved rounds`);
const results = { raw: [] as number[], all: [] as number[], half: [] as number[] };
for (let r = 0; r < ROUNDS; r++) {
  results.raw.push(await raw());
  results.all.push(await timeEngine(input, N, steps("price >= 0"), env));
  results.half.push(await timeEngine(input, N, steps("price > 100"), env));
}
const rawRate = median(results.raw);
console.log(`raw pass-through (consume → produce, no transform) ${fmt(rawRate)} records/s   1.00`);
console.log(`fv-streams, filter keeps all + computed column      ${fmt(median(results.all))} records/s   ${(median(results.all) / rawRate).toFixed(2)}`);
console.log(`fv-streams, filter keeps ~50% + computed column     ${fmt(median(results.half))} records/s   ${(median(results.half) / rawRate).toFixed(2)}`);
process.exit(0);
