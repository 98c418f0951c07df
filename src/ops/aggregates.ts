/**
 * The aggregates of windowedAggregate and sessionAggregate: incremental accumulators, O(1) per
 * row (countDistinct: one Set insert), with merge for sessions and a plain JSON encoding for the
 * changelog. Null (and missing) values are skipped; see docs/operators.md for definitions.
 *
 * All of one window's (or session's) accumulators live in one flat array of slots, and one
 * switch updates them: no object per accumulator and no call per aggregate on the hot path,
 * which matters when 10k groups' windows are touched in random order.
 */
import { FvError } from "../errors.ts";
import type { Row, Value } from "../expr/index.ts";
import { type AggregateDef, type AggregateInfo, type AggregateOp, defaultAlias } from "./aggregate-defs.ts";
import { approxBytes, type StateReader } from "./state-values.ts";

import { type Digest, digestAdd, digestMerge, digestQuantile, newDigest } from "./t-digest.ts";
import { HLL_PRECISION, hllAdd, hllEstimate, hllFromText, hllMerge, type HllRegisters, hllToText, newHll } from "./hyperloglog.ts";
export { type AggregateDef, type AggregateInfo, aggregateList, type AggregateOp, aggregateSchema, defaultAlias } from "./aggregate-defs.ts";

// Accumulator kinds, and the slots each takes in the flat array.
const COUNT = 0; //         [n]
const SUM = 1; //           [sum | null]
const AVG = 2; //           [n, sum]
const MIN = 3; //           [min | null]
const MAX = 4; //           [max | null]
const FIRST = 5; //         [time | null, value]
const LAST = 6; //          [time | null, value]
const DISTINCT = 7; //      [Set of value keys, chars in the set] | [HyperLogLog registers, -1] past exactUpTo
const STDDEV = 8; //        [n, mean, m2] (Welford)
const STDDEV_POP = 9; //    [n, mean, m2]
const SMA = 10; //          [the n latest [time, value] by event time, oldest first, 0]
const EMA = 11; //          [ema of the values before the history | null, the latest [time, value] by event time]
const ARGMAX = 12; //       [max | null, the row]
const ARGMIN = 13; //       [min | null, the row]
const PERCENTILE = 14; //   [values (exact) | Digest past exactUpTo]

const kindOf: Record<AggregateOp, number> = {
  count: COUNT, sum: SUM, avg: AVG, min: MIN, max: MAX, first: FIRST, last: LAST,
  countDistinct: DISTINCT, stddev: STDDEV, stddevPop: STDDEV_POP, sma: SMA, ema: EMA,
  // The same Welford accumulator as stddev; read out without the square root.
  variance: STDDEV, variancePop: STDDEV_POP, argmax: ARGMAX, argmin: ARGMIN, percentile: PERCENTILE,
};
const numeric = new Set([SUM, AVG, MIN, MAX, STDDEV, STDDEV_POP, SMA, EMA, PERCENTILE]);

/** A window's (or session's) accumulators: one flat array, laid out by `Aggregates`. */
export type Slots = unknown[];

/**
 * A step's list of aggregates, compiled: reads a row's inputs, and creates, updates, merges,
 * reads out and encodes accumulator slots.
 */
export class Aggregates {
  readonly list: readonly AggregateInfo[];
  readonly #kinds: number[];
  readonly #offsets: number[];
  readonly #columns: (string | undefined)[];
  /** sma: n; ema: alpha. */
  readonly #params: number[];
  /** stddev, stddevPop: read out as the square root of the variance. */
  readonly #root: boolean[];
  /** percentile: q. */
  readonly #q: number[];
  /** countDistinct, percentile: exact up to this many values. */
  readonly #exactUpTo: number[];
  readonly #template: Slots;
  /** Offsets of slots that need a fresh object per window (countDistinct's Set, sma's ring). */
  readonly #fresh: Array<[number, number]> = [];

  constructor(defs: readonly AggregateDef[]) {
    this.list = defs.map((def) => ({ op: def.op, alias: def.alias ?? defaultAlias(def), column: def.column, mergeable: def.op !== "sma" && def.op !== "ema" }));
    this.#kinds = defs.map((def) => kindOf[def.op]);
    this.#columns = defs.map((def) => def.column);
    this.#params = defs.map((def) => def.op === "sma" ? def.n : def.op === "ema" ? def.alpha : 0);
    this.#q = defs.map((def) => def.op === "percentile" ? def.q : 0);
    this.#exactUpTo = defs.map((def) => def.op === "countDistinct" || def.op === "percentile" ? def.exactUpTo : 0);
    this.#root = defs.map((def) => def.op === "stddev" || def.op === "stddevPop");
    this.#offsets = [];
    const template: Slots = [];
    for (const kind of this.#kinds) {
      const o = template.length;
      this.#offsets.push(o);
      switch (kind) {
        case COUNT:
          template.push(0);
          break;
        case AVG:
          template.push(0, 0);
          break;
        case STDDEV:
        case STDDEV_POP:
          template.push(0, 0, 0);
          break;
        case FIRST:
        case LAST:
        case ARGMAX:
        case ARGMIN:
          template.push(null, null);
          break;
        case DISTINCT:
        case SMA:
          template.push(null, 0);
          this.#fresh.push([o, kind]);
          break;
        case EMA:
          template.push(null, null);
          this.#fresh.push([o + 1, kind]);
          break;
        case PERCENTILE:
          template.push(null);
          this.#fresh.push([o, kind]);
          break;
        default:
          template.push(null);
      }
    }
    this.#template = template;
  }

  get size(): number {
    return this.list.length;
  }

  /**
   * Whether the result depends on the order rows are added in beyond their (event time, arrival)
   * order: never (sma and ema go by event time, ties by arrival; first and last too).
   */
  get arrivalOrdered(): boolean {
    return false;
  }

  /**
   * Reads the row's input for each aggregate into `values` (count of rows reads `true`) and
   * checks it. Throws POISON_ROW "type_error" for a non-null value an aggregate cannot take, so
   * a poison row is refused before any state changes.
   */
  read(row: Row, values: unknown[]): void {
    const kinds = this.#kinds;
    for (let i = 0; i < kinds.length; i++) {
      const column = this.#columns[i];
      const value = column === undefined ? true : row[column];
      const kind = kinds[i]!;
      const isArg = kind === ARGMAX || kind === ARGMIN;
      if (value !== null && value !== undefined && (isArg || numeric.has(kind)) && (typeof value !== "number" || !Number.isFinite(value))) {
        throw typeError(this.list[i]!.op, column!, value);
      }
      // argmax / argmin keep the whole row: they read their column from it in `add`.
      values[i] = isArg && value !== null && value !== undefined ? row : value;
    }
  }

  create(): Slots {
    const acc = this.#template.slice();
    for (const [o, kind] of this.#fresh) acc[o] = kind === DISTINCT ? new Set<string>() : [];
    // (PERCENTILE: a list of the values while exact, like sma's ring.)
    return acc;
  }

  /** Adds one row's values (as `read` gave them) seen at event time `time`. */
  add(acc: Slots, values: readonly unknown[], time: number): void {
    const kinds = this.#kinds;
    for (let i = 0; i < kinds.length; i++) {
      const value = values[i];
      if (value === null || value === undefined) continue;
      const o = this.#offsets[i]!;
      switch (kinds[i]) {
        case COUNT:
          acc[o] = (acc[o] as number) + 1;
          break;
        case SUM:
          acc[o] = acc[o] === null ? value : (acc[o] as number) + (value as number);
          break;
        case AVG:
          acc[o] = (acc[o] as number) + 1;
          acc[o + 1] = (acc[o + 1] as number) + (value as number);
          break;
        case MIN:
          if (acc[o] === null || (value as number) < (acc[o] as number)) acc[o] = value;
          break;
        case MAX:
          if (acc[o] === null || (value as number) > (acc[o] as number)) acc[o] = value;
          break;
        case FIRST:
          // Earliest event time; a tie keeps the earlier arrival.
          if (acc[o] === null || time < (acc[o] as number)) {
            acc[o] = time;
            acc[o + 1] = value;
          }
          break;
        case LAST:
          // Latest event time; a tie takes the later arrival.
          if (acc[o] === null || time >= (acc[o] as number)) {
            acc[o] = time;
            acc[o + 1] = value;
          }
          break;
        case DISTINCT: {
          const key = distinctKey(value);
          const seen = acc[o] as Set<string> | HllRegisters;
          if (seen instanceof Uint8Array) hllAdd(seen, key);
          else if (!seen.has(key)) {
            seen.add(key);
            acc[o + 1] = (acc[o + 1] as number) + key.length;
            if (seen.size > this.#exactUpTo[i]!) toHll(acc, o);
          }
          break;
        }
        case STDDEV:
        case STDDEV_POP: {
          const x = value as number;
          const n = (acc[o] as number) + 1;
          const delta = x - (acc[o + 1] as number);
          const mean = (acc[o + 1] as number) + delta / n;
          acc[o] = n;
          acc[o + 1] = mean;
          acc[o + 2] = (acc[o + 2] as number) + delta * (x - mean);
          break;
        }
        case SMA: {
          // The n latest values by event time (a tie: the later arrival is the later value).
          const latest = acc[o] as Array<[number, number]>;
          const at = insertionPoint(latest, time);
          if (latest.length < this.#params[i]!) latest.splice(at, 0, [time, value as number]);
          else if (at > 0) {
            latest.splice(at, 0, [time, value as number]);
            latest.shift();
          }
          break;
        }
        case EMA: {
          // In event-time order: the latest values are kept (as many as still weigh within double
          // precision); older ones fold into the base. A value older than all those kept, once
          // some were folded, weighs less than 1e-17 of the result and is left out.
          const history = acc[o + 1] as Array<[number, number]>;
          const at = insertionPoint(history, time);
          if (at === 0 && history.length > 0 && acc[o] !== null) break;
          history.splice(at, 0, [time, value as number]);
          if (history.length > emaHistory(this.#params[i]!)) {
            const alpha = this.#params[i]!;
            const [, oldest] = history.shift()!;
            acc[o] = acc[o] === null ? oldest : alpha * oldest + (1 - alpha) * (acc[o] as number);
          }
          break;
        }
        case PERCENTILE: {
          const held = acc[o] as number[] | Digest;
          if (Array.isArray(held)) {
            held.push(value as number);
            if (held.length > this.#exactUpTo[i]!) acc[o] = toDigest(held);
          } else {
            digestAdd(held, value as number);
          }
          break;
        }
        case ARGMAX:
        case ARGMIN: {
          // A tie keeps the earlier arrival.
          const x = (value as Row)[this.#columns[i]!] as number;
          const best = acc[o] as number | null;
          if (best === null || (kinds[i] === ARGMAX ? x > best : x < best)) {
            acc[o] = x;
            acc[o + 1] = value;
          }
          break;
        }
      }
    }
  }

  /** Folds `later` (a session that began after `into`'s) into `into`. Only for mergeable aggregates. */
  merge(into: Slots, later: Slots): void {
    const kinds = this.#kinds;
    for (let i = 0; i < kinds.length; i++) {
      const o = this.#offsets[i]!;
      switch (kinds[i]) {
        case COUNT:
          into[o] = (into[o] as number) + (later[o] as number);
          break;
        case SUM:
          if (later[o] !== null) into[o] = into[o] === null ? later[o] : (into[o] as number) + (later[o] as number);
          break;
        case AVG:
          into[o] = (into[o] as number) + (later[o] as number);
          into[o + 1] = (into[o + 1] as number) + (later[o + 1] as number);
          break;
        case MIN:
          if (later[o] !== null && (into[o] === null || (later[o] as number) < (into[o] as number))) into[o] = later[o];
          break;
        case MAX:
          if (later[o] !== null && (into[o] === null || (later[o] as number) > (into[o] as number))) into[o] = later[o];
          break;
        case FIRST:
          if (later[o] !== null && (into[o] === null || (later[o] as number) < (into[o] as number))) {
            into[o] = later[o];
            into[o + 1] = later[o + 1];
          }
          break;
        case LAST:
          if (later[o] !== null && (into[o] === null || (later[o] as number) >= (into[o] as number))) {
            into[o] = later[o];
            into[o + 1] = later[o + 1];
          }
          break;
        case DISTINCT: {
          const other = later[o] as Set<string> | HllRegisters;
          if (other instanceof Uint8Array && !(into[o] instanceof Uint8Array)) toHll(into, o);
          const seen = into[o] as Set<string> | HllRegisters;
          if (seen instanceof Uint8Array) {
            if (other instanceof Uint8Array) hllMerge(seen, other);
            else for (const key of other) hllAdd(seen, key);
            break;
          }
          let chars = into[o + 1] as number;
          for (const key of other as Set<string>) {
            if (!seen.has(key)) {
              seen.add(key);
              chars += key.length;
            }
          }
          into[o + 1] = chars;
          if (seen.size > this.#exactUpTo[i]!) toHll(into, o);
          break;
        }
        case STDDEV:
        case STDDEV_POP: {
          // Chan et al.: combine two (n, mean, m2) summaries.
          const na = into[o] as number;
          const nb = later[o] as number;
          if (nb === 0) break;
          if (na === 0) {
            into[o] = nb;
            into[o + 1] = later[o + 1];
            into[o + 2] = later[o + 2];
            break;
          }
          const n = na + nb;
          const delta = (later[o + 1] as number) - (into[o + 1] as number);
          into[o] = n;
          into[o + 1] = (into[o + 1] as number) + (delta * nb) / n;
          into[o + 2] = (into[o + 2] as number) + (later[o + 2] as number) + (delta * delta * na * nb) / n;
          break;
        }
        case PERCENTILE: {
          const mine = into[o] as number[] | Digest;
          const theirs = later[o] as number[] | Digest;
          if (Array.isArray(mine) && Array.isArray(theirs)) {
            mine.push(...theirs);
            if (mine.length > this.#exactUpTo[i]!) into[o] = toDigest(mine);
            break;
          }
          const digest = Array.isArray(mine) ? toDigest(mine) : mine;
          if (Array.isArray(theirs)) for (const x of theirs) digestAdd(digest, x);
          else digestMerge(digest, theirs);
          into[o] = digest;
          break;
        }
        case ARGMAX:
        case ARGMIN:
          // `into` began earlier: a tie keeps its row.
          if (later[o] !== null && (into[o] === null || (kinds[i] === ARGMAX ? (later[o] as number) > (into[o] as number) : (later[o] as number) < (into[o] as number)))) {
            into[o] = later[o];
            into[o + 1] = later[o + 1];
          }
          break;
        default:
          throw new Error(`${this.list[i]!.op} has no merge`);
      }
    }
  }

  /** Writes each aggregate's result under its alias. */
  results(acc: Slots, out: Row): void {
    const kinds = this.#kinds;
    for (let i = 0; i < kinds.length; i++) {
      const result = this.#result(acc, i);
      // JSON has no -0, so a restored accumulator holds 0: emit 0 either way.
      out[this.list[i]!.alias] = result === 0 ? 0 : result;
    }
  }

  #result(acc: Slots, i: number): Value {
    const o = this.#offsets[i]!;
    switch (this.#kinds[i]) {
      case AVG:
        return acc[o] === 0 ? null : (acc[o + 1] as number) / (acc[o] as number);
      case FIRST:
      case LAST:
      case ARGMAX:
      case ARGMIN:
        return acc[o] === null ? null : acc[o + 1] as Value;
      case DISTINCT: {
        const seen = acc[o] as Set<string> | HllRegisters;
        return seen instanceof Uint8Array ? hllEstimate(seen) : seen.size;
      }
      case PERCENTILE: {
        const held = acc[o] as number[] | Digest;
        return Array.isArray(held) ? exactQuantile(held, this.#q[i]!) : digestQuantile(held, this.#q[i]!);
      }
      case STDDEV:
      case STDDEV_POP: {
        const n = acc[o] as number;
        const ddof = this.#kinds[i] === STDDEV ? 1 : 0;
        if (n <= ddof) return null;
        const variance = Math.max(0, (acc[o + 2] as number) / (n - ddof));
        return this.#root[i] ? Math.sqrt(variance) : variance;
      }
      case SMA: {
        const latest = acc[o] as Array<[number, number]>;
        if (latest.length === 0) return null;
        let sum = 0;
        for (const [, x] of latest) sum += x;
        return sum / latest.length;
      }
      case EMA: {
        const alpha = this.#params[i]!;
        let ema = acc[o] as number | null;
        for (const [, x] of acc[o + 1] as Array<[number, number]>) ema = ema === null ? x : alpha * x + (1 - alpha) * ema;
        return ema;
      }
      default:
        return acc[o] as number | null;
    }
  }

  /** One JSON value per aggregate, for the changelog. */
  encode(acc: Slots): unknown[] {
    const out: unknown[] = [];
    const kinds = this.#kinds;
    for (let i = 0; i < kinds.length; i++) {
      const o = this.#offsets[i]!;
      switch (kinds[i]) {
        case AVG:
          out.push([acc[o], acc[o + 1]]);
          break;
        case FIRST:
        case LAST:
        case ARGMAX:
        case ARGMIN:
          out.push(acc[o] === null ? null : [acc[o], acc[o + 1]]);
          break;
        case DISTINCT: {
          const seen = acc[o] as Set<string> | HllRegisters;
          out.push(seen instanceof Uint8Array ? { hll: hllToText(seen) } : [...seen]);
          break;
        }
        case PERCENTILE: {
          const held = acc[o] as number[] | Digest;
          out.push(Array.isArray(held) ? [...held] : { means: [...held.means], counts: [...held.counts], buffer: [...held.buffer], min: held.min, max: held.max });
          break;
        }
        case STDDEV:
        case STDDEV_POP:
          out.push([acc[o], acc[o + 1], acc[o + 2]]);
          break;
        case SMA:
          out.push((acc[o] as Array<[number, number]>).map(([t, x]) => [t, x]));
          break;
        case EMA:
          out.push({ base: acc[o], history: (acc[o + 1] as Array<[number, number]>).map(([t, x]) => [t, x]) });
          break;
        default:
          out.push(acc[o]);
      }
    }
    return out;
  }

  /** The slots back from `encode`'s output; STATE_CORRUPTED (via the reader) for anything else. */
  decode(r: StateReader, json: unknown): Slots {
    const list = r.list(json, "acc");
    if (list.length !== this.size) r.fail(`acc has ${list.length} accumulators, the step has ${this.size} aggregates: was aggs changed?`);
    const acc = this.create();
    const kinds = this.#kinds;
    for (let i = 0; i < kinds.length; i++) {
      const o = this.#offsets[i]!;
      const x = list[i];
      const op = this.list[i]!.op;
      switch (kinds[i]) {
        case COUNT:
          acc[o] = r.integer(x, op);
          break;
        case AVG: {
          const [n, sum] = r.list(x, op);
          acc[o] = r.integer(n, `${op} count`);
          acc[o + 1] = r.number(sum, `${op} sum`);
          break;
        }
        case FIRST:
        case LAST:
          if (x !== null) {
            const pair = r.list(x, op);
            if (pair.length !== 2) r.fail(`${op} must be [time, value]`);
            acc[o] = r.number(pair[0], `${op} time`);
            acc[o + 1] = pair[1];
          }
          break;
        case ARGMAX:
        case ARGMIN:
          if (x !== null) {
            const pair = r.list(x, op);
            if (pair.length !== 2 || typeof pair[1] !== "object" || pair[1] === null || Array.isArray(pair[1])) r.fail(`${op} must be [value, row]`);
            acc[o] = r.number(pair[0], `${op} value`);
            acc[o + 1] = pair[1];
          }
          break;
        case PERCENTILE: {
          if (Array.isArray(x)) {
            acc[o] = x.map((value) => r.number(value, `a ${op} value`));
            break;
          }
          const d = r.object(x, op);
          const means = r.list(d.means, `${op} means`).map((m) => r.number(m, `a ${op} mean`));
          const counts = r.list(d.counts, `${op} counts`).map((c) => r.integer(c, `a ${op} count`));
          if (means.length !== counts.length) r.fail(`${op} has ${means.length} means and ${counts.length} counts`);
          const buffer = r.list(d.buffer, `${op} buffer`).map((b) => r.number(b, `a ${op} buffered value`));
          acc[o] = { means, counts, buffer, min: r.number(d.min, `${op} min`), max: r.number(d.max, `${op} max`) } satisfies Digest;
          break;
        }
        case DISTINCT: {
          if (typeof x === "object" && x !== null && !Array.isArray(x)) {
            const registers = hllFromText(r.string((x as { hll?: unknown }).hll, `${op} hll`));
            if (registers === undefined) r.fail(`${op} hll is not ${2 ** HLL_PRECISION} HyperLogLog registers in base64`);
            acc[o] = registers;
            acc[o + 1] = -1;
            break;
          }
          const seen = acc[o] as Set<string>;
          let chars = 0;
          for (const key of r.list(x, op)) {
            const k = r.string(key, `a ${op} entry`);
            seen.add(k);
            chars += k.length;
          }
          acc[o + 1] = chars;
          break;
        }
        case STDDEV:
        case STDDEV_POP: {
          const [n, mean, m2] = r.list(x, op);
          acc[o] = r.integer(n, `${op} count`);
          acc[o + 1] = r.number(mean, `${op} mean`);
          acc[o + 2] = r.number(m2, `${op} m2`);
          break;
        }
        case SMA: {
          // [time, value] pairs; a plain number is an older engine's value (arrival order, no time).
          const values = r.list(x, op).map((entry, k): [number, number] =>
            typeof entry === "number" ? [Number.MIN_SAFE_INTEGER + k, r.number(entry, "an sma value")] : timedValue(r, entry, "an sma value"));
          if (values.length > this.#params[i]!) r.fail(`sma holds ${values.length} values, more than n = ${this.#params[i]}`);
          acc[o] = values;
          acc[o + 1] = 0;
          break;
        }
        case EMA: {
          // { base, history }; a number or null is an older engine's ema (arrival order).
          if (x === null || typeof x === "number") {
            acc[o] = r.numberOrNull(x, op);
            break;
          }
          const e = r.object(x, op);
          acc[o] = r.numberOrNull(e.base, `${op} base`);
          acc[o + 1] = r.list(e.history, `${op} history`).map((entry) => timedValue(r, entry, "an ema value"));
          break;
        }
        default:
          acc[o] = r.numberOrNull(x, op);
      }
    }
    return acc;
  }

  /** Approximate bytes held by one set of slots. */
  bytes(acc: Slots): number {
    let bytes = 32 + 8 * acc.length;
    const kinds = this.#kinds;
    for (let i = 0; i < kinds.length; i++) {
      const o = this.#offsets[i]!;
      switch (kinds[i]) {
        case FIRST:
        case LAST:
        case ARGMAX:
        case ARGMIN:
          if (acc[o] !== null) bytes += approxBytes(acc[o + 1]);
          break;
        case PERCENTILE: {
          const held = acc[o] as number[] | Digest;
          bytes += 32 + 8 * (Array.isArray(held) ? held.length : 2 * held.means.length + held.buffer.length);
          break;
        }
        case DISTINCT: {
          const seen = acc[o] as Set<string> | HllRegisters;
          bytes += seen instanceof Uint8Array ? seen.length : 64 + 2 * (acc[o + 1] as number) + 24 * seen.size;
          break;
        }
        case SMA:
          bytes += 32 + 40 * (acc[o] as unknown[]).length;
          break;
        case EMA:
          bytes += 32 + 40 * (acc[o + 1] as unknown[]).length;
          break;
      }
    }
    return bytes;
  }
}

function typeError(op: string, columnName: string, value: unknown): FvError {
  const got = typeof value === "number" ? String(value) : `${Array.isArray(value) ? "list" : typeof value} ${JSON.stringify(value)}`;
  return new FvError("POISON_ROW", `${op} of column "${columnName}" needs a finite number, got ${got}`, {
    context: { reason: "type_error", field: columnName },
  });
}

/** Where a value at `time` goes in a list sorted by time, after the values of the same time. */
function insertionPoint(list: ReadonlyArray<[number, number]>, time: number): number {
  let at = list.length;
  while (at > 0 && list[at - 1]![0] > time) at--;
  return at;
}

/** How many of the latest values an ema keeps: those that still weigh 1e-17 of the result or more. */
function emaHistory(alpha: number): number {
  if (alpha >= 1) return 1;
  return Math.min(100_000, Math.ceil(Math.log(1e-17) / Math.log(1 - alpha)));
}

function timedValue(r: StateReader, entry: unknown, what: string): [number, number] {
  const pair = r.list(entry, what);
  if (pair.length !== 2) r.fail(`${what} must be [time, value]`);
  return [r.number(pair[0], `${what}'s time`), r.number(pair[1], what)];
}

/** percentile past its exact bound: the values go into a t-digest. */
function toDigest(values: number[]): Digest {
  const digest = newDigest();
  for (const x of values) digestAdd(digest, x);
  return digest;
}

/** The q-quantile of the values, interpolating linearly between the two nearest ranks (numpy's default); null when there are none. */
function exactQuantile(values: readonly number[], q: number): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const h = (sorted.length - 1) * q;
  const lo = Math.floor(h);
  const hi = Math.min(lo + 1, sorted.length - 1);
  return sorted[lo]! + (h - lo) * (sorted[hi]! - sorted[lo]!);
}

/** countDistinct past its exact bound: the set's values go into HyperLogLog registers. */
function toHll(acc: Slots, o: number): void {
  const registers = newHll();
  for (const key of acc[o] as Set<string>) hllAdd(registers, key);
  acc[o] = registers;
  acc[o + 1] = -1;
}

/** The identity of a value for countDistinct: 1 and "1" differ, 0 and -0 do not. */
function distinctKey(value: unknown): string {
  switch (typeof value) {
    case "string":
      return "s" + value;
    case "number":
      return "n" + String(value);
    case "boolean":
      return value ? "b1" : "b0";
    default:
      return "j" + JSON.stringify(value);
  }
}
