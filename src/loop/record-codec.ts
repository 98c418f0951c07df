import type { Row } from "../expr/index.ts";

const decoder = new TextDecoder("utf-8", { fatal: true });

export type Decoded = { row: Row } | { poison: "invalid_json" | "not_object"; detail: string };

/** A message value as a row: it must be a JSON object. Anything else is a poison row. */
export function decodeRow(value: Uint8Array | null): Decoded {
  if (value === null) return { poison: "not_object", detail: "the value is null (a tombstone), not a JSON object" };
  let parsed: unknown;
  try {
    parsed = JSON.parse(decoder.decode(value));
  } catch (error) {
    return { poison: "invalid_json", detail: `the value is not JSON: ${(error as Error).message}` };
  }
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
    return { poison: "not_object", detail: `the value is JSON but not an object: ${Array.isArray(parsed) ? "a list" : JSON.stringify(parsed)?.slice(0, 40)}` };
  }
  return { row: parsed as Row };
}
