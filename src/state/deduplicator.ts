import type { AsyncStateStore } from "./async-store.ts";

export interface DeduplicatorOptions {
  /** How many of the latest ids are remembered (the durable window). Default 65,536. */
  window?: number;
}

const DEFAULT_WINDOW = 64 * 1024;
/** Segment keys sort by number: `<namespace>/000000000042`. */
const SEQ_DIGITS = 12;

/**
 * Exactly-once toward a system that is not Kafka, on an at-least-once source: the ids already
 * delivered are remembered, so a replay of the source delivers each id once. A process-local
 * cache (a Set) answers `isNew`; the durable window lives in any AsyncStateStore, as segments
 * `<namespace>/<seq>`, one JSON string (an id) per line. `remember` rewrites the open segment
 * only (`rememberNow` appends to it, on a store that can); once it holds a window's eighth (at
 * most 4,096 ids) the next one opens, and segments older than the window are deleted. The first
 * call loads every segment of the namespace.
 *
 * One writer per namespace: give each owner its own (the http sink uses one per sink and input
 * partition, and only the partition's owner writes it).
 *
 * @example
 * const dedup = new Deduplicator(store, "orders-sink/p0").withWindow(64 * 1024);
 * for (const msg of batch) {
 *   if (!(await dedup.isNew(msg.id))) continue; // sent before: skip, safe to replay
 *   await dedup.remember(msg.id); // first: a crash after the write never sends it again
 *   await sink.write(msg).catch(async (error) => (await dedup.forget([msg.id]), Promise.reject(error)));
 * }
 */
export class Deduplicator {
  readonly store: AsyncStateStore;
  readonly namespace: string;
  #window: number;
  /** Each remembered id, with the segment that last remembered it. */
  readonly #seen = new Map<string, number>();
  /** Segments oldest first; the last is the open one. */
  #segments: Array<{ seq: number; ids: string[] }> = [];
  #loaded: Promise<void> | undefined;
  /** The window has been read (the first call's load is done). */
  #ready = false;

  constructor(store: AsyncStateStore, namespace: string, options: DeduplicatorOptions = {}) {
    if (!namespace || namespace.includes("\n")) throw new TypeError("a Deduplicator needs a namespace (a sink's name), without line breaks");
    this.store = store;
    this.namespace = namespace.replace(/\/+$/, "");
    this.#window = checkedWindow(options.window ?? DEFAULT_WINDOW);
  }

  /** Sets how many of the latest ids are remembered; returns this deduplicator. */
  withWindow(n: number): this {
    this.#window = checkedWindow(n);
    return this;
  }

  get window(): number {
    return this.#window;
  }

  /** Ids held now (the window, plus at most one segment on its way out). */
  get size(): number {
    return this.#seen.size;
  }

  /** True when `id` is not among the remembered ones. */
  async isNew(id: string): Promise<boolean> {
    await this.#load();
    return !this.#seen.has(id);
  }

  /** Remembers ids as delivered; durable once the returned promise resolves. */
  async remember(ids: string | readonly string[]): Promise<void> {
    await this.#load();
    const added = this.#add(typeof ids === "string" ? [ids] : ids);
    if (added === undefined) return;
    await this.store.put(added.key, linesOf(added.segment.ids));
    await this.prune();
  }

  /** Whether `rememberNow` can be used: the store appends synchronously, and the window is read. */
  get canRememberNow(): boolean {
    return this.store.appendNow !== undefined && this.#ready;
  }

  /**
   * `remember`, synchronously and in one append: durable when it returns, so the caller's next
   * statement runs with the ids safe (the http sink writes its request there). Needs
   * `canRememberNow`; old segments are deleted by the next `prune` (or `remember`).
   */
  rememberNow(ids: readonly string[]): void {
    if (!this.canRememberNow) throw new Error("rememberNow needs a store with appendNow, and the window read (await isNew first)");
    const added = this.#add(ids);
    if (added) this.store.appendNow!(added.key, linesOf(ids));
  }

  /** Adds ids to the open segment (a new one when it is full): the segment and its key. */
  #add(list: readonly string[]): { key: string; segment: { seq: number; ids: string[] } } | undefined {
    if (list.length === 0) return undefined;
    let open = this.#segments.at(-1);
    if (open === undefined || open.ids.length >= this.#segmentSize()) {
      open = { seq: (open?.seq ?? 0) + 1, ids: [] };
      this.#segments.push(open);
    }
    for (const id of list) {
      open.ids.push(id);
      this.#seen.set(id, open.seq);
    }
    return { key: this.#keyOf(open.seq), segment: open };
  }

  /**
   * Takes back ids remembered last (a delivery written ahead that then failed): they are new
   * again. Only ids of the open segment can be taken back; durable once the promise resolves.
   */
  async forget(ids: readonly string[]): Promise<void> {
    await this.#load();
    const open = this.#segments.at(-1);
    if (!open || ids.length === 0) return;
    const gone = new Set(ids);
    const kept = open.ids.filter((id) => !gone.has(id));
    if (kept.length === open.ids.length) return;
    open.ids = kept;
    for (const id of gone) if (this.#seen.get(id) === open.seq) this.#seen.delete(id);
    await this.store.put(this.#keyOf(open.seq), linesOf(open.ids));
  }

  /** Forgets the process-local cache; the next call reads the durable window again. */
  reset(): void {
    this.#seen.clear();
    this.#segments = [];
    this.#loaded = undefined;
    this.#ready = false;
  }

  #segmentSize(): number {
    return Math.max(1, Math.min(4096, Math.ceil(this.#window / 8)));
  }

  #keyOf(seq: number): string {
    return `${this.namespace}/${String(seq).padStart(SEQ_DIGITS, "0")}`;
  }

  /** Deletes the segments older than the window: the oldest, while the newer ones alone hold it. */
  async prune(): Promise<void> {
    let held = this.#segments.reduce((n, s) => n + s.ids.length, 0);
    while (this.#segments.length > 1 && held - this.#segments[0]!.ids.length >= this.#window) {
      const oldest = this.#segments.shift()!;
      held -= oldest.ids.length;
      await this.store.delete(this.#keyOf(oldest.seq));
      for (const id of oldest.ids) if (this.#seen.get(id) === oldest.seq) this.#seen.delete(id);
    }
  }

  #load(): Promise<void> {
    this.#loaded ??= (async () => {
      const prefix = `${this.namespace}/`;
      const keys = (await this.store.list(prefix)).filter((k) => /^\d+$/.test(k.slice(prefix.length)));
      const segments = [];
      for (const key of keys) {
        const bytes = await this.store.get(key);
        if (bytes === undefined) continue;
        segments.push({ seq: Number(key.slice(prefix.length)), ids: idsOf(bytes, key) });
      }
      segments.sort((a, b) => a.seq - b.seq);
      for (const segment of segments) for (const id of segment.ids) this.#seen.set(id, segment.seq);
      this.#segments = segments;
      // A segment written by the last run stays closed: the next remember opens a new one.
      if (segments.length) this.#segments.push({ seq: segments.at(-1)!.seq + 1, ids: [] });
      this.#ready = true;
    })().catch((error) => {
      this.#loaded = undefined;
      throw error;
    });
    return this.#loaded;
  }
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Ids as segment lines: one JSON string per line (an id's own line breaks are escaped). */
function linesOf(ids: readonly string[]): Uint8Array {
  let text = "";
  for (const id of ids) text += `${JSON.stringify(id)}\n`;
  return encoder.encode(text);
}

/** A segment's ids; a last line without its line break (a write cut short) is left out. */
function idsOf(bytes: Uint8Array, key: string): string[] {
  const lines = decoder.decode(bytes).split("\n");
  lines.pop(); // after the last line break: "" or a torn line
  return lines.map((line, i) => {
    let id: unknown;
    try {
      id = JSON.parse(line);
    } catch {
      id = undefined;
    }
    if (typeof id !== "string") throw new TypeError(`Deduplicator segment ${key}, line ${i + 1}: not an id (a JSON string): ${line.slice(0, 80)}`);
    return id;
  });
}

function checkedWindow(n: number): number {
  if (!Number.isInteger(n) || n < 1) throw new RangeError(`a Deduplicator's window is a whole number of ids, at least 1 (got ${n})`);
  return n;
}
