/**
 * Rows/s into the local PostgreSQL (sink = "postgres": upserts on the key, one SQL transaction
 * per checkpoint with the input offsets) against the same pipeline into a Kafka topic, in the
 * same run and alternating, so the ratio holds on a noisy machine. One consumer, 4 partitions,
 * ~200-byte rows with a unique id each. Results are printed, not asserted.
 *
 *   bash scripts/postgres.sh up && node_modules/.bin/bun bench/sinks.ts [rows] [rounds] [checkpointMs]
 */
import postgres from "postgres";
import { BROKERS, fmt, load, median, nextName, runEngine, runtimeName } from "./lib.ts";

const ROWS = Number(process.argv[2] ?? 200_000);
const ROUNDS = Number(process.argv[3] ?? 2);
const CHECKPOINT_MS = process.argv[4] ?? "1000";
const PG_URL = process.env.FV_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
const steps = [{ op: "select", columns: ["id", "sym", "price", "qty", "side", "ts"] }];
const env = { STREAM_CONSUMERS: "1", STREAM_CHECKPOINT_INTERVAL_MS: CHECKPOINT_MS };

const sql = postgres(PG_URL, { onnotice: () => {}, max: 1 });
const input = nextName("bench-sink-in");
await load(input, ROWS);
console.log(`sinks, ${runtimeName()}, broker ${BROKERS}, ${PG_URL}: ${ROWS} rows, 1 consumer, 4 partitions, checkpoint every ${CHECKPOINT_MS} ms`);

const kafka: number[] = [];
const pg: number[] = [];
for (let round = 1; round <= ROUNDS; round++) {
  const k = await runEngine(nextName("bench-sink-kafka"), input, ROWS, steps, env);
  kafka.push(k.steady);
  const table = `bench_sink_${Date.now().toString(36)}_${round}`;
  const pipeline = nextName("bench-sink-pg");
  const p = await runEngine(pipeline, input, ROWS, steps, env, (m) => (m.sinkWritten ?? 0) >= ROWS, {
    sink: "postgres",
    sinkConfig: { kind: "postgres", url: PG_URL, table, key: ["id"] },
  });
  pg.push(p.steady);
  const c = (await sql.unsafe(`SELECT count(*) AS c FROM ${table}`))[0]!.c;
  const commits = await sql`SELECT count(*) AS c FROM fv_sink_offsets WHERE pipeline = ${pipeline} AND topic = ${input}`;
  console.log(`round ${round}: kafka ${fmt(k.steady)} rows/s (${fmt(k.total)} from start), postgres ${fmt(p.steady)} rows/s (${fmt(p.total)} from start); table rows ${c}, offset rows ${commits[0]!.c}`);
  await sql.unsafe(`DROP TABLE ${table}`);
}
console.log(`| into | rows/s (steady, median of ${ROUNDS}) |`);
console.log(`| --- | --: |`);
console.log(`| Kafka topic | ${fmt(median(kafka))} |`);
console.log(`| Postgres (upsert, 1 transaction per checkpoint) | ${fmt(median(pg))} |`);
console.log(`postgres ÷ kafka: ${(median(pg) / median(kafka)).toFixed(2)}`);
await sql.end();
process.exit(0);
