/**
 * Results of compute steps, and the batch ABI's output side shared by WASM and container
 * transforms: `{"results": [entry, ...]}`, one entry per input row, in order, where an entry is
 * a list of output rows (zero or more: filter, map and flat-map) or `{"error": "..."}`.
 */
import type { Row } from "../expr/index.ts";

/** What became of one input row: its output rows (maybe none), or poison with a reason. */
export type ComputeResult = { rows: Row[] } | { poison: { reason: string; message: string } };

/** Why rows become poison. */
export const PoisonReasons = {
  /** The plugin or process reported an error for the row, or failed on it alone. */
  pluginError: "plugin_error",
  /** The call did not finish within timeoutMs. */
  timeout: "timeout",
  /** The output did not follow the batch ABI (not JSON, wrong count, a non-object row). */
  badOutput: "bad_output",
  /** The container process died while it held the row, twice. */
  containerCrash: "container_crash",
  /** The plugin grew its linear memory past memoryMaxPages on the row. */
  memoryLimit: "memory_limit",
  /** The WASM worker or plugin process died while it held the row. */
  pluginCrash: "plugin_crash",
  /** An http step's call was refused (4xx other than 429), failed after its retries, or its answer was not JSON. */
  httpError: "http_error",
  /** An http step's circuit breaker was open, so no call was made (`onOpen = "deadLetter"`). */
  circuitOpen: "circuit_open",
} as const;

export function poison(reason: string, message: string): ComputeResult {
  return { poison: { reason, message } };
}

function isRow(value: unknown): value is Row {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * Reads a batch output. Returns null when the output as a whole does not follow the ABI (then
 * the caller isolates rows); a single malformed entry makes only its row poison.
 */
export function decodeResults(output: unknown, count: number, castOut: ((row: Row) => Row) | null): ComputeResult[] | null {
  if (!isRow(output)) return null;
  const list = output.results;
  if (!Array.isArray(list) || list.length !== count) return null;
  const out: ComputeResult[] = new Array(count);
  for (let i = 0; i < count; i++) {
    const entry: unknown = list[i];
    if (Array.isArray(entry)) {
      if (entry.every(isRow)) out[i] = { rows: castOut ? entry.map(castOut) : entry };
      else out[i] = poison(PoisonReasons.badOutput, "an output row is not a JSON object");
    } else if (isRow(entry) && typeof entry.error === "string") {
      out[i] = poison(PoisonReasons.pluginError, entry.error);
    } else {
      out[i] = poison(PoisonReasons.badOutput, 'a result entry is neither a list of rows nor {"error": "..."}');
    }
  }
  return out;
}
