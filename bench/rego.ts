/**
 * A Rego filter (OPA, compiled to WebAssembly, evaluated with @open-policy-agent/opa-wasm) against
 * the same rule as a value-dialect filter, in memory: rows/second through the stage's steps.
 * Needs OPA (scripts/setup.sh installs it). Results are printed, not asserted.
 *
 *   node_modules/.bin/bun bench/rego.ts [rows] [repeats]
 */
import { computeConfig } from "../runtime/cli/compute-config.ts";
import { startComputeSteps } from "../src/loop/compute-runtime.ts";
import { compileTopology } from "../src/topology/compile-topology.ts";
import { fmt, median, runtimeName } from "./lib.ts";
import { mulberry32 as random } from "./random.ts";

const ROWS = Number(process.argv[2] ?? 200_000);
const REPEATS = Number(process.argv[3] ?? 5);
const POLICY = `package spectrum

default allow := false

allow if {
  input.snr > 10.0
  input.freq_mhz > 100.0
}
`;

const next = random(11);
const rows = Array.from({ length: ROWS }, (_, i) => ({ id: i, snr: Math.round(next() * 300) / 10, freq_mhz: Math.round(next() * 2000) / 10, band: "vhf" }));

async function stageOf(step: Record<string, unknown>) {
  const topology = compileTopology({ stages: [{ inputs: ["in"], output: "out", steps: [step as { op: string }] }] });
  await startComputeSteps(topology.stages, computeConfig(), () => {});
  return topology.stages[0]!;
}

const variants = {
  "rego (OPA wasm)": await stageOf({ op: "filter", language: "rego", policy: POLICY, query: "data.spectrum.allow" }),
  "value dialect": await stageOf({ op: "filter", expression: "snr > 10.0 && freq_mhz > 100.0" }),
  "cel": await stageOf({ op: "filter", language: "cel", expression: "snr > 10.0 && freq_mhz > 100.0" }),
};
console.log(`filter "snr > 10.0 and freq_mhz > 100.0" over ${ROWS.toLocaleString("en")} rows, ${runtimeName()}, median of ${REPEATS}`);
const rates: Record<string, number> = {};
for (const [name, stage] of Object.entries(variants)) {
  const times: number[] = [];
  let kept = 0;
  for (let r = 0; r <= REPEATS; r++) {
    const started = performance.now();
    kept = 0;
    for (const row of rows) if (stage.process(row) !== null) kept++;
    if (r > 0) times.push(performance.now() - started);
  }
  rates[name] = ROWS / (median(times) / 1000);
  console.log(`  ${name.padEnd(18)} ${fmt(rates[name]!)} rows/s   (${kept.toLocaleString("en")} kept)`);
}
console.log(`rego ÷ value dialect: ${(rates["rego (OPA wasm)"]! / rates["value dialect"]!).toFixed(3)}`);
process.exit(0);
