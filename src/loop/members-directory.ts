/**
 * Where the other processes of a pipeline answer: each process advertises its admin URL in the
 * compacted topic `fv-members-<pipeline>` (one record per process, keyed by its instance id,
 * refreshed every few seconds, a tombstone when it stops cleanly). The /state routes ask these
 * peers for keys this process does not hold.
 *
 * Why a topic and not the consumer group's member metadata: only the pure-JS client lets us put
 * our own bytes into the member metadata (librdkafka's assignors own it), and a topic is readable
 * by any process or tool that knows the pipeline, whichever client it runs.
 */
import type { Admin, KafkaClient, Producer } from "../kafka/port.ts";
import type { Logger } from "../logger.ts";

export const membersTopicOf = (pipeline: string) => `fv-members-${pipeline}`;

/** How often a process says it is still there, and after how long without that it is taken for gone. */
export const ADVERTISE_EVERY_MS = 3_000;
export const GONE_AFTER_MS = 15_000;
/** Peers are read again at most this often. */
const READ_EVERY_MS = 500;

export interface Peer {
  instance: string;
  /** The admin server's URL (`http://host:port`). */
  admin: string;
  /** When it last said it was there (epoch ms). */
  at: number;
}

export class MembersDirectory {
  readonly #topic: string;
  readonly #self: { instance: string; admin: string };
  readonly #log: Logger;
  readonly #admin: Admin;
  readonly #producer: Producer;
  readonly #latest = new Map<string, Peer>();
  #next = 0n;
  #readAt = 0;
  #reading: Promise<void> | undefined;
  #timer: ReturnType<typeof setInterval> | undefined;

  constructor(client: KafkaClient, pipeline: string, self: { instance: string; admin: string }, log: Logger) {
    this.#topic = membersTopicOf(pipeline);
    this.#self = self;
    this.#log = log;
    this.#admin = client.admin({ clientId: `fv-members-${self.instance}` });
    this.#producer = client.producer({ clientId: `fv-members-${self.instance}` });
  }

  async start(): Promise<void> {
    await this.#admin.createTopics([{ topic: this.#topic, partitions: 1, configs: { "cleanup.policy": "compact", "segment.ms": "600000" } }]);
    await this.#advertise();
    this.#timer = setInterval(() => void this.#advertise(), ADVERTISE_EVERY_MS);
  }

  /** The other processes that said they were there lately. */
  async peers(): Promise<Peer[]> {
    if (Date.now() - this.#readAt > READ_EVERY_MS) {
      this.#reading ??= this.#read().finally(() => (this.#reading = undefined));
      await this.#reading;
    }
    const now = Date.now();
    return [...this.#latest.values()].filter((p) => p.instance !== this.#self.instance && now - p.at < GONE_AFTER_MS).sort((a, b) => a.instance.localeCompare(b.instance));
  }

  /** Says goodbye (a tombstone) and closes. */
  async stop(): Promise<void> {
    clearInterval(this.#timer);
    await this.#producer.send([{ topic: this.#topic, partition: 0, key: this.#self.instance, value: null }]).catch(() => {});
    await Promise.allSettled([this.#producer.close(), this.#admin.close()]);
  }

  async #advertise(): Promise<void> {
    const value = JSON.stringify({ instance: this.#self.instance, admin: this.#self.admin, at: Date.now() });
    try {
      await this.#producer.send([{ topic: this.#topic, partition: 0, key: this.#self.instance, value }]);
    } catch (error) {
      this.#log("warn", `advertising this process's admin URL in ${this.#topic}: ${(error as Error).message} (other processes cannot forward state reads here until it works)`);
    }
  }

  async #read(): Promise<void> {
    try {
      const records = await this.#admin.readPartition(this.#topic, 0, { from: this.#next });
      const decoder = new TextDecoder();
      for (const record of records) {
        const key = record.key ? decoder.decode(record.key) : "";
        if (record.value === null) this.#latest.delete(key);
        else {
          try {
            const peer = JSON.parse(decoder.decode(record.value)) as Peer;
            if (typeof peer.admin === "string" && typeof peer.at === "number") this.#latest.set(key, { instance: key, admin: peer.admin, at: peer.at });
          } catch {
            // Not ours: skipped.
          }
        }
        this.#next = record.offset + 1n;
      }
      this.#readAt = Date.now();
    } catch (error) {
      this.#log("warn", `reading ${this.#topic}: ${(error as Error).message}`);
    }
  }
}
