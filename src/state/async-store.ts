/**
 * The async store contracts: what a network-backed store (S3, a database, a file system reached
 * through promises) offers the engine and the library. Values are bytes; what they mean is the
 * caller's (a JSON snapshot, a Deduplicator's window, a cursor).
 *
 * `FileStateStore` (src/ops/file-state-store.ts) and `S3StateStore` (src/state/s3-store.ts)
 * implement both; the `Checkpointer` writes a snapshot and its cursor over them in the only
 * crash-safe order, and the `Deduplicator` keeps its durable window in any AsyncStateStore.
 *
 * @example
 * await store.put("sma/partition-0", new TextEncoder().encode(JSON.stringify(op.snapshot())));
 * const keys = await store.list("sma/"); // ["sma/partition-0"]
 */
export interface AsyncStateStore {
  /** The value under `key`, or undefined when there is none. */
  get(key: string): Promise<Uint8Array | undefined>;
  /** Writes `value` under `key` whole: a reader sees the old value or the new one, never a part. */
  put(key: string, value: Uint8Array): Promise<void>;
  /** Removes `key`; removing a key that is not there is not an error. */
  delete(key: string): Promise<void>;
  /** Every key that starts with `prefix`, sorted. */
  list(prefix: string): Promise<string[]>;
  /**
   * Optional: appends `value` to the value under `key`, synchronously and in one write, for a
   * caller that must act the moment it is durable, with nothing in between (the http sink writes
   * its request right after; see docs/sinks.md). A file store has it; a network store cannot.
   */
  appendNow?(key: string, value: Uint8Array): void;
}

/**
 * Where a reader is in its sources: the next offset to read of each `topic/partition`, as
 * decimal strings (Kafka offsets pass 2^53).
 */
export type Cursor = Record<string, string>;

/** Where a cursor is kept, apart from the state it goes with (it is written last). */
export interface AsyncCursorStore {
  /** The cursor saved under `key`, or undefined when there is none. */
  loadCursor(key: string): Promise<Cursor | undefined>;
  saveCursor(key: string, cursor: Cursor): Promise<void>;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** JSON as bytes, for stores of bytes. */
export function jsonBytes(value: unknown): Uint8Array {
  return encoder.encode(JSON.stringify(value));
}

/** Bytes as JSON; `what` names the value in the error when they are not JSON. */
export function parseJsonBytes(bytes: Uint8Array, what: string): unknown {
  const text = decoder.decode(bytes);
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new SyntaxError(`${what} is not valid JSON: ${(error as Error).message}`);
  }
}

/**
 * An AsyncCursorStore over any AsyncStateStore: each cursor is a JSON object under
 * `<prefix><key>` (`cursors/` by default), so one store can hold snapshots and cursors.
 */
export class CursorsIn implements AsyncCursorStore {
  constructor(
    readonly store: AsyncStateStore,
    readonly prefix = "cursors/",
  ) {}

  async loadCursor(key: string): Promise<Cursor | undefined> {
    const bytes = await this.store.get(this.prefix + key);
    if (bytes === undefined) return undefined;
    const parsed = parseJsonBytes(bytes, `cursor ${JSON.stringify(key)}`);
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed) || !Object.values(parsed).every((v) => typeof v === "string")) {
      throw new TypeError(`cursor ${JSON.stringify(key)} is not an object of offsets (strings)`);
    }
    return parsed as Cursor;
  }

  saveCursor(key: string, cursor: Cursor): Promise<void> {
    return this.store.put(this.prefix + key, jsonBytes(cursor));
  }
}
