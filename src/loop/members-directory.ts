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
import { deadline } from "../async.ts";
import type { Admin, KafkaClient, Producer } from "../kafka/port.ts";
import type { Logger } from "../logger.ts";

export const membersTopicOf = (pipeline: string) => `fv-members-${pipeline}`;

/** How often a process says it is still there, and after how long without that it is taken for gone. */
export const ADVERTISE_EVERY_MS = 3_000;
export const GONE_AFTER_MS = 15_000;
/** Peers are read again at most this often. */
const READ_EVERY_MS = 500;
/** How long one call to the broker may take here. */
const CALL_TIMEOUT_MS = 5_000;

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
  #advertising = false;
  /** A failure to advertise, said once until it works again. */
  #warned = false;
  #readWarned = false;

  constructor(client: KafkaClient, pipeline: string, self: { instance: string; admin: string }, log: Logger) {
    this.#topic = membersTopicOf(pipeline);
    this.#self = self;
    this.#log = log;
    this.#admin = client.admin({ clientId: `fv-members-${self.instance}` });
    this.#producer = client.producer({ clientId: `fv-members-${self.instance}` });
  }

  async start(): Promise<void> {
    await deadline(this.#admin.createTopics([{ topic: this.#topic, partitions: 1, configs: { "cleanup.policy": "compact", "segment.ms": "600000" } }]), CALL_TIMEOUT_MS);
    await this.#advertise();
    this.#timer = setInterval(() => void this.#advertise(), ADVERTISE_EVERY_MS);
    (this.#timer as { unref?: () => void }).unref?.();
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
    // Bounded: a broker that is down must not hold the process's exit (the others forget it after GONE_AFTER_MS anyway).
    await deadline(this.#producer.send([{ topic: this.#topic, partition: 0, key: this.#self.instance, value: null }]), CALL_TIMEOUT_MS).catch(() => {});
    await deadline(Promise.allSettled([this.#producer.close(), this.#admin.close()]), CALL_TIMEOUT_MS).catch(() => {});
  }

  async #advertise(): Promise<void> {
    if (this.#advertising) return; // the last one is still under way (a broker that is down)
    this.#advertising = true;
    const value = JSON.stringify({ instance: this.#self.instance, admin: this.#self.admin, at: Date.now() });
    try {
      await this.#producer.send([{ topic: this.#topic, partition: 0, key: this.#self.instance, value }]);
      this.#warned = false;
    } catch (error) {
      if (!this.#warned) this.#log("warn", `advertising this process's admin URL in ${this.#topic}: ${(error as Error).message} (other processes cannot forward state reads here until it works; trying again every ${ADVERTISE_EVERY_MS / 1000} s)`);
      this.#warned = true;
    } finally {
      this.#advertising = false;
    }
  }

  async #read(): Promise<void> {
    try {
      const records = await deadline(this.#admin.readPartition(this.#topic, 0, { from: this.#next }), CALL_TIMEOUT_MS);
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
      // The peers known so far stay (until GONE_AFTER_MS); said once until a read works again.
      if (!this.#readWarned) this.#log("warn", `reading ${this.#topic}: ${(error as Error).message} (state reads are forwarded to the processes known so far)`);
      this.#readWarned = true;
      return;
    }
    this.#readWarned = false;
  }
}
