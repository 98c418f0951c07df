/**
 * Point reads of queryable state per second: two processes (A and B) run a windowed count over
 * KEYS keys in 4 partitions; then GET /state/1/keys/{key} is sent to A for keys A holds (answered
 * locally) and for keys B holds (forwarded by A to B), CONCURRENCY requests in flight, for a few
 * seconds each. Printed: reads/s of each, and the ratio in this run.
 *
 *   bun bench/state-reads.ts [keys=10000] [seconds=5] [concurrency=16]
 */
import { createTopic } from "../test/helpers/kafka.ts";
import { adminUrlOf, startCli, waitFor } from "../test/helpers/cli.ts";
import { windowedCountPipeline } from "../test/helpers/pipelines.ts";
import { client, nextName, runtimeName } from "./lib.ts";

const KEYS = Number(process.argv[2] ?? 10_000);
const SECONDS = Number(process.argv[3] ?? 5);
const CONCURRENCY = Number(process.argv[4] ?? 16);
const T0 = Date.UTC(2026, 0, 1);

const name = nextName("bench-reads");
const input = `${name}-in`;
await createTopic(input, 4);
const producer = client.producer({ clientId: "bench-reads" });
for (let from = 0; from < KEYS; from += 5000) {
  await producer.send(Array.from({ length: Math.min(5000, KEYS - from) }, (_, i) => ({ topic: input, key: `m${from + i}`, value: JSON.stringify({ g: `k${from + i}`, qty: 1, ts: T0 }) })));
}
await producer.close();

const file = windowedCountPipeline(name, input, `${name}-out`, "g");
const a = startCli(["run", file], { env: { STREAM_INSTANCE_ID: `${name}-a` } });
const b = startCli(["run", file], { env: { STREAM_INSTANCE_ID: `${name}-b` } });
try {
  const [adminA, adminB] = await Promise.all([adminUrlOf(a), adminUrlOf(b)]);
  // Which process holds which key: each one's local scan (forwarded requests answer from local state only).
  const localKeys = async (admin: string) => {
    const keys: string[] = [];
    let cursor: string | null = "";
    while (cursor !== null) {
      const res = await fetch(`${admin}/state/1/scan?limit=10000${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`, { headers: { "x-fv-forwarded": "1" } });
      if (res.status !== 200) return [];
      const body = (await res.json()) as { items: Array<{ key: { g: string } }>; cursor: string | null };
      keys.push(...body.items.map((i) => i.key.g));
      cursor = body.cursor;
    }
    return keys;
  };
  let onA: string[] = [];
  let onB: string[] = [];
  await waitFor(async () => {
    [onA, onB] = await Promise.all([localKeys(adminA), localKeys(adminB)]);
    return onA.length > 0 && onB.length > 0 && onA.length + onB.length === KEYS;
  }, 120_000, `all ${KEYS} keys counted, split between A and B`);

  const hammer = async (keys: string[]) => {
    let reads = 0;
    let errors = 0;
    const until = Date.now() + SECONDS * 1000;
    await Promise.all(Array.from({ length: CONCURRENCY }, async (_, worker) => {
      for (let i = worker; Date.now() < until; i += CONCURRENCY) {
        const res = await fetch(`${adminA}/state/1/keys/${keys[i % keys.length]}`);
        await res.arrayBuffer();
        if (res.status === 200) reads++;
        else errors++;
      }
    }));
    return { perSecond: Math.round(reads / SECONDS), errors };
  };
  const local = await hammer(onA);
  const forwarded = await hammer(onB);
  console.log(`point reads of queryable state (${runtimeName()}, ${KEYS.toLocaleString("en")} keys, ${CONCURRENCY} in flight, ${SECONDS} s each)`);
  console.log(`  local (A holds the key):      ${local.perSecond.toLocaleString("en")} reads/s, ${local.errors} errors`);
  console.log(`  forwarded (A asks B):         ${forwarded.perSecond.toLocaleString("en")} reads/s, ${forwarded.errors} errors`);
  console.log(`  forwarded ÷ local:            ${(forwarded.perSecond / Math.max(1, local.perSecond)).toFixed(2)}`);
} finally {
  a.child.kill("SIGTERM");
  b.child.kill("SIGTERM");
  await Promise.all([a.exited, b.exited]);
}
