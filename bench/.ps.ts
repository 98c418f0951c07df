import { load, nextName, timeEngine } from "./lib.ts";
const N = Number(process.argv[2] ?? 300000);
const input = process.argv[3] ?? nextName("ps-in");
if (!process.argv[3]) { await load(input, N); console.log("input", input); }
const steps = [{ op: "filter", expression: "price >= 50" }, { op: "applyExpression", column: "notional", expression: "price * qty" }];
const eos = process.env.EOS !== "0";
const rate = await timeEngine(input, N, steps, { STREAM_EXACTLY_ONCE: String(eos), STREAM_CHECKPOINT_INTERVAL_MS: "100" });
console.log(`${process.env.NOLEAN ? "library" : "lean   "} stateless ${eos ? "EOS" : "ALOS"} 100 ms: ${Math.round(rate)} rows/s`);
process.exit(0);
