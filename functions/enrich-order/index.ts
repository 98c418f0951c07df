/**
 * enrich-order: a map. Each order row gets `notional` (price × qty), `tier` ("large" from 1000 on,
 * else "small") and a `label` such as "AB-1 ×3" (non-ASCII on purpose: it checks the UTF-8 output).
 * A row without price or qty gets null notional and tier.
 */
import { inputRows, outputResults } from "../as-lib/batch";
import { formatNumber, JValue } from "../as-lib/json";

function myAbort(message: string | null, fileName: string | null, line: u32, column: u32): void {
  unreachable();
}

export function transform(): i32 {
  const rows = inputRows();
  const results = new Array<JValue>(rows.length);
  for (let i = 0; i < rows.length; i++) {
    const row = rows[i];
    const out = row.copyObject();
    const price = row.get("price");
    const qty = row.get("qty");
    if (price.isNum() && qty.isNum()) {
      const notional = price.n * qty.n;
      out.set("notional", JValue.num(notional));
      out.set("tier", JValue.str(notional >= 1000 ? "large" : "small"));
    } else {
      out.set("notional", JValue.null());
      out.set("tier", JValue.null());
    }
    const sku = row.get("sku");
    const label = (sku.isStr() ? sku.s : "?") + " ×" + (qty.isNum() ? formatNumber(qty.n) : "?");
    out.set("label", JValue.str(label));
    const one = JValue.arr();
    one.push(out);
    results[i] = one;
  }
  outputResults(results);
  return 0;
}
