/**
 * Collections keyed by (topic, partition), without joining the two into a string and splitting
 * it back apart. `partitionText` is the one written form ("topic:partition"), for logs and the
 * repartition wire format; Kafka topic names cannot hold a ":".
 */
import type { TopicPartition } from "./port.ts";

/** "topic:partition", as logs, the build record and repartition records write it. */
export const partitionText = (tp: TopicPartition): string => `${tp.topic}:${tp.partition}`;

/**
 * A map keyed by a pair of values, in insertion order. The pair is kept with its value, so no
 * key is ever parsed back; the joined text is only the lookup key.
 */
export class PairMap<A extends string | number, B extends string | number, V> {
  readonly #map = new Map<string, [A, B, V]>();
  /**
   * The entry found or set last. Records come in runs of one partition, so most lookups ask for
   * the same pair again: those skip joining the key (a string per record, per map).
   */
  #last: [A, B, V] | undefined;

  get size(): number {
    return this.#map.size;
  }

  #entry(a: A, b: B): [A, B, V] | undefined {
    const last = this.#last;
    if (last !== undefined && last[1] === b && last[0] === a) return last;
    if (this.#map.size === 0) return undefined;
    const entry = this.#map.get(`${a}\u0000${b}`);
    if (entry !== undefined) this.#last = entry;
    return entry;
  }

  get(a: A, b: B): V | undefined {
    return this.#entry(a, b)?.[2];
  }

  has(a: A, b: B): boolean {
    return this.#entry(a, b) !== undefined;
  }

  set(a: A, b: B, value: V): this {
    const entry = this.#entry(a, b);
    if (entry !== undefined) entry[2] = value;
    else {
      const added: [A, B, V] = [a, b, value];
      this.#map.set(`${a}\u0000${b}`, added);
      this.#last = added;
    }
    return this;
  }

  delete(a: A, b: B): boolean {
    this.#last = undefined;
    return this.#map.delete(`${a}\u0000${b}`);
  }

  /** Deletes every entry that matches. */
  deleteWhere(match: (a: A, b: B, value: V) => boolean): void {
    this.#last = undefined;
    for (const [key, [a, b, value]] of this.#map) if (match(a, b, value)) this.#map.delete(key);
  }

  clear(): void {
    this.#last = undefined;
    this.#map.clear();
  }

  /** The entries in insertion order, as a snapshot: safe to change the map while iterating. */
  entries(): Array<[A, B, V]> {
    return [...this.#map.values()].map(([a, b, value]) => [a, b, value]);
  }

  values(): V[] {
    return [...this.#map.values()].map(([, , value]) => value);
  }
}

/**
 * A map keyed by topic partition.
 *
 * @example
 * const positions = new PartitionMap<bigint>();
 * positions.set({ topic: "in", partition: 0 }, 42n);
 * positions.get({ topic: "in", partition: 0 }); // → 42n
 */
export class PartitionMap<V> {
  readonly #map = new PairMap<string, number, V>();

  get size(): number {
    return this.#map.size;
  }

  get(tp: TopicPartition): V | undefined {
    return this.#map.get(tp.topic, tp.partition);
  }

  has(tp: TopicPartition): boolean {
    return this.#map.has(tp.topic, tp.partition);
  }

  set(tp: TopicPartition, value: V): this {
    this.#map.set(tp.topic, tp.partition, value);
    return this;
  }

  delete(tp: TopicPartition): boolean {
    return this.#map.delete(tp.topic, tp.partition);
  }

  clear(): void {
    this.#map.clear();
  }

  /** A snapshot of the entries: safe to change the map while iterating. */
  entries(): Array<[TopicPartition, V]> {
    return this.#map.entries().map(([topic, partition, value]) => [{ topic, partition }, value]);
  }

  values(): V[] {
    return this.#map.values();
  }
}

/** A set of topic partitions. */
export class PartitionSet {
  readonly #map = new PartitionMap<true>();

  constructor(partitions: Iterable<TopicPartition> = []) {
    for (const tp of partitions) this.add(tp);
  }

  get size(): number {
    return this.#map.size;
  }

  add(tp: TopicPartition): this {
    this.#map.set(tp, true);
    return this;
  }

  has(tp: TopicPartition): boolean {
    return this.#map.has(tp);
  }

  delete(tp: TopicPartition): boolean {
    return this.#map.delete(tp);
  }

  clear(): void {
    this.#map.clear();
  }

  [Symbol.iterator](): Iterator<TopicPartition> {
    return this.#map.entries().map(([tp]) => tp)[Symbol.iterator]();
  }
}
