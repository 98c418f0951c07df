/**
 * The batch ABI for AssemblyScript transforms (see functions/README.md):
 * input `{"rows":[row, ...]}`, output `{"results":[[out, ...], ...]}`, one list per input row.
 *
 * Output is written as UTF-8 bytes through `Host.output`: as-pdk 1.0.0's `Host.outputString`
 * sizes its buffer by the UTF-16 length and cuts non-ASCII output short.
 */
import { Host } from "@extism/as-pdk";
import { JValue, parse, stringify } from "./json";

/** The rows of the call's input. */
export function inputRows(): JValue[] {
  const input = parse(Host.inputString());
  return input.get("rows").items;
}

/** Writes `{"results": [...]}` as UTF-8. */
export function outputResults(results: JValue[]): void {
  const out = JValue.obj();
  const list = JValue.arr();
  for (let i = 0; i < results.length; i++) list.push(results[i]);
  out.set("results", list);
  Host.output(Uint8Array.wrap(String.UTF8.encode(stringify(out))));
}

/** A per-row error result: that row becomes poison (reason "plugin_error"), the rest go on. */
export function rowError(message: string): JValue {
  const e = JValue.obj();
  e.set("error", JValue.str(message));
  return e;
}
