/**
 * What operator state may hold, and the checks that keep it that way: every value written to a
 * changelog or a snapshot must be plain JSON, and every value read back is checked before use.
 */
import { FvError } from "../errors.ts";
import type { Row } from "../expr/index.ts";

/** Deeper than this is refused: rows come from JSON and are never this deep, a cycle always is. */
const MAX_DEPTH = 1_000;

/**
 * Where `value` stops being plain JSON, as a path like `.acc[1]`, or undefined when it is plain
 * JSON: null, booleans, finite numbers, strings, arrays without holes, plain objects.
 */
export function nonJsonPath(value: unknown): { path: string; what: string } | undefined {
  const stack: Array<{ value: unknown; path: string; depth: number }> = [{ value, path: "", depth: 0 }];
  while (stack.length > 0) {
    const item = stack.pop()!;
    const x = item.value;
    switch (typeof x) {
      case "string":
      case "boolean":
        continue;
      case "number":
        if (Number.isFinite(x)) continue;
        return { path: item.path, what: String(x) };
      case "object": {
        if (x === null) continue;
        if (item.depth >= MAX_DEPTH) return { path: item.path, what: `nesting deeper than ${MAX_DEPTH} (a cycle?)` };
        if (Array.isArray(x)) {
          for (let i = 0; i < x.length; i++) {
            if (!(i in x)) return { path: `${item.path}[${i}]`, what: "a hole in a list" };
            stack.push({ value: x[i], path: `${item.path}[${i}]`, depth: item.depth + 1 });
          }
          continue;
        }
        const proto = Object.getPrototypeOf(x);
        if (proto !== Object.prototype && proto !== null) return { path: item.path, what: `a ${proto?.constructor?.name ?? "non-plain"} object` };
        for (const key of Object.keys(x)) {
          stack.push({ value: (x as Record<string, unknown>)[key], path: `${item.path}.${key}`, depth: item.depth + 1 });
        }
        continue;
      }
      default:
        return { path: item.path, what: typeof x };
    }
  }
  return undefined;
}

/** True for plain JSON; the fast test every changelog value goes through (the path is only looked for on failure). */
function isPlainJson(x: unknown, depth: number): boolean {
  switch (typeof x) {
    case "string":
    case "boolean":
      return true;
    case "number":
      return Number.isFinite(x);
    case "object": {
      if (x === null) return true;
      if (depth >= MAX_DEPTH) return false;
      if (Array.isArray(x)) {
        for (let i = 0; i < x.length; i++) if (!(i in x) || !isPlainJson(x[i], depth + 1)) return false;
        return true;
      }
      const proto = Object.getPrototypeOf(x);
      if (proto !== Object.prototype && proto !== null) return false;
      for (const key in x) if (!isPlainJson((x as Record<string, unknown>)[key], depth + 1)) return false;
      return true;
    }
    default:
      return false;
  }
}

/** Throws STATE_CORRUPTED when a state value is not plain JSON, naming the op, the key and the path. */
export function assertJsonState(op: string, key: string, value: unknown): void {
  if (isPlainJson(value, 0)) return;
  const bad = nonJsonPath(value);
  if (bad === undefined) return;
  throw new FvError(
    "STATE_CORRUPTED",
    `${op}: state key ${JSON.stringify(key)} holds ${bad.what} at value${bad.path}, which JSON cannot carry; refusing to write a partial changelog or snapshot`,
    { context: { op, key, path: bad.path } },
  );
}

/** A rough size in bytes of a JSON value held in memory: 8 per number, 2 per string char, plus per-object overhead. */
export function approxBytes(value: unknown): number {
  let bytes = 0;
  const stack: unknown[] = [value];
  let guard = 0;
  while (stack.length > 0 && guard++ < 1_000_000) {
    const x = stack.pop();
    if (typeof x === "string") bytes += 16 + 2 * x.length;
    else if (typeof x !== "object" || x === null) bytes += 8;
    else if (Array.isArray(x)) {
      bytes += 16 + 8 * x.length;
      for (const item of x) stack.push(item);
    } else {
      bytes += 32;
      for (const key of Object.keys(x)) {
        bytes += 16 + 2 * key.length;
        stack.push((x as Record<string, unknown>)[key]);
      }
    }
  }
  return bytes;
}

const utf8 = new TextDecoder();

/**
 * A restored state value still as the changelog record's bytes (or text): parsed when the operator
 * first needs it. An operator that takes undecoded values (`StateCodec.loadUndecoded`) decodes
 * each on first use; every other one gets it parsed during the restore.
 */
export class RawState {
  /**
   * @param source the record's value: bytes, or the text already decoded
   * @param where where it came from, for the error: `<topic>[<partition>]`, or with its offset
   * @param offset the record's offset, named after `where` (the text is made only for an error)
   */
  constructor(readonly source: Uint8Array | string, readonly where: string, readonly offset?: bigint) {}

  /** Where it came from: `<topic>[<partition>]@<offset>`. */
  get origin(): string {
    return this.offset === undefined ? this.where : `${this.where}@${this.offset}`;
  }

  /** The value; STATE_CORRUPTED naming the record when it is not JSON. */
  parse(): unknown {
    try {
      return JSON.parse(typeof this.source === "string" ? this.source : utf8.decode(this.source));
    } catch (error) {
      throw new FvError("STATE_CORRUPTED", `state record ${this.origin} is not JSON`, { cause: error });
    }
  }

  /** Bytes of text it takes, for state size estimates. */
  get length(): number {
    return this.source.length;
  }
}

/** The STATE_CORRUPTED error for a restored entry whose value does not have the expected shape. */
export function corrupted(op: string, key: string, why: string): FvError {
  return new FvError("STATE_CORRUPTED", `${op}: cannot restore state key ${JSON.stringify(key)}: ${why}`, { context: { op, key } });
}

/** Reads restored values with shape checks; each failure is a STATE_CORRUPTED naming the key. */
export class StateReader {
  constructor(readonly op: string, readonly key: string) {}

  fail(why: string): never {
    throw corrupted(this.op, this.key, why);
  }

  object(value: unknown, what: string): Record<string, unknown> {
    if (typeof value !== "object" || value === null || Array.isArray(value)) this.fail(`${what} must be an object`);
    return value as Record<string, unknown>;
  }

  row(value: unknown, what: string): Row {
    return this.object(value, what);
  }

  list(value: unknown, what: string): unknown[] {
    if (!Array.isArray(value)) this.fail(`${what} must be a list`);
    return value;
  }

  number(value: unknown, what: string): number {
    if (typeof value !== "number" || !Number.isFinite(value)) this.fail(`${what} must be a finite number`);
    return value;
  }

  integer(value: unknown, what: string, min = 0): number {
    if (typeof value !== "number" || !Number.isSafeInteger(value) || value < min) this.fail(`${what} must be an integer >= ${min}`);
    return value;
  }

  numberOrNull(value: unknown, what: string): number | null {
    return value === null ? null : this.number(value, what);
  }

  string(value: unknown, what: string): string {
    if (typeof value !== "string") this.fail(`${what} must be a string`);
    return value;
  }

  boolean(value: unknown, what: string): boolean {
    if (typeof value !== "boolean") this.fail(`${what} must be true or false`);
    return value;
  }
}
