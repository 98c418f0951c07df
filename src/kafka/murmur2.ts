/**
 * Kafka's default partition of a keyed record, as the Java producer (and so Kafka Streams) and
 * librdkafka's `murmur2_random` pick it: `toPositive(murmur2(key)) % partitions`. Every client
 * the engine drives partitions this way, so a key lands in the same partition whichever client
 * wrote it, and topics written by Java producers stay co-partitioned with ours (joins).
 *
 * @example
 * partitionOfKey(new TextEncoder().encode("21"), 4); // → toPositive(-973932308) % 4
 */

const encoder = new TextEncoder();
let scratch = new Uint8Array(256);

/** The Java client's `Utils.murmur2` of the key's bytes (a string's UTF-8), in 32-bit integer arithmetic (no BigInt). */
export function murmur2(key: Uint8Array | string): number {
  if (typeof key !== "string") return murmur2Bytes(key, key.length);
  // A string is encoded into a scratch buffer (no view of it made: one per record showed in profiles).
  if (key.length * 3 > scratch.length) scratch = new Uint8Array(key.length * 3);
  return murmur2Bytes(scratch, encoder.encodeInto(key, scratch).written);
}

function murmur2Bytes(data: Uint8Array, length: number): number {
  const m = 0x5bd1e995;
  let h = 0x9747b28c ^ length;
  const whole = length & ~3;
  for (let i = 0; i < whole; i += 4) {
    let k = data[i]! | (data[i + 1]! << 8) | (data[i + 2]! << 16) | (data[i + 3]! << 24);
    k = Math.imul(k, m);
    k ^= k >>> 24;
    k = Math.imul(k, m);
    h = Math.imul(h, m) ^ k;
  }
  const rest = length & 3;
  if (rest === 3) h ^= data[whole + 2]! << 16;
  if (rest >= 2) h ^= data[whole + 1]! << 8;
  if (rest >= 1) h = Math.imul(h ^ data[whole]!, m);
  h ^= h >>> 13;
  h = Math.imul(h, m);
  h ^= h >>> 15;
  return h;
}

/** The partition Kafka's default partitioner gives `key` in a topic of `partitions` partitions. */
export function partitionOfKey(key: Uint8Array | string, partitions: number): number {
  return (murmur2(key) & 0x7fffffff) % partitions;
}
