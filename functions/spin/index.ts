/**
 * spin: passes rows through, except that a row with `spin = true` makes the plugin loop forever,
 * as a runaway plugin would. It exists for the timeout test.
 */
import { inputRows, outputResults } from "../as-lib/batch";
import { JValue } from "../as-lib/json";

function myAbort(message: string | null, fileName: string | null, line: u32, column: u32): void {
  unreachable();
}

let turns: u64 = 0;

export function transform(): i32 {
  const rows = inputRows();
  const results = new Array<JValue>(rows.length);
  for (let i = 0; i < rows.length; i++) {
    const row = rows[i];
    const spin = row.get("spin");
    if (spin.isBool() && spin.b) {
      while (turns != 0xffffffffffffffff) turns = (turns + 1) % 0x7fffffffffffffff;
    }
    const one = JValue.arr();
    one.push(row);
    results[i] = one;
  }
  outputResults(results);
  return 0;
}
