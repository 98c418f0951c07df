/**
 * The Kafka clients compared in one run: records per second of the filter pipeline (filter keeps
 * ~50% + a computed column) and the raw pass-through ceiling (consume → produce → commit through
 * the port) for each runtime and client:
 *
 *   Node + librdkafka (@confluentinc/kafka-javascript), Node + pure JS (@platformatic/kafka),
 *   Bun + pure JS, Deno + pure JS.
 *
 *   npm run bench:clients            # = setup, npm run build, bun bench/clients.ts
 *   bun bench/clients.ts [records=100000] [rounds=3]
 *
 * Every measurement is a fresh process of that runtime (bench/clients-run.ts; Node runs its tsc
 * build in .fv/node/) with a fresh group over the same pre-loaded 4-partition topic, timed from
 * start (group join included) until every record is processed. Rounds are interleaved, the
 * median is printed, ratios are within this run. Nothing is asserted.
 */
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import process from "node:process";
import { BROKERS, fmt, load, median, nextName } from "./lib.ts";

const ROOT = resolve(import.meta.dir, "..");
const N = Number(process.argv[2] ?? 100_000);
const ROUNDS = Number(process.argv[3] ?? 3);
const NODE_RUN = join(ROOT, ".fv/node/bench/clients-run.js");
const SOURCE_RUN = join(ROOT, "bench/clients-run.ts");

interface Combination {
  label: string;
  command: string[];
  client: "platformatic" | "confluent";
}

const version = (cmd: string[]) => spawnSync(cmd[0]!, cmd.slice(1), { encoding: "utf8" }).stdout.trim().split("\n")[0];
const nodeVersion = version(["node", "--version"]);
const bunVersion = version([join(ROOT, "node_modules/.bin/bun"), "--version"]);
const denoVersion = (version([join(ROOT, "node_modules/.bin/deno"), "--version"]) ?? "deno").replace(/ \(.*/, "");
const addon = existsSync(join(ROOT, "node_modules/.fv-librdkafka")) ? readFileSync(join(ROOT, "node_modules/.fv-librdkafka"), "utf8").trim() : "no: not checked";

if (!existsSync(NODE_RUN)) {
  process.stderr.write(`${NODE_RUN} is missing: run \`npm run build && npx tsc -p tsconfig.node.json\` (npm run bench:clients does)\n`);
  process.exit(2);
}

const combinations: Combination[] = [
  ...(addon.startsWith("yes")
    ? [{ label: `Node ${nodeVersion} + librdkafka ${addon.slice(5)}`, command: ["node", NODE_RUN], client: "confluent" as const }]
    : []),
  { label: `Node ${nodeVersion} + pure JS`, command: ["node", NODE_RUN], client: "platformatic" },
  { label: `Bun ${bunVersion} + pure JS`, command: [join(ROOT, "node_modules/.bin/bun"), SOURCE_RUN], client: "platformatic" },
  { label: `${denoVersion.replace("deno", "Deno")} + pure JS`, command: [join(ROOT, "node_modules/.bin/deno"), "run", "-A", SOURCE_RUN], client: "platformatic" },
];
if (!addon.startsWith("yes")) process.stderr.write(`Node + librdkafka left out: the addon is not available (${addon.slice(4)})\n`);

function measure(c: Combination, input: string, mode: "pipeline" | "raw"): number {
  const run = spawnSync(c.command[0]!, [...c.command.slice(1), input, String(N), c.client, mode], {
    cwd: ROOT,
    encoding: "utf8",
    env: { ...process.env, STREAM_ADMIN_ADDR: "off", STREAM_LOG_LEVEL: "error" },
    timeout: 600_000,
  });
  const line = run.stdout.trim().split("\n").filter((l) => l.startsWith("{")).pop();
  if (run.status !== 0 || !line) throw new Error(`${c.label} ${mode} failed (exit ${run.status}):\n${run.stderr.slice(-2000)}`);
  return JSON.parse(line).rate as number;
}

const input = nextName("bench-clients-in");
await load(input, N);
process.stdout.write(`fv-streams client benchmark: ${N} records (~200 B JSON), 4 partitions, 1 consumer, brokers ${BROKERS}, median of ${ROUNDS} interleaved rounds\n`);
const results = new Map(combinations.map((c) => [c.label, { pipeline: [] as number[], raw: [] as number[] }]));
for (let r = 0; r < ROUNDS; r++) {
  for (const c of combinations) {
    results.get(c.label)!.raw.push(measure(c, input, "raw"));
    results.get(c.label)!.pipeline.push(measure(c, input, "pipeline"));
  }
}

const rows = combinations.map((c) => ({ label: c.label, pipeline: median(results.get(c.label)!.pipeline), raw: median(results.get(c.label)!.raw) }));
const best = Math.max(...rows.map((r) => r.pipeline));
const width = Math.max(...rows.map((r) => r.label.length), 11);
process.stdout.write(`\n${"combination".padEnd(width)}   filter pipeline   raw pass-through   pipeline/raw   pipeline vs best\n`);
for (const r of rows) {
  process.stdout.write(
    `${r.label.padEnd(width)}   ${fmt(r.pipeline)} rec/s   ${fmt(r.raw)} rec/s    ${(r.pipeline / r.raw).toFixed(2).padStart(12)}   ${(r.pipeline / best).toFixed(2).padStart(16)}\n`,
  );
}
process.exit(0);
