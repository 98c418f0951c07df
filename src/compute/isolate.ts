/**
 * Poison isolation for batch calls: when a call fails for the batch as a whole, halve it and call
 * again, down to single rows; the rows that still fail alone are poison, the rest go on. A batch
 * of n rows with one bad row costs about 2·log2(n) extra calls.
 */
import type { Row } from "../expr/index.ts";
import { type ComputeResult, decodeResults, poison, PoisonReasons } from "./results.ts";

/** The outcome of one batch call. */
export type CallOutcome =
  | { ok: true; output: unknown }
  /** `divisible`: whether calling again with fewer rows can help (false for a timeout). */
  | { ok: false; reason: string; message: string; divisible: boolean };

/**
 * Calls `call` on the rows and returns one result per row, bisecting on failure. `first`, when
 * given, is the outcome of a call on all the rows already made.
 */
export async function isolate(
  rows: Row[],
  call: (rows: Row[]) => Promise<CallOutcome>,
  castOut: ((row: Row) => Row) | null,
  first?: CallOutcome,
): Promise<ComputeResult[]> {
  const results: ComputeResult[] = new Array(rows.length);
  const run = async (start: number, end: number, known?: CallOutcome): Promise<void> => {
    const slice = rows.slice(start, end);
    let outcome = known ?? (await call(slice));
    if (outcome.ok) {
      const decoded = decodeResults(outcome.output, slice.length, castOut);
      if (decoded) {
        for (let i = 0; i < decoded.length; i++) results[start + i] = decoded[i]!;
        return;
      }
      outcome = { ok: false, reason: PoisonReasons.badOutput, message: `the output is not {"results": [...]} with ${slice.length} entries`, divisible: true };
    }
    if (!outcome.divisible || slice.length === 1) {
      for (let i = start; i < end; i++) results[i] = poison(outcome.reason, outcome.message);
      return;
    }
    const mid = start + Math.ceil(slice.length / 2);
    await run(start, mid);
    await run(mid, end);
  };
  if (rows.length > 0) await run(0, rows.length, first);
  return results;
}
