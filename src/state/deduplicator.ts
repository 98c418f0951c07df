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
 * Ids written ahead of a delivery (`rememberNow`) are pending until `settleNow` marks them
 * sent. A process that dies in between leaves them pending: the next load counts them as
 * delivered, and names them in `inDoubt` (the delivery may or may not have happened), so the
 * caller can say so rather than skip them in silence. They stay in doubt, across restarts (key
 * `<namespace>/doubt`), until the caller has dealt with them and calls `resolve`. Segment lines:
 * a header `"\u0000v2"` first, then ids, and `"\u0000"` after the ids it settles. Both are JSON
 * strings, so an older version reads them as ids no row has; a segment it wrote (no header) is
 * read as settled.
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
  #segments: Segment[] = [];
  /** The segment whose last ids `rememberNow` wrote ahead, until `settleNow`. */
  #pending: Segment | undefined;
  /** Ids in doubt: pending ones a run left, until resolved (kept under `<namespace>/doubt`). */
  #inDoubt = new Set<string>();
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

  /** Reads the durable window (once; every other method does it first too). */
  async open(): Promise<void> {
    await this.#load();
  }

  /** True when `id` is not among the remembered ones. */
  async isNew(id: string): Promise<boolean> {
    await this.#load();
    return !this.#seen.has(id);
  }

  /**
   * The ids a run wrote ahead of a delivery and never marked sent (it stopped in between), not
   * resolved since: counted as delivered, though the delivery may not have happened. Read after
   * the first call (the load); [] when there are none.
   */
  get inDoubt(): readonly string[] {
    return [...this.#inDoubt];
  }

  /** Ids in doubt dealt with (the caller reported them durably): no longer in doubt; durable once the promise resolves. */
  async resolve(ids: readonly string[]): Promise<void> {
    await this.#load();
    let changed = false;
    for (const id of ids) changed = this.#inDoubt.delete(id) || changed;
    if (!changed) return;
    if (this.#inDoubt.size === 0) await this.store.delete(this.#doubtKey);
    else await this.store.put(this.#doubtKey, linesOf([...this.#inDoubt]));
  }

  get #doubtKey(): string {
    return `${this.namespace}/doubt`;
  }

  /** Remembers ids as delivered; durable once the returned promise resolves. */
  async remember(ids: string | readonly string[]): Promise<void> {
    await this.#load();
    const added = this.#add(typeof ids === "string" ? [ids] : ids);
    if (added === undefined) return;
    added.segment.settled = added.segment.ids.length;
    await this.store.put(added.key, segmentBytes(added.segment));
    added.segment.written = true;
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
    if (!added) return;
    const { segment } = added;
    const bytes = segment.written ? linesOf(ids) : concat(HEADER, linesOf(ids));
    this.store.appendNow!(added.key, bytes);
    segment.written = true;
    this.#pending = segment;
  }

  /**
   * Marks the ids `rememberNow` wrote last as sent (one appended line): call it the moment the
   * delivery is handed on. Until then a restart names them in `inDoubt`.
   */
  settleNow(): void {
    const segment = this.#pending;
    if (segment === undefined) return;
    this.#pending = undefined;
    if (segment.settled === segment.ids.length) return;
    this.store.appendNow!(this.#keyOf(segment.seq), SETTLED);
    segment.settled = segment.ids.length;
  }

  /** Adds ids to the open segment (a new one when it is full): the segment and its key. */
  #add(list: readonly string[]): { key: string; segment: Segment } | undefined {
    if (list.length === 0) return undefined;
    let open = this.#segments.at(-1);
    if (open === undefined || open.ids.length >= this.#segmentSize()) {
      open = { seq: (open?.seq ?? 0) + 1, ids: [], settled: 0, written: false };
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
    // What is left was delivered: the ids taken back were the ones written ahead.
    open.settled = kept.length;
    if (this.#pending === open) this.#pending = undefined;
    for (const id of gone) if (this.#seen.get(id) === open.seq) this.#seen.delete(id);
    await this.store.put(this.#keyOf(open.seq), segmentBytes(open));
    open.written = true;
  }

  /** Forgets the process-local cache; the next call reads the durable window again. */
  reset(): void {
    this.#seen.clear();
    this.#segments = [];
    this.#pending = undefined;
    this.#inDoubt = new Set();
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
      const segments: Segment[] = [];
      for (const key of keys) {
        const bytes = await this.store.get(key);
        if (bytes === undefined) continue;
        segments.push({ seq: Number(key.slice(prefix.length)), ...parseSegment(bytes, key), written: true });
      }
      segments.sort((a, b) => a.seq - b.seq);
      for (const segment of segments) for (const id of segment.ids) this.#seen.set(id, segment.seq);
      this.#segments = segments;
      // In doubt: what earlier runs left and nobody resolved, and what the last run wrote ahead and
      // never settled (only the newest segment can hold that). The latter joins the doubt key
      // first, then its segment is settled: from then on the key alone says it.
      // An id that left the window is no longer in doubt: it is new again, and delivered as such.
      const stored = await this.store.get(this.#doubtKey);
      const kept = stored === undefined ? [] : parseSegment(stored, this.#doubtKey).ids;
      const doubt = new Set(kept.filter((id) => this.#seen.has(id)));
      const newest = segments.at(-1);
      const unsettled = newest ? newest.ids.slice(newest.settled) : [];
      if (doubt.size < kept.length && unsettled.length === 0) {
        if (doubt.size === 0) await this.store.delete(this.#doubtKey);
        else await this.store.put(this.#doubtKey, linesOf([...doubt]));
      }
      if (unsettled.length > 0) {
        for (const id of unsettled) doubt.add(id);
        await this.store.put(this.#doubtKey, linesOf([...doubt]));
        newest!.settled = newest!.ids.length;
        await this.store.put(this.#keyOf(newest!.seq), segmentBytes(newest!));
      }
      this.#inDoubt = doubt;
      // A segment written by the last run stays closed: the next remember opens a new one.
      if (newest) this.#segments.push({ seq: newest.seq + 1, ids: [], settled: 0, written: false });
      this.#ready = true;
    })().catch((error) => {
      this.#loaded = undefined;
      throw error;
    });
    return this.#loaded;
  }
}

interface Segment {
  seq: number;
  ids: string[];
  /** The first `settled` ids were delivered; those after were written ahead (pending). */
  settled: number;
  /** The store holds this segment (so an append needs no header). */
  written: boolean;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();
/** A segment's first line: ids that follow are settled only where a SETTLED line says so. */
const HEADER_LINE = JSON.stringify("\u0000v2");
const HEADER = encoder.encode(`${HEADER_LINE}\n`);
/** The ids above this line were delivered. */
const SETTLED_LINE = JSON.stringify("\u0000");
const SETTLED = encoder.encode(`${SETTLED_LINE}\n`);

/** Ids as segment lines: one JSON string per line (an id's own line breaks are escaped). */
function linesOf(ids: readonly string[]): Uint8Array {
  let text = "";
  for (const id of ids) text += `${JSON.stringify(id)}\n`;
  return encoder.encode(text);
}

/** A whole segment: the header, its settled ids, `{}`, and its pending ids. */
function segmentBytes(segment: Segment): Uint8Array {
  const settled = linesOf(segment.ids.slice(0, segment.settled));
  const pending = linesOf(segment.ids.slice(segment.settled));
  return concat(HEADER, settled, segment.settled > 0 ? SETTLED : new Uint8Array(0), pending);
}

function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.byteLength;
  }
  return out;
}

/** A segment's ids, and how many of them are settled; a last line without its line break (a write cut short) is left out. */
function parseSegment(bytes: Uint8Array, key: string): { ids: string[]; settled: number } {
  const lines = decoder.decode(bytes).split("\n");
  lines.pop(); // after the last line break: "" or a torn line
  const ids: string[] = [];
  // A segment without the header (an older version's) is settled throughout.
  const versioned = lines[0] === HEADER_LINE;
  let settled = 0;
  for (const [i, line] of lines.entries()) {
    if (i === 0 && versioned) continue;
    if (line === SETTLED_LINE) {
      settled = ids.length;
      continue;
    }
    let id: unknown;
    try {
      id = JSON.parse(line);
    } catch {
      id = undefined;
    }
    if (typeof id !== "string") throw new TypeError(`Deduplicator segment ${key}, line ${i + 1}: not an id (a JSON string): ${line.slice(0, 80)}`);
    ids.push(id);
  }
  return { ids, settled: versioned ? settled : ids.length };
}

function checkedWindow(n: number): number {
  if (!Number.isInteger(n) || n < 1) throw new RangeError(`a Deduplicator's window is a whole number of ids, at least 1 (got ${n})`);
  return n;
}
