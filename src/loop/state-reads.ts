/**
 * What a read of queryable state gives back, and the keys being watched: the leaf that the
 * operator tasks, the standby tasks and the query answering (state-query.ts) share.
 */
import type { Row } from "../expr/index.ts";

/** Queryable state: one partition's rows for a group key, and the input offset its state reflects. */
export interface StateRead {
  partition: number;
  rows: Row[];
  /** The next input offset of the partition folded into the state; null before any. */
  position: number | null;
  /** The state of a partition this loop let go of in a rebalance (or read while one runs), or of a standby copy. */
  stale?: boolean;
  /** Read from a standby copy (STREAM_STANDBY_REPLICAS), `lag` changelog records behind. */
  standby?: boolean;
  lag?: number;
}

/** The identity of a group key in watches: its values' JSON. */
export const watchKeyOf = (group: readonly unknown[]) => JSON.stringify(group);

/**
 * Keys being watched in one consumer loop (kept across its sessions): after each row that
 * changes a watched key, the operator tasks hand its new value to the watch's listener, so a
 * watcher sees every change a row makes, in order.
 */
export class StateWatches {
  readonly #byStage = new Map<number, Map<string, Map<number, (read: StateRead) => void>>>();

  /** Starts a watch of `group` at stage index `stage`; returns its end. */
  add(id: number, stage: number, group: readonly unknown[], listener: (read: StateRead) => void): () => void {
    const byKey = this.#byStage.get(stage) ?? this.#byStage.set(stage, new Map()).get(stage)!;
    const key = watchKeyOf(group);
    const listeners = byKey.get(key) ?? byKey.set(key, new Map()).get(key)!;
    listeners.set(id, listener);
    return () => {
      listeners.delete(id);
      if (listeners.size === 0) byKey.delete(key);
      if (byKey.size === 0) this.#byStage.delete(stage);
    };
  }

  /** Whether any key of this stage is watched (the row path checks nothing else when not). */
  watches(stage: number): boolean {
    return this.#byStage.has(stage);
  }

  /** The listeners of one key, if it is watched. */
  listeners(stage: number, key: string): Iterable<(read: StateRead) => void> | undefined {
    return this.#byStage.get(stage)?.get(key)?.values();
  }
}
