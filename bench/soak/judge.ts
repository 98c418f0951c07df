/**
 * Judges the outputs against the input, all three as the Java read_committed reader dumped them.
 *
 * stateless: every input row with v % 10 != 0 must appear as often as it appears in the input
 * (a feeder retry may have written an id twice), with double = 2 * v and its other fields as in
 * the input. stateful: per (key, 10 s window) the count and sum(v) of the input rows; a window
 * counts as expected only if it must be closed by the end (it ends at least one whole window
 * before the window of the latest input event time, i.e. the last two windows are left out);
 * each expected window exactly once, with its exact count and sum.
 */
import type { Dumped, InputRow } from "./kafka.ts";

export const WINDOW_MS = 10_000;
export const keep = (v: number) => v % 10 !== 0;

export interface InputTruth {
  rows: number;
  /** id -> [occurrences, the row] */
  byId: Map<number, { n: number; row: InputRow }>;
  maxTs: number;
  /** Rows whose JSON could not be read (should be 0). */
  unreadable: number;
}

export function readInput(records: Dumped[]): InputTruth {
  const byId = new Map<number, { n: number; row: InputRow }>();
  let maxTs = -Infinity;
  let unreadable = 0;
  for (const r of records) {
    let row: InputRow;
    try {
      row = JSON.parse(r.value);
    } catch {
      unreadable++;
      continue;
    }
    const seen = byId.get(row.id);
    if (seen) seen.n++;
    else byId.set(row.id, { n: 1, row });
    if (row.ts > maxTs) maxTs = row.ts;
  }
  return { rows: records.length, byId, maxTs, unreadable };
}

/** One output occurrence beyond what was expected, with when the engine wrote it (record timestamp). */
export interface Extra {
  timestamp: number;
}

export interface Verdict {
  expected: number;
  out: number;
  /** Expected occurrences not in the output. */
  missing: number;
  /** Expected ids (or windows) not in the output at all. */
  missingIds: number;
  duplicates: number;
  wrong: number;
  examples: string[];
  extras: Extra[];
  notes: string[];
}

export function judgeStateless(input: InputTruth, out: Dumped[]): Verdict {
  const seen = new Map<number, number>();
  const examples: string[] = [];
  const extras: Extra[] = [];
  let wrong = 0;
  const bad = (what: string) => {
    wrong++;
    if (examples.length < 10) examples.push(what);
  };
  // In offset order per partition, so the later copies are the extra ones.
  const ordered = [...out].sort((a, b) => a.partition - b.partition || a.offset - b.offset);
  for (const r of ordered) {
    let row: InputRow & { double?: number };
    try {
      row = JSON.parse(r.value);
    } catch {
      bad(`p${r.partition}@${r.offset}: not JSON: ${r.value.slice(0, 80)}`);
      continue;
    }
    const truth = input.byId.get(row.id);
    if (!truth) {
      bad(`p${r.partition}@${r.offset}: id ${row.id} is not in the input`);
      continue;
    }
    const t = truth.row;
    if (!keep(t.v)) bad(`p${r.partition}@${r.offset}: id ${row.id} has v=${t.v}: should have been filtered`);
    else if (row.double !== 2 * t.v) bad(`p${r.partition}@${r.offset}: id ${row.id}: double=${row.double}, expected ${2 * t.v}`);
    else if (row.v !== t.v || row.key !== t.key || row.ts !== t.ts) bad(`p${r.partition}@${r.offset}: id ${row.id}: fields differ from the input: ${r.value}`);
    const n = (seen.get(row.id) ?? 0) + 1;
    seen.set(row.id, n);
    if (keep(t.v) && n > truth.n) extras.push({ timestamp: r.timestamp });
  }
  let expected = 0;
  let missing = 0;
  let missingIds = 0;
  for (const [id, { n, row }] of input.byId) {
    if (!keep(row.v)) continue;
    expected += n;
    const got = seen.get(id) ?? 0;
    if (got < n) missing += n - got;
    if (got === 0) {
      missingIds++;
      if (examples.length < 10 && missingIds <= 3) examples.push(`missing: id ${id} (${JSON.stringify(row)})`);
    }
  }
  return { expected, out: out.length, missing, missingIds, duplicates: extras.length, wrong, examples, extras, notes: [] };
}

interface Window {
  n: number;
  sum: number;
}

export function judgeStateful(input: InputTruth, out: Dumped[]): Verdict & { windowsExpected: number; cutoffStart: number; beyondCutoff: number } {
  // Every input row counts (an id written twice by the feeder is two rows to the pipeline).
  const truth = new Map<string, Window>();
  for (const { n, row } of input.byId.values()) {
    const start = Math.floor(row.ts / WINDOW_MS) * WINDOW_MS;
    const k = `${row.key}@${start}`;
    const w = truth.get(k) ?? { n: 0, sum: 0 };
    w.n += n;
    w.sum += n * row.v;
    truth.set(k, w);
  }
  const lastStart = Math.floor(input.maxTs / WINDOW_MS) * WINDOW_MS;
  // Windows starting at or before this one must have fired: they ended a whole window before
  // the window of the latest event time began.
  const cutoffStart = lastStart - 2 * WINDOW_MS;
  const isExpected = (start: number) => start <= cutoffStart;
  let windowsExpected = 0;
  for (const k of truth.keys()) if (isExpected(Number(k.split("@")[1]))) windowsExpected++;

  const seen = new Map<string, number>();
  const examples: string[] = [];
  const extras: Extra[] = [];
  const notes: string[] = [];
  let wrong = 0;
  let beyondCutoff = 0;
  let beyondWrong = 0;
  const ordered = [...out].sort((a, b) => a.partition - b.partition || a.offset - b.offset);
  for (const r of ordered) {
    let w: { windowStart: number; windowEnd: number; key: string; n: number; sum: number };
    try {
      w = JSON.parse(r.value);
    } catch {
      wrong++;
      if (examples.length < 10) examples.push(`p${r.partition}@${r.offset}: not JSON: ${r.value.slice(0, 80)}`);
      continue;
    }
    const k = `${w.key}@${w.windowStart}`;
    const count = (seen.get(k) ?? 0) + 1;
    seen.set(k, count);
    if (count > 1) extras.push({ timestamp: r.timestamp });
    const e = truth.get(k);
    const ok = e !== undefined && e.n === w.n && e.sum === w.sum && w.windowEnd === w.windowStart + WINDOW_MS;
    if (!isExpected(w.windowStart)) {
      beyondCutoff++;
      if (!ok) beyondWrong++;
      continue;
    }
    if (!ok) {
      wrong++;
      if (examples.length < 10) {
        examples.push(`${k} (p${r.partition}@${r.offset}${count > 1 ? `, copy ${count}` : ""}): n=${w.n} sum=${w.sum}, expected ${e ? `n=${e.n} sum=${e.sum}` : "no such window in the input"}`);
      }
    }
  }
  let missing = 0;
  for (const k of truth.keys()) if (isExpected(Number(k.split("@")[1])) && !seen.has(k)) missing++;
  if (beyondCutoff) notes.push(`${beyondCutoff} window row(s) of the last two windows were emitted too (not judged; ${beyondWrong} of them differ from the input)`);
  return { expected: windowsExpected, out: out.length, missing, missingIds: missing, duplicates: extras.length, wrong, examples, extras, notes, windowsExpected, cutoffStart, beyondCutoff };
}
