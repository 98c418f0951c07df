/** Records between the port's shape and @platformatic/kafka's. */
import type { Buffer } from "node:buffer";
import type { Message, Producer } from "@platformatic/kafka";
import { murmur2 } from "../murmur2.ts";
import type { InboundRecord, OutboundRecord } from "../port.ts";
import { toBuffer } from "../shared.ts";

/** The 1 of the Kafka protocol's isolation level: read_committed. */
export const READ_COMMITTED = 1;

export type LibraryMessage = Message<Buffer, Buffer, Buffer, Buffer>;

export function toInbound(message: LibraryMessage): InboundRecord {
  const headers: Array<[string, Uint8Array]> = [];
  for (const [hk, hv] of message.headers) headers.push([hk.toString(), hv]);
  return {
    topic: message.topic,
    partition: message.partition,
    offset: message.offset,
    timestamp: message.timestamp,
    key: message.key ?? null,
    value: message.value ?? null,
    headers,
  };
}

/**
 * A record as the library's producer takes it. Strings (keys, values, headers) stay strings: the
 * Produce encoder (produce-encoder.ts) writes them straight into the request, with no Buffer of
 * their own, and the partitioner hashes a string key's UTF-8 bytes.
 */
export function toMessage(r: OutboundRecord) {
  return {
    topic: r.topic,
    key: typeof r.key === "string" ? r.key : toBuffer(r.key),
    value: typeof r.value === "string" ? r.value : toBuffer(r.value),
    partition: r.partition,
    headers: r.headers?.length ? new Map(r.headers.map(([k, v]) => [k, typeof v === "string" ? v : toBuffer(v)!])) : undefined,
  };
}

export type OutgoingMessage = ReturnType<typeof toMessage>;

/** The library's producer as the adapters use it: values may be strings (see toMessage). */
export type LibraryProducer = Producer<Buffer | string, Buffer | string, string, Buffer | string>;

let keyless = 0;

/**
 * Kafka's default partitioner for the library's producers (src/kafka/murmur2.ts): the library
 * takes the result modulo the partition count. Its own default is not Java's (murmur2 >>> 0,
 * where Java takes & 0x7fffffff: half the keys landed elsewhere than a Java producer puts them)
 * and hashed with BigInt (11% of an exactly-once pipeline's CPU). Keyless records go round.
 */
export function partitioner(_message: unknown, key: Buffer | string | undefined): number {
  // An empty key is a key (Java hashes every non-null key): only a missing one goes round.
  return key != null ? murmur2(key) & 0x7fffffff : (keyless = (keyless + 1) & 0x7fffffff);
}
