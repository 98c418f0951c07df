/**
 * Repartition hops in one place (docs/operators.md, "Repartitioning"): the hop record codec (a
 * row re-keyed into `fv-repartition-<name>-<stage>`, with where it came from), watermark records,
 * the upstream side's tracking of how far each input partition got, and the downstream side's
 * record of what each upstream partition announced.
 *
 * An upstream partition is named on the wire as "topic:partition" (`partitionText`): in watermark
 * records, in hop record headers and in the changelog's covered offsets and heard watermarks, so
 * that form stays as it is; in memory it is a TopicPartition.
 */
import { rowKeyText } from "../topology/keying.ts";
import type { Row } from "../expr/index.ts";
import type { InboundRecord, OutboundRecord, TopicPartition } from "../kafka/port.ts";
import { DecodedTexts } from "../kafka/shared.ts";
import { PairMap, PartitionMap, partitionText } from "../kafka/topic-partition.ts";

/** Header of a repartition record: which stage input (0 = left, 1 = right) the row came from. */
export const HOP_INPUT_HEADER = "fv.input";
/** Headers of a repartition record: the upstream partition and offset it came from (replays change no state twice). */
export const HOP_SOURCE_HEADER = "fv.source";
export const HOP_OFFSET_HEADER = "fv.offset";
/** Header of a watermark record in a repartition topic; its value is `{ source, watermark, idle }`. */
export const HOP_WATERMARK_HEADER = "fv.watermark";
/** A changed upstream watermark is announced at most this often, an unchanged one this often. */
const WATERMARK_CHANGED_MS = 100;
const WATERMARK_REPEAT_MS = 2000;

/** Where a row read through a hop came from: the upstream partition ("topic:partition") and its offset. */
export interface HopSource {
  key: string;
  offset: bigint;
}

/** What a watermark record says: how far one upstream partition got, and whether it is idle. */
export interface HopWatermark {
  source: string;
  watermark: number | null;
  idle: boolean;
}

/**
 * Upstream side: a row (already through the steps before the operator) as a record of the hop,
 * keyed by the operator's key. `unchanged`: no step ran on the row, so the source record's value
 * bytes go as they came (a valid JSON object, read the same downstream) instead of the row
 * encoded again.
 */
export function hopRecord(hop: { topic: string; keyColumns: readonly string[] }, row: Row, from: InboundRecord, input: { index: number; join: boolean; unchanged?: boolean }): OutboundRecord {
  return {
    topic: hop.topic,
    key: rowKeyText(row, hop.keyColumns),
    value: input.unchanged && from.value ? from.value : JSON.stringify(row),
    headers: [
      [HOP_SOURCE_HEADER, partitionText(from)],
      [HOP_OFFSET_HEADER, String(from.offset)],
      ...(input.join ? [[HOP_INPUT_HEADER, String(input.index)] as [string, string]] : []),
    ],
  };
}

/** A watermark record for every partition of the hop topic: read after the rows it covers (same producer). */
export function watermarkRecords(hop: { topic: string; partitions: number }, announced: HopWatermark): OutboundRecord[] {
  const value = JSON.stringify({ source: announced.source, watermark: announced.watermark, idle: announced.idle });
  return Array.from({ length: hop.partitions }, (_, q) => ({ topic: hop.topic, partition: q, key: null, value, headers: [[HOP_WATERMARK_HEADER, "1"]] }));
}

const textDecoder = new TextDecoder();

function headerText(record: InboundRecord, name: string): string | undefined {
  const header = record.headers.find(([n]) => n === name);
  return header ? textDecoder.decode(header[1]) : undefined;
}

/** Downstream side: the watermark a record of the hop carries, or undefined for a row. */
export function readWatermark(record: InboundRecord): HopWatermark | undefined {
  if (!record.headers.some(([name]) => name === HOP_WATERMARK_HEADER)) return undefined;
  return JSON.parse(textDecoder.decode(record.value!)) as HopWatermark;
}

/** Downstream side: which stage input a row of the hop belongs to (0 when the stage has one). */
export function hopInputOf(record: InboundRecord): number {
  return Number(headerText(record, HOP_INPUT_HEADER) ?? 0);
}

/** The upstream partitions hop rows name ("topic:partition"): the same few on every row. */
const sources = new DecodedTexts(256);

/** A decimal offset's digits, as a bigint (a number first when it is short enough to be exact). */
function offsetOf(bytes: Uint8Array): bigint {
  if (bytes.length > 15) return BigInt(textDecoder.decode(bytes));
  let n = 0;
  for (const b of bytes) {
    if (b < 48 || b > 57) return BigInt(textDecoder.decode(bytes));
    n = n * 10 + (b - 48);
  }
  return BigInt(n);
}

/** Downstream side: the upstream partition and offset a row of the hop came from. */
export function hopSource(record: InboundRecord): HopSource | undefined {
  let key: string | undefined;
  let offset: bigint | undefined;
  for (const [name, value] of record.headers) {
    if (key === undefined && name === HOP_SOURCE_HEADER) key = sources.text(value);
    else if (offset === undefined && name === HOP_OFFSET_HEADER) offset = offsetOf(value);
  }
  return key !== undefined && offset !== undefined ? { key, offset } : undefined;
}

/** A stage with a hop, as the upstream side sees it. */
export interface UpstreamHop {
  stageIndex: number;
  topic: string;
  partitions: number;
  /** The stage's input topics: their owned partitions are the upstream ones. */
  inputs: ReadonlySet<string>;
}

interface Upstream {
  max?: number;
  seenAt?: number;
  ownedSince: number;
  sent?: { watermark?: number; idle: boolean; at: number };
}

/**
 * Upstream side of every hop of one session: per (stage, owned input partition), the highest
 * event time sent into the hop, and what was last announced.
 */
export class UpstreamTracker {
  readonly #hops: readonly UpstreamHop[];
  readonly #idleMs: number;
  readonly #byStage = new Map<number, PartitionMap<Upstream>>();

  constructor(hops: readonly UpstreamHop[], idleMs: number) {
    this.#hops = hops;
    this.#idleMs = idleMs;
  }

  #of(stageIndex: number): PartitionMap<Upstream> {
    let map = this.#byStage.get(stageIndex);
    if (!map) this.#byStage.set(stageIndex, (map = new PartitionMap()));
    return map;
  }

  /** A row of this input partition went into the stage's hop with this event time. */
  note(stageIndex: number, tp: TopicPartition, time: number): void {
    const upstream = this.#of(stageIndex);
    let u = upstream.get(tp);
    if (!u) upstream.set(tp, (u = { ownedSince: Date.now() }));
    if (u.max === undefined || time > u.max) u.max = time;
    u.seenAt = Date.now();
  }

  /** A revoked partition: its next owner announces it from now on. */
  forget(tp: TopicPartition): void {
    for (const upstream of this.#byStage.values()) upstream.delete(tp);
  }

  /**
   * Watermarks across a hop: for each owned upstream partition of a hop, a watermark record
   * `{ source, watermark, idle }` goes to every partition of the repartition topic, after the
   * rows it covers (same producer, so it is read after them). Sent when it changed (at most every
   * 100 ms) and every 2 s regardless, so a restarted downstream task hears every source soon. A
   * partition without rows for STREAM_IDLE_PARTITION_MS is announced idle: it stops holding the
   * downstream watermark back. `changedNow`: a changed watermark goes out at once, whenever it
   * was last sent. The loop asks for that before a checkpoint takes the input offsets: those
   * offsets must not be committed ahead of the watermark of the rows they cover, or a restart
   * (which reads none of those rows again) never sends it, and the windows it closes never fire.
   */
  announce(
    now: number,
    loopQuietMs: number,
    owned: TopicPartition[],
    lag: { knownBehind(tp: TopicPartition): boolean; caughtUp(tp: TopicPartition): boolean },
    changedNow = false,
  ): OutboundRecord[] {
    const idleMs = this.#idleMs;
    const out: OutboundRecord[] = [];
    for (const hop of this.#hops) {
      const upstream = this.#of(hop.stageIndex);
      for (const tp of owned) {
        if (!hop.inputs.has(tp.topic)) continue;
        let u = upstream.get(tp);
        if (!u) upstream.set(tp, (u = { ownedSince: now }));
        // Idle: no rows for a while, and nothing left to read (or the whole loop gets nothing). A
        // partition with lag is only slow: declaring it idle would make its rows late downstream.
        // (A quiet loop, e.g. starved of CPU or restarting its consumer, says nothing about a
        // partition whose known position is below its known end: that one is still behind.)
        const idle = now - (u.seenAt ?? u.ownedSince) > idleMs && !lag.knownBehind(tp) && (loopQuietMs > idleMs || lag.caughtUp(tp));
        if (u.max === undefined && !idle) continue;
        const changed = !u.sent || u.sent.watermark !== u.max || u.sent.idle !== idle;
        if (u.sent && !(changed && changedNow) && now - u.sent.at < (changed ? WATERMARK_CHANGED_MS : WATERMARK_REPEAT_MS)) continue;
        u.sent = { watermark: u.max, idle, at: now };
        out.push(...watermarkRecords(hop, { source: partitionText(tp), watermark: u.max ?? null, idle }));
      }
    }
    return out;
  }
}

/**
 * Downstream side: per (stage, repartition partition), the latest watermark heard from each
 * upstream partition. A stage fed through a hop has as its watermark the minimum of what each
 * upstream partition announced, per repartition partition, not the event times its own rows
 * carry: rows of every upstream partition meet in each repartition partition, and a fast one must
 * not make a slow one's rows late.
 */
export class HeardWatermarks {
  /** Stages fed through a repartition topic: every upstream partition ("topic:partition") that feeds them. */
  readonly #upstreamOf = new Map<number, readonly string[]>();
  readonly #heard = new PairMap<number, number, Map<string, { watermark: number | null; idle: boolean }>>();
  /** (stage, partition) whose heard watermarks changed since the last changelog. */
  readonly #dirty = new PairMap<number, number, true>();

  setUpstream(stageIndex: number, upstream: readonly string[]): void {
    this.#upstreamOf.set(stageIndex, upstream);
  }

  /** Whether the stage is fed through a hop. */
  fedThroughHop(stageIndex: number): boolean {
    return this.#upstreamOf.has(stageIndex);
  }

  /** A watermark record read from a partition of a stage's repartition topic (or restored from its changelog). */
  hear(stageIndex: number, partition: number, source: string, watermark: number | null, idle: boolean, restored = false): void {
    let heard = this.#heard.get(stageIndex, partition);
    if (!heard) this.#heard.set(stageIndex, partition, (heard = new Map()));
    const before = heard.get(source);
    // A restored value never overrides what this session heard already.
    if (restored && before) return;
    if (!restored) this.#dirty.set(stageIndex, partition, true);
    // A source's watermark never goes back (a restarted upstream owner may announce less at first).
    const kept = before?.watermark != null && (watermark === null || watermark < before.watermark) ? before.watermark : watermark;
    heard.set(source, { watermark: kept, idle });
  }

  /** The watermark of one repartition partition: min over non-idle upstream partitions (all idle: over all); undefined until every one was heard. */
  watermark(stageIndex: number, partition: number): number | undefined {
    const heard = this.#heard.get(stageIndex, partition);
    if (!heard) return undefined;
    let active = Infinity;
    let all = Infinity;
    for (const source of this.#upstreamOf.get(stageIndex)!) {
      const h = heard.get(source);
      if (!h) return undefined;
      if (h.watermark === null) continue;
      all = Math.min(all, h.watermark);
      if (!h.idle) active = Math.min(active, h.watermark);
    }
    // Every source idle: nothing is on its way, so the least of what they announced holds.
    const watermark = active !== Infinity ? active : all;
    return watermark === Infinity ? undefined : watermark;
  }

  /** Whether what (stage, partition) heard changed since the last `taken`. */
  dirty(stageIndex: number, partition: number): boolean {
    return this.#dirty.has(stageIndex, partition);
  }

  /** What (stage, partition) heard, for its changelog (`{ source: watermark }`); clears its dirty mark. */
  take(stageIndex: number, partition: number): Record<string, number> {
    this.#dirty.delete(stageIndex, partition);
    const heard = this.#heard.get(stageIndex, partition) ?? new Map();
    return Object.fromEntries([...heard].filter(([, h]) => h.watermark !== null).map(([source, h]) => [source, h.watermark]));
  }

  /** Forgets what was heard on partitions not in `kept`. */
  keepOnly(kept: ReadonlySet<number>): void {
    this.#heard.deleteWhere((_, partition) => !kept.has(partition));
  }

  clear(): void {
    this.#heard.clear();
  }
}
