/**
 * The soak's own broker (scripts/kafka.sh with FV_KAFKA_HOME=<repo>/.kafka-soak and
 * FV_KAFKA_PORT=19092), the independent Java reader (KafkaCheck create / dump / lag through
 * kafka.sh), and the feeder that writes the input topic at a steady rate.
 *
 * The feeder uses @platformatic/kafka directly, not the engine's adapter in src/kafka/: the soak
 * judges the engine, so it leans on the engine's code as little as it can.
 */
import { spawn, spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { Producer } from "@platformatic/kafka";
import { say, sleep, track, within } from "./util.ts";

export const ROOT = resolve(import.meta.dir, "../..");
export const SOAK_KAFKA_HOME = join(ROOT, ".kafka-soak");
export const SOAK_KAFKA_PORT = 19092;
export const BOOTSTRAP = `127.0.0.1:${SOAK_KAFKA_PORT}`;
const KAFKA_SH = join(ROOT, "scripts/kafka.sh");

/** kafka.sh's environment for the soak broker. STREAM_BROKERS is unset: `up` would skip the start if it pointed elsewhere. */
function kafkaEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, FV_KAFKA_HOME: SOAK_KAFKA_HOME, FV_KAFKA_PORT: String(SOAK_KAFKA_PORT) };
  delete env.STREAM_BROKERS;
  return env;
}

/** Runs `scripts/kafka.sh ARGS` against the soak broker; resolves with its exit code and output. */
export function kafkaSh(args: string[], options: { timeoutMs?: number; quiet?: boolean } = {}): Promise<{ code: number; out: string }> {
  return new Promise((resolveRun) => {
    const child = track(spawn("bash", [KAFKA_SH, ...args], { cwd: ROOT, env: kafkaEnv(), stdio: ["ignore", "pipe", "pipe"], detached: true }));
    let out = "";
    child.stdout!.on("data", (c: Buffer) => (out += c.toString()));
    child.stderr!.on("data", (c: Buffer) => (out += c.toString()));
    const timer = options.timeoutMs
      ? setTimeout(() => {
          out += `\n(soak: kafka.sh ${args[0]} killed after ${options.timeoutMs} ms)`;
          try {
            process.kill(-child.pid!, "SIGKILL");
          } catch {
            // gone
          }
        }, options.timeoutMs)
      : undefined;
    child.on("exit", (code, signal) => {
      clearTimeout(timer);
      const result = { code: code ?? (signal ? 128 : 1), out: out.trimEnd() };
      if (!options.quiet) for (const line of result.out.split("\n").filter(Boolean)) say(`  ${line}`);
      resolveRun(result);
    });
  });
}

/** `kafka.sh down` from an exit handler (synchronous). */
export function stopBrokerSync(): void {
  spawnSync("bash", [KAFKA_SH, "down"], { cwd: ROOT, env: kafkaEnv(), stdio: "ignore", timeout: 45_000 });
}

export async function brokerUp(): Promise<void> {
  const up = await kafkaSh(["up"]);
  if (up.code !== 0) throw new Error(`kafka.sh up failed (exit ${up.code})`);
  // `up` leaves alone a broker it did not start: make sure the one answering is ours.
  const status = await kafkaSh(["status"], { quiet: true });
  if (!/^running \(pid \d+\)/.test(status.out)) throw new Error(`the soak broker is not ours: kafka.sh status says "${status.out}"`);
}

export async function brokerDown(): Promise<void> {
  const down = await kafkaSh(["down"]);
  if (down.code !== 0 || !/broker stopped|not running/.test(down.out)) throw new Error(`kafka.sh down failed (exit ${down.code})`);
}

export async function createTopic(topic: string, partitions: number): Promise<void> {
  const r = await kafkaSh(["create", topic, String(partitions)]);
  if (r.code !== 0) throw new Error(`could not create ${topic}: ${r.out}`);
}

/** One record as the Java read_committed reader dumped it. */
export interface Dumped {
  partition: number;
  offset: number;
  /** Kafka record timestamp (CreateTime), only in dumps taken with `timestamps`. */
  timestamp: number;
  value: string;
}

/** Reads the whole topic with the Java KafkaConsumer (read_committed), through a file. */
export async function dumpTopic(topic: string, file: string, timestamps: boolean): Promise<{ records: Dumped[]; note: string }> {
  const r = await kafkaSh(["dump", topic, file, ...(timestamps ? ["--timestamps"] : [])], { timeoutMs: 15 * 60_000 });
  if (r.code !== 0) throw new Error(`the Java dump of ${topic} failed (exit ${r.code}): ${r.out.split("\n").slice(-3).join(" | ")}`);
  const records: Dumped[] = [];
  const text = readFileSync(file, "utf8");
  let start = 0;
  while (start < text.length) {
    let end = text.indexOf("\n", start);
    if (end < 0) end = text.length;
    const line = text.slice(start, end);
    start = end + 1;
    if (!line) continue;
    const t1 = line.indexOf("\t");
    const t2 = line.indexOf("\t", t1 + 1);
    const partition = Number(line.slice(0, t1));
    const offset = Number(line.slice(t1 + 1, t2));
    if (timestamps) {
      const t3 = line.indexOf("\t", t2 + 1);
      records.push({ partition, offset, timestamp: Number(line.slice(t2 + 1, t3)), value: line.slice(t3 + 1) });
    } else {
      records.push({ partition, offset, timestamp: 0, value: line.slice(t2 + 1) });
    }
  }
  return { records, note: r.out.split("\n").filter((l) => /^dump |WARNING/.test(l)).join("; ") };
}

/** Total lag per group on `topic` (end offsets minus committed offsets), from the Java admin client. */
export async function groupLag(topic: string, groups: string[]): Promise<Map<string, number> | undefined> {
  const r = await kafkaSh(["lag", topic, ...groups], { quiet: true, timeoutMs: 60_000 });
  if (r.code !== 0) return undefined;
  const out = new Map<string, number>();
  for (const line of r.out.split("\n")) {
    const [group, total] = line.split("\t");
    if (group && total !== undefined && groups.includes(group)) out.set(group, Number(total));
  }
  return out.size === groups.length ? out : undefined;
}

/**
 * The transactions the coordinator has not completed and each group's partitions of `topic` whose
 * committed offset is not stable (a transactional offset commit pending), as KafkaCheck prints them.
 */
export async function openTransactions(topic: string, groups: string[]): Promise<string[]> {
  const r = await kafkaSh(["transactions", topic, ...groups], { quiet: true, timeoutMs: 120_000 });
  return r.out.split("\n").filter((l) => /^(transaction|transactions|unstable)\t/.test(l)).map((l) => l.replaceAll("\t", " "));
}

/** The row the feeder writes. `key` is also the message key. */
export interface InputRow {
  id: number;
  key: string;
  v: number;
  ts: number;
}
export const KEYS = 50;

/**
 * Writes rows `{ id, key, v, ts }` at `rate` rows/s with an idempotent producer, in batches of at
 * most 100 ms' worth (more while catching up after an outage). Each batch is sent, awaited, and
 * only then the next one is made, so the rows of a partition are in id and ts order. A failed
 * send is retried with the same rows (same ids, same ts) on a fresh producer until it succeeds:
 * a send whose rows reached the broker although it reported a failure writes them twice, which
 * the judges see (they count occurrences per id in the input as the Java reader dumps it).
 */
export class Feeder {
  /** Rows acknowledged by the broker (a retried batch counts once). */
  acked = 0;
  nextId = 0;
  batches = 0;
  sendFailures = 0;
  sendTimeouts = 0;
  /** Rows of a batch the feeder gave up on at the end (never acknowledged). */
  gaveUp = 0;
  firstErrors: string[] = [];
  #producer: Producer | undefined;
  #stopping = false;
  #stopDeadline = Infinity;
  #loop: Promise<void> | undefined;
  readonly #rng: () => number;

  constructor(readonly topic: string, readonly rate: number, rng: () => number) {
    this.#rng = rng;
  }

  start(): void {
    this.#loop = this.#run();
  }

  /** Stops making rows; a batch in flight keeps being retried for up to `graceMs`. */
  async stop(graceMs = 120_000): Promise<void> {
    this.#stopping = true;
    this.#stopDeadline = Date.now() + graceMs;
    await this.#loop;
    await within(this.#producer?.close().catch(() => {}) ?? Promise.resolve(), 10_000, undefined);
  }

  #newProducer(): Producer {
    return new Producer({
      clientId: "fv-soak-feeder",
      bootstrapBrokers: [BOOTSTRAP],
      acks: -1,
      idempotent: true,
      autocreateTopics: false,
      timeout: 10_000,
      retries: 2,
      retryDelay: 500,
    });
  }

  async #run(): Promise<void> {
    const t0 = Date.now();
    while (!this.#stopping) {
      const due = Math.floor(((Date.now() - t0) * this.rate) / 1000);
      const n = Math.min(due - this.nextId, 20_000);
      if (n <= 0) {
        await sleep(20);
        continue;
      }
      const ts = Date.now();
      const messages = [];
      for (let i = 0; i < n; i++) {
        const id = this.nextId + i;
        const row: InputRow = { id, key: `k${id % KEYS}`, v: Math.floor(this.#rng() * 1000), ts };
        messages.push({ topic: this.topic, key: Buffer.from(row.key), value: Buffer.from(JSON.stringify(row)) });
      }
      this.nextId += n;
      await this.#send(messages);
      // Catching up: give the event loop (the children's log pipes) a turn between batches.
      if (n > this.rate / 5) await sleep(5);
    }
  }

  async #send(messages: Array<{ topic: string; key: Buffer; value: Buffer }>): Promise<void> {
    let backoff = 250;
    for (;;) {
      this.#producer ??= this.#newProducer();
      const producer = this.#producer;
      let error: unknown;
      try {
        const result = await within(producer.send({ messages }).then(() => "ok" as const), 30_000, "timeout" as const);
        if (result === "ok") {
          this.acked += messages.length;
          this.batches++;
          return;
        }
        this.sendTimeouts++;
        error = new Error("send did not settle within 30 s");
      } catch (e) {
        error = e;
      }
      this.sendFailures++;
      const text = `${(error as Error)?.message ?? error}`.slice(0, 200);
      if (this.firstErrors.length < 5) this.firstErrors.push(text);
      if (this.sendFailures === 1 || this.sendFailures % 10 === 0) say(`feeder: send failed (${this.sendFailures} so far): ${text}; retrying the same ${messages.length} rows`);
      // A fresh producer after a failure: the old one may hold dead connections or a stale epoch.
      this.#producer = undefined;
      void within(producer.close().catch(() => {}), 5_000, undefined);
      if (this.#stopping && Date.now() > this.#stopDeadline) {
        this.gaveUp += messages.length;
        say(`feeder: gave up on ${messages.length} rows (ids ${JSON.parse(messages[0]!.value.toString()).id}..) at the end`);
        return;
      }
      await sleep(backoff);
      backoff = Math.min(backoff * 2, 2_000);
    }
  }
}
