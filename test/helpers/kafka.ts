/**
 * Test fixtures against the real local broker (started by `npm test` through scripts/setup.sh).
 * Every helper cleans up what it opens.
 */
import { spawnSync } from "node:child_process";
import { resolve } from "node:path";
import { platformaticClient } from "../../src/kafka/platformatic/index.ts";
import type { CommitOffset, InboundRecord, KafkaClient, OutboundRecord } from "../../src/kafka/port.ts";

export const BROKERS = process.env.STREAM_BROKERS ?? "127.0.0.1:9092";
export const client = platformaticClient(BROKERS.split(","));

/** A name no other test run uses: topics and groups stay apart. */
export function uniqueName(prefix: string): string {
  return `${prefix}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 7)}`;
}

export async function createTopic(topic: string, partitions: number, on: KafkaClient = client): Promise<void> {
  const admin = on.admin({ clientId: "fv-test-admin" });
  try {
    await admin.createTopics([{ topic, partitions }]);
    // The controller has it; wait until the metadata a process reads next shows it too (a broker
    // just started, with thousands of topics, lagged: a CLI started at once found no such topic).
    const until = Date.now() + 30_000;
    while ((await admin.partitionCounts([topic])).get(topic) !== partitions && Date.now() < until) await new Promise((r) => setTimeout(r, 100));
  } finally {
    await admin.close();
  }
}

export async function partitionCount(topic: string): Promise<number | undefined> {
  const admin = client.admin({ clientId: "fv-test-admin" });
  try {
    return (await admin.partitionCounts([topic])).get(topic);
  } finally {
    await admin.close();
  }
}

export async function committedOffsets(groupId: string, topics: string[]): Promise<CommitOffset[]> {
  const admin = client.admin({ clientId: "fv-test-admin" });
  try {
    return (await admin.committedOffsets(groupId, topics)).sort((a, b) => a.topic.localeCompare(b.topic) || a.partition - b.partition);
  } finally {
    await admin.close();
  }
}

/** Produces records in chunks (each acknowledged before the next). */
export async function produce(records: OutboundRecord[], chunk = 2000, on: KafkaClient = client): Promise<void> {
  const producer = on.producer({ clientId: "fv-test-producer" });
  try {
    for (let i = 0; i < records.length; i += chunk) await producer.send(records.slice(i, i + chunk));
  } finally {
    await producer.close();
  }
}

/**
 * Reads a topic from the start with a fresh group until `expected` records arrived, or until
 * nothing new came for `quietMs` (then returns what it has).
 */
export async function consumeAll(topic: string, options: { expected?: number; quietMs?: number; timeoutMs?: number } = {}): Promise<InboundRecord[]> {
  const { expected = Infinity, quietMs = 5000, timeoutMs = 120_000 } = options;
  const consumer = client.consumer({ groupId: uniqueName("fv-test-reader"), clientId: "fv-test-reader", topics: [topic], offsetReset: "earliest" });
  const out: InboundRecord[] = [];
  try {
    await consumer.start();
    const started = Date.now();
    let lastNew = Date.now();
    while (out.length < expected && Date.now() - started < timeoutMs && Date.now() - lastNew < quietMs) {
      const batch = await consumer.poll(5000, 250);
      if (batch.length) {
        out.push(...batch);
        lastNew = Date.now();
      }
    }
  } finally {
    await consumer.close();
  }
  return out;
}

const decoder = new TextDecoder();
export const text = (bytes: Uint8Array | null) => (bytes === null ? null : decoder.decode(bytes));
export const json = (record: InboundRecord) => JSON.parse(text(record.value)!);
export const header = (record: InboundRecord, name: string) => {
  const found = record.headers.find(([k]) => k === name);
  return found ? decoder.decode(found[1]) : undefined;
};

/**
 * Reads a topic from the start in the background, collecting every record (once per partition
 * and offset), until stopped. Lets a test wait for an exact output set while the pipeline runs.
 *
 * A reader that sees nothing new for `restartAfterMs` starts over with a fresh group: a consumer
 * of the pure-JS client was seen to stall on some partitions after reaching their end (see the
 * note of the first session); re-reading costs little here and keeps the tests about the pipeline.
 */
export function collect(topic: string, options: { restartAfterMs?: number; client?: KafkaClient } = {}) {
  const restartAfterMs = options.restartAfterMs ?? 8000;
  const on = options.client ?? client;
  const records: InboundRecord[] = [];
  const seen = new Set<string>();
  let running = true;
  let consumer: ReturnType<KafkaClient["consumer"]> | undefined;
  const done = (async () => {
    while (running) {
      const current = on.consumer({ groupId: uniqueName("fv-test-collector"), clientId: "fv-test-collector", topics: [topic], offsetReset: "earliest" });
      consumer = current;
      // A join that fails (the broker restarting) or does not finish in time is abandoned like a stalled reader.
      const started = current.start().then(() => true, () => false);
      if (!(await settlesWithin(started, restartAfterMs)) || !(await started)) {
        void current.close().catch(() => {});
        await new Promise((r) => setTimeout(r, 500));
        continue;
      }
      let lastNew = Date.now();
      while (running && Date.now() - lastNew < restartAfterMs) {
        let batch: InboundRecord[];
        try {
          batch = await current.poll(5000, 200);
        } catch {
          // The broker went away under the reader: start over.
          break;
        }
        for (const r of batch) {
          const k = `${r.partition}@${r.offset}`;
          if (seen.has(k)) continue;
          seen.add(k);
          records.push(r);
          lastNew = Date.now();
        }
      }
      await settlesWithin(current.close(), 5000);
    }
  })();
  return {
    records,
    async stop(): Promise<InboundRecord[]> {
      running = false;
      await settlesWithin(done, 15_000);
      if (consumer) await settlesWithin(consumer.close(), 5000);
      return records;
    },
  };
}

/** True when the promise settles (either way) within `ms`. */
async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
  const settled = promise.then(() => true as const, () => true as const);
  const result = await Promise.race([settled, timeout]);
  clearTimeout(timer);
  return result;
}

/**
 * A broker of the test's own (scripts/kafka.sh with FV_KAFKA_HOME and FV_KAFKA_PORT), for tests
 * that stop or restart a broker: the shared one on 9092 may be a user's or another checkout's,
 * and it must never go down under other tests. Fresh data each time; `remove()` stops it and
 * deletes its data.
 */
export function ownBroker(port: number) {
  const root = resolve(import.meta.dir, "../..");
  const env = { ...process.env, FV_KAFKA_HOME: `${root}/.kafka-test-${port}`, FV_KAFKA_PORT: String(port), STREAM_BROKERS: "" };
  const kafka = (cmd: string) => {
    const run = spawnSync("bash", [`${root}/scripts/kafka.sh`, cmd], { encoding: "utf8", env });
    if (run.status !== 0) throw new Error(`kafka.sh ${cmd} (port ${port}) failed:\n${run.stdout}${run.stderr}`);
    return run.stdout + run.stderr;
  };
  const brokers = `127.0.0.1:${port}`;
  return {
    brokers,
    /** The broker's home (its data under it): copied aside by a test that wants to read its logs (kafka-dump-log). */
    home: env.FV_KAFKA_HOME,
    client: platformaticClient([brokers]),
    start: () => (kafka("reset"), kafka("up")),
    down: () => kafka("down"),
    up: () => kafka("up"),
    remove: () => kafka("reset"),
  };
}
