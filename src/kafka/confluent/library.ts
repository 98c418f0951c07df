/**
 * The librdkafka addon (@confluentinc/kafka-javascript) and the small pieces every part of the
 * adapter uses with it: loading it, callbacks as promises, connecting and records.
 */
import { Buffer } from "node:buffer";
import { createRequire } from "node:module";
import type * as Rd from "@confluentinc/kafka-javascript";
import type { InboundRecord } from "../port.ts";

export type Library = typeof import("@confluentinc/kafka-javascript");

/** Loads the addon; throws when it is not installed or does not load on this runtime. */
export function loadLibrary(): Library {
  return createRequire(import.meta.url)("@confluentinc/kafka-javascript") as Library;
}

/** Most time one admin request (or a connect) may take. */
export const ADMIN_TIMEOUT_MS = 10_000;
/** A fetch waits at most this long on the broker for new data: short, so polls stay responsive. */
export const FETCH_MAX_WAIT_MS = 100;

/** Turns a callback-style call into a promise. */
export function call<T = void>(start: (cb: (err: unknown, value?: T) => void) => void): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    start((err, value) => (err ? reject(err) : resolve(value as T)));
  });
}

export const connect = (client: Rd.Producer | Rd.KafkaConsumer) => call<Rd.Metadata>((cb) => client.connect({ timeout: ADMIN_TIMEOUT_MS }, cb));
export const disconnect = (client: Rd.Producer | Rd.KafkaConsumer) =>
  call<unknown>((cb) => client.disconnect(cb)).catch(() => {});

/** Consumer methods the library has but does not declare in its types. */
interface ConsumerExtras {
  /** consume(n) returns as soon as one record is there, with what else is ready, instead of waiting for n. */
  setDefaultIsTimeoutOnlyForFirstMessage(value: boolean): void;
  /** An asynchronous commit of explicit offsets (librdkafka commitAsync): the callback says it was queued, not that the group has it. */
  commitCb(offsets: Rd.TopicPartitionOffset[], cb: (err: unknown) => void): void;
  /** Whether the revoke under way is of a lost assignment (the session expired). */
  assignmentLost(): boolean;
}
export const extras = (consumer: Rd.KafkaConsumer) => consumer as unknown as ConsumerExtras;

export function toInbound(message: Rd.Message): InboundRecord {
  const headers: Array<[string, Uint8Array]> = [];
  for (const header of message.headers ?? []) {
    for (const [hk, hv] of Object.entries(header)) headers.push([hk, typeof hv === "string" ? Buffer.from(hv) : hv]);
  }
  const k = message.key;
  return {
    topic: message.topic,
    partition: message.partition,
    offset: BigInt(message.offset),
    timestamp: BigInt(message.timestamp ?? 0),
    key: k === undefined || k === null ? null : typeof k === "string" ? Buffer.from(k) : k,
    value: message.value ?? null,
    headers,
  };
}
