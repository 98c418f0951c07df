/**
 * State beyond memory: the memory side of an operator whose committed state lives in a
 * StateSource (the task's local store). Entities come into memory when a row or a read needs
 * them, and leave once they equal what the source holds: unchanged since a drain whose changes
 * the source has (`settled`). Changed entities stay pinned until then, so the source is only ever
 * written with committed state and an abort loses nothing: the next owner reads the same source.
 */
import type { CacheStats, StateSource } from "./operator.ts";
import type { Entity } from "./operator-state.ts";
import { StateReader } from "./state-values.ts";

/** An entity of a spilling operator. */
export interface SpillEntity extends Entity {
  /** The drain that last wrote it to the changelog (0: read from the source, or never drained). */
  drainedAt: number;
  /** Used since the last eviction pass: it survives one pass (a second chance, as in CLOCK). */
  hot: boolean;
  /** Read from the source (so its key is there, whatever changed since). */
  inSource: boolean;
}

export class Spill {
  /** The operator's op, for errors naming it. */
  readonly op: string;
  readonly source: StateSource;
  /** How many entities may stay in memory once they are settled. */
  readonly cacheKeys: number;
  /** Every drain up to this one is in the source. */
  settledDrains = 0;
  hits = 0;
  misses = 0;

  constructor(op: string, source: StateSource, cacheKeys: number) {
    this.op = op;
    this.source = source;
    this.cacheKeys = Math.max(1, Math.floor(cacheKeys));
  }

  /** A lookup that missed memory: the stored entity of `key`, read back; undefined when the source has none. */
  fetch<E extends SpillEntity>(key: string, decode: (r: StateReader, value: unknown) => E): E | undefined {
    this.misses++;
    const value = this.source.get(key);
    return value === undefined ? undefined : this.decode(key, value, decode);
  }

  /** One stored value as an entity: STATE_CORRUPTED when it decodes to another key; marked as in the source. */
  decode<E extends SpillEntity>(key: string, value: unknown, decode: (r: StateReader, value: unknown) => E): E {
    const r = new StateReader(this.op, key);
    const e = decode(r, value);
    if (e.key !== key) r.fail(`the value belongs to key ${JSON.stringify(e.key)}`);
    e.inSource = true;
    return e;
  }

  /** Whether an entity in memory is exactly what the source holds, so it may leave and be read back. */
  canEvict(e: SpillEntity): boolean {
    return !e.dirty && !e.removed && e.persisted && e.drainedAt <= this.settledDrains;
  }

  /**
   * How many entities an eviction pass should let go of, from `resident` in memory: down to
   * nine tenths of the cache, so a pass does not run at every commit. 0 while under the cap.
   */
  excess(resident: number): number {
    return resident <= this.cacheKeys ? 0 : resident - Math.floor(this.cacheKeys * 0.9);
  }

  /**
   * One eviction pass over entities in memory, oldest first: a hot one gets a second chance (its
   * mark cleared), a settled cold one goes (`evict`). Two rounds at most. Returns how many went.
   */
  evict<E extends SpillEntity>(resident: number, entities: () => Iterable<E>, evict: (e: E) => void): number {
    let left = this.excess(resident);
    let gone = 0;
    for (let round = 0; round < 2 && left > 0; round++) {
      for (const e of entities()) {
        if (!this.canEvict(e)) continue;
        if (e.hot) {
          e.hot = false;
          continue;
        }
        evict(e);
        gone++;
        if (--left === 0) break;
      }
    }
    return gone;
  }

  stats(resident: number): CacheStats {
    return { resident, hits: this.hits, misses: this.misses };
  }

  /** Whether the source holds a value for this entity's key (the latest or an older one). */
  isStored(e: SpillEntity): boolean {
    return e.inSource || (e.persisted && e.drainedAt <= this.settledDrains);
  }
}

/** The smallest key after every key that starts with `prefix` (its last character incremented). */
export function prefixEnd(prefix: string): string {
  return prefix.slice(0, -1) + String.fromCharCode(prefix.charCodeAt(prefix.length - 1) + 1);
}
