/**
 * price-filter: a filter. Keeps rows whose `price` is at least the config `min_price` (default
 * 100); a row without a price is dropped. For the isolation test, the config `trap_sku` names a
 * sku on which the plugin traps (a WebAssembly `unreachable`), as a buggy plugin would.
 */
import { Config } from "@extism/as-pdk";
import { inputRows, outputResults } from "../as-lib/batch";
import { JValue } from "../as-lib/json";

function myAbort(message: string | null, fileName: string | null, line: u32, column: u32): void {
  unreachable();
}

export function transform(): i32 {
  const minText = Config.get("min_price");
  const min = minText === null ? 100.0 : parseFloat(minText);
  const trapSku = Config.get("trap_sku");
  const rows = inputRows();
  const results = new Array<JValue>(rows.length);
  for (let i = 0; i < rows.length; i++) {
    const row = rows[i];
    const sku = row.get("sku");
    if (trapSku !== null && sku.isStr() && sku.s == trapSku) unreachable();
    const price = row.get("price");
    const kept = JValue.arr();
    if (price.isNum() && price.n >= min) kept.push(row);
    results[i] = kept;
  }
  outputResults(results);
  return 0;
}
