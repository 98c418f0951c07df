import type { OperatorSnapshot } from "./operator.ts";

/**
 * Where a library user keeps operator snapshots between runs (the engine itself keeps state in
 * a compacted changelog topic). `FileStateStore` is one; any key-value service can be another.
 *
 * @example
 * await store.save("prices/sma/partition-0", op.snapshot());
 * const saved = await store.load("prices/sma/partition-0");
 * if (saved) fresh.restoreSnapshot(saved);
 */
export interface StateStore {
  save(key: string, snapshot: OperatorSnapshot): Promise<void>;
  /** The last snapshot saved under `key`, or undefined when there is none. */
  load(key: string): Promise<OperatorSnapshot | undefined>;
}
