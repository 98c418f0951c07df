/** Rows and the exact outputs of the order examples, shared by the Bun and Deno checks. */

/** Orders, one with non-ASCII text in and out (as-pdk 1.0.0 cut such output short). */
export const orders = [
  { sku: "AB-1", customer: "Zoë Ångström", price: 101.5, qty: 10, note: "dropped: not declared" },
  { sku: "CD-2", customer: "東京商事 🎉", price: 20, qty: 3 },
  { sku: "EF-3", customer: "plain", price: "12", qty: 1 },
  { sku: "GH-4", customer: 'quote " and \\ backslash\n', price: 250, qty: 4 },
];

export const enriched = [
  [{ sku: "AB-1", customer: "Zoë Ångström", price: 101.5, qty: 10, notional: 1015, tier: "large", label: "AB-1 ×10" }],
  [{ sku: "CD-2", customer: "東京商事 🎉", price: 20, qty: 3, notional: 60, tier: "small", label: "CD-2 ×3" }],
  // price "12" does not fit number: it is cast to null before the plugin sees it.
  [{ sku: "EF-3", customer: "plain", price: null, qty: 1, notional: null, tier: null, label: "EF-3 ×1" }],
  [{ sku: "GH-4", customer: 'quote " and \\ backslash\n', price: 250, qty: 4, notional: 1000, tier: "large", label: "GH-4 ×4" }],
];

export const filtered = [
  [{ sku: "AB-1", customer: "Zoë Ångström", price: 101.5, qty: 10 }],
  [],
  [],
  [{ sku: "GH-4", customer: 'quote " and \\ backslash\n', price: 250, qty: 4 }],
];

/** Texts and the exact outputs of the Go example (text-stats-go). */
export const texts = [
  { id: 1, text: "héllo wörld  again" },
  { id: 2, text: null },
  { id: 3, text: "東京 は 晴れ 🎉" },
];

export const textStats = [
  [{ id: 1, text: "héllo wörld  again", words: 3, chars: 18 }],
  "poison:plugin_error",
  [{ id: 3, text: "東京 は 晴れ 🎉", words: 4, chars: 9 }],
];
