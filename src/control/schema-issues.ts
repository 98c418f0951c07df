/**
 * Turns valibot's issues for an object into the message a user can act on. valibot reports a
 * missing key and an unknown key (of a strict object) with the same issue type, so reading the
 * type alone called both "unexpected"; here they are told apart by what was expected.
 *
 * @example
 * const parsed = v.safeParse(selectSchema, { op: "select", colums: ["a"] });
 * describeIssues(selectSchema, parsed.issues!, "select");
 * // → { field: "columns", message: 'missing field "columns" for select; unknown field "colums" (did you mean "columns"?)' }
 */
import type * as v from "valibot";

type Issue = v.BaseIssue<unknown>;
type AnySchema = { type?: string; entries?: Record<string, unknown>; wrapped?: unknown; item?: unknown; value?: unknown; options?: unknown[] };

const isObjectIssue = (issue: Issue) => issue.kind === "schema" && /(^|_)object$/.test(issue.type);
/** valibot's missing key: expected `"key"`, received undefined. */
const isMissingKey = (issue: Issue) => isObjectIssue(issue) && issue.received === "undefined" && issue.expected !== "never";
/** valibot's unknown key of a strict object: expected never. */
const isUnknownKey = (issue: Issue) => isObjectIssue(issue) && issue.expected === "never";

function pathKeys(issue: Issue): Array<string | number> {
  return (issue.path ?? []).map((item) => item.key as string | number);
}

/** The schemas an object at `keys` may be checked by (several under a union), optional and pipe unwrapped. */
function schemasAt(root: unknown, keys: ReadonlyArray<string | number>): AnySchema[] {
  const unwrap = (schema: unknown): AnySchema[] => {
    let s = schema as AnySchema | undefined;
    while (s?.wrapped) s = s.wrapped as AnySchema;
    if (!s) return [];
    return s.options ? s.options.flatMap(unwrap) : [s];
  };
  let current = unwrap(root);
  for (const key of keys) {
    current = current.flatMap((s) => {
      if (s.entries && typeof key === "string" && key in s.entries) return unwrap(s.entries[key]);
      if (s.item && typeof key === "number") return unwrap(s.item);
      if (s.value && s.type === "record") return unwrap(s.value);
      return [];
    });
  }
  return current;
}

/** The keys the object at `keys` may hold, or [] when the schema does not say. */
export function knownKeys(root: unknown, keys: ReadonlyArray<string | number>): string[] {
  return [...new Set(schemasAt(root, keys).flatMap((s) => Object.keys(s.entries ?? {})))];
}

function editDistance(a: string, b: string): number {
  a = a.toLowerCase();
  b = b.toLowerCase();
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      row[j] = Math.min(previous[j]! + 1, row[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    previous = row;
  }
  return previous[b.length]!;
}

/** The candidate closest to `word`, if it is close enough to be a slip of the keyboard. */
export function closest(word: string, candidates: readonly string[]): string | undefined {
  // 1 edit for short names, 2 from five letters: "colums" → "columns", "maping" → "mapping",
  // "batchsize" → "batchSize" (case is ignored), while "name" does not suggest "same".
  const limit = word.length < 5 ? 1 : 2;
  let best: { candidate: string; distance: number } | undefined;
  for (const candidate of candidates) {
    if (candidate === word) continue;
    const distance = editDistance(word, candidate);
    if (distance <= limit && (!best || distance < best.distance)) best = { candidate, distance };
  }
  return best?.candidate;
}

const quoted = (keys: readonly string[]) => keys.map((k) => `"${k}"`).join(", ");

/**
 * The first issue as a field and a message: `missing field "x"`, `unknown field "y" (did you
 * mean "x"?)`, or valibot's own message for anything else. `subject` (e.g. the step's op) is
 * named after the field.
 */
export function describeIssues(schema: unknown, issues: readonly Issue[], subject?: string): { field: string; message: string } {
  const first = issues[0]!;
  const keys = pathKeys(first);
  const field = keys.join(".");
  const key = String(keys.at(-1) ?? "");
  const parentKeys = keys.slice(0, -1);
  const forSubject = subject ? ` for ${subject}` : "";
  if (isMissingKey(first)) {
    // A misspelt key shows as the missing one plus a key the schema does not know: name both.
    const parent = first.path?.at(-1)?.input;
    const known = new Set(knownKeys(schema, parentKeys));
    const present = parent && typeof parent === "object" ? Object.keys(parent).filter((k) => !known.has(k)) : [];
    const slip = present.find((k) => closest(k, [key]) === key);
    const also = slip !== undefined ? `; unknown field "${slip}" (did you mean "${key}"?)` : "";
    return { field, message: `missing field "${key}"${forSubject}${also}` };
  }
  if (isUnknownKey(first)) {
    const known = knownKeys(schema, parentKeys);
    const guess = closest(key, known);
    if (guess !== undefined) return { field, message: `unknown field "${key}" (did you mean "${guess}"?)` };
    const list = known.length > 0 ? `; known fields: ${quoted(known)}` : "";
    return { field, message: `unknown field "${key}"${forSubject}${list}` };
  }
  return { field, message: first.message };
}
