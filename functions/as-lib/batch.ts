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
  return input.get("rows").list();
}

/**
 * Writes `{"results": [...]}` as UTF-8, then frees the call's garbage. The examples build with
 * `--runtime minimal`, whose collector runs only when asked: between calls nothing but globals is
 * live, so one `__collect()` per call is cheap, and it keeps the cost linear in the batch size
 * (the incremental collector made a 512-row call slower per row than a 64-row one).
 */
export function outputResults(results: JValue[]): void {
  const list = JValue.arr();
  list.items = results;
  const out = JValue.obj();
  out.set("results", list);
  Host.output(Uint8Array.wrap(String.UTF8.encode(stringify(out))));
  __collect();
}

/** A per-row error result: that row becomes poison (reason "plugin_error"), the rest go on. */
export function rowError(message: string): JValue {
  const e = JValue.obj();
  e.set("error", JValue.str(message));
  return e;
}
