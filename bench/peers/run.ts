/**
 * `npm run bench:peers`: fv-streams side by side with Kafka Streams and the raw Kafka ceiling, on
 * the same broker, the same input and the same topologies, in one run. Method and the latest
 * table: docs/benchmarks.md.
 *
 *   bun bench/peers/run.ts            (npm run bench:peers builds the Java side and dist/ first)
 *
 * Engines: Kafka Streams and fv-streams on Bun, Deno and Node (its default, the pure-JS client),
 * each under both guarantees; Node + librdkafka only when BENCH_ENGINES names it (fv-node-alos,
 * fv-node-eos; left out, with a note, when the addon does not load); the ceiling tools and our
 * client's pass-through run once, before the rounds.
 *
 * Env: BENCH_ROWS (input rows, default 1000000), BENCH_REPEATS (3), BENCH_WORKLOADS
 * (stateless,stateful,compute; also hop: the stateful topology through a repartition topic in
 * both engines), BENCH_ENGINES (all), BENCH_RUN_TIMEOUT_S (per run),
 * BENCH_LATENCY_RATE (rows/s, 0 = skip the latency runs), BENCH_LATENCY_SECONDS,
 * BENCH_COMMIT_MS (checkpoint / commit interval of every engine, 1000), BENCH_BUDGET_MIN (30: a
 * round or the latency pass that would end past this is skipped and the table says so),
 * STREAM_BROKERS. A run with BENCH_WORKLOADS or BENCH_ENGINES set writes its table to
 * bench/results only: docs/benchmarks.md keeps the latest full run.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { appendFileSync, cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { renderChart } from "./chart.ts";

const ROOT = resolve(import.meta.dirname, "../..");
const BROKERS = process.env.STREAM_BROKERS ?? "127.0.0.1:9092";
const ROWS = Number(process.env.BENCH_ROWS ?? 1_000_000);
const REPEATS = Number(process.env.BENCH_REPEATS ?? 3);
const COMMIT_MS = process.env.BENCH_COMMIT_MS ?? "1000";
const PARTITIONS = 4;
const CLOSERS = PARTITIONS; // one closing row per partition (Rows.java)
/** Every run ends: a run that has not seen its whole output by then is reported as a timeout. */
const RUN_TIMEOUT_MS = 1000 * Number(process.env.BENCH_RUN_TIMEOUT_S ?? Math.round(40 + ROWS / 8000));
/** After the expected count, the counter reads this much longer: more output than expected is a wrong answer. */
const SETTLE_MS = 1500;
const LATENCY_RATE = Number(process.env.BENCH_LATENCY_RATE ?? 5000);
const LATENCY_SECONDS = Number(process.env.BENCH_LATENCY_SECONDS ?? 10);
/** Rows paced in the first 2 s are not counted: what the engine has warmed up on. */
const LATENCY_WARMUP_MS = 2000;
/** The engine's start and group join, before the first paced row. */
const LATENCY_JOIN_MS = 5000;
/** The whole command ends within this: the issue's bound, on a shared machine whose speed varies by hour. */
const BUDGET_MS = 60_000 * Number(process.env.BENCH_BUDGET_MIN ?? 30);
const WORKLOADS = (process.env.BENCH_WORKLOADS ?? "stateless,stateful,compute").split(",") as Workload[];
const STAMP = new Date().toISOString().replace(/[-:]/g, "").replace(/\..*/, "").toLowerCase();
const PREFIX = `bp-${STAMP}`;
const WORK = mkdtempSync(join(tmpdir(), "fv-bench-peers-"));

type Workload = "stateless" | "stateful" | "hop" | "compute";
type Guarantee = "alos" | "eos";

// --- the Java side -------------------------------------------------------------------------

const KS_DIR = join(ROOT, "bench/peers/kafka-streams");
const CLASSPATH = `${KS_DIR}/target/fv-bench-peers-0.jar:${KS_DIR}/target/lib/*`;
/** Heap of the Kafka Streams peer (the broker's own is set by scripts/kafka.sh). */
const KS_HEAP = ["-Xms256m", "-Xmx1g"];
const java = (heap: string[], cls: string, args: string[]) => ["java", ...heap, `-Dlog4j2.configurationFile=${KS_DIR}/log4j2.properties`, "-cp", CLASSPATH, cls, ...args];
const tool = (args: string[]) => java(["-Xmx512m"], "dev.fvstreams.bench.Main", args);

// --- engines: one entry each; a new runtime (e.g. Node with librdkafka) is one more entry ---------

interface Engine {
  id: string;
  /** Row label in the table. */
  label: string;
  guarantee?: Guarantee;
  workloads: Workload[] | "passthrough";
  command(spec: RunSpec): { argv: string[]; env?: Record<string, string> };
  /** Why this engine cannot run on this machine; it is then left out, and the table says so. */
  unavailable?: string;
  /** Runs only when BENCH_ENGINES names it (the full run's 30-minute budget has no room for it). */
  optIn?: boolean;
}

interface RunSpec {
  workload: Workload | "passthrough";
  input: string;
  output: string;
  name: string;
}

const bin = (name: string) => join(ROOT, "node_modules/.bin", name);

/** What scripts/setup.sh found: "yes: <librdkafka version>" when Node loads the addon, else "no: <why>". */
const ADDON = existsSync(join(ROOT, "node_modules/.fv-librdkafka")) ? readFileSync(join(ROOT, "node_modules/.fv-librdkafka"), "utf8").trim() : "no: scripts/setup.sh has not checked it";
const NODE_MAIN = "dist/runtime/cli/main.js";

/** fv-streams on one runtime. `argv` starts the CLI; the pipeline file is appended. */
const fvRuntimes: Array<{ id: string; label: string; argv: string[]; env?: Record<string, string>; unavailable?: string; optIn?: boolean; workloads?: Workload[]; transformsDir?: () => string }> = [
  { id: "bun", label: "Bun", argv: [bin("bun"), "runtime/cli/main.ts", "run"] },
  { id: "deno", label: "Deno", argv: [bin("deno"), "run", "-A", "runtime/cli/main.ts", "run"] },
  // Node runs the tsc build (npm run bench:peers builds it). With librdkafka: opt in with
  // BENCH_ENGINES=fv-node-alos,fv-node-eos (the 30-minute budget has room for one Node engine)
  {
    id: "node",
    label: "Node + librdkafka",
    argv: ["node", NODE_MAIN, "run"],
    env: { STREAM_KAFKA_CLIENT: "confluent" },
    unavailable: !ADDON.startsWith("yes:") ? `the librdkafka addon is not available (${ADDON.replace(/^no: /, "")})`
      : !existsSync(join(ROOT, NODE_MAIN)) ? `${NODE_MAIN} is missing (npm run build)` : undefined,
    optIn: true,
  },
  // Node with its default, the pure-JS client, as on Bun and Deno
  {
    id: "node-pjs",
    label: "Node + pure-JS",
    argv: ["node", NODE_MAIN, "run"],
    env: { STREAM_KAFKA_CLIENT: "platformatic" },
    unavailable: !existsSync(join(ROOT, NODE_MAIN)) ? `${NODE_MAIN} is missing (npm run build)` : undefined,
  },
  // Bun with the plugin in a Worker (isolation = "worker") instead of its default plugin process:
  // what the process sandbox costs the compute workload (opt in: BENCH_ENGINES=fv-bun-worker-alos,fv-bun-worker-eos)
  { id: "bun-worker", label: "Bun, plugin in a Worker", argv: [bin("bun"), "runtime/cli/main.ts", "run"], optIn: true, workloads: ["compute"], transformsDir: workerTransforms },
];

/** A copy of functions/ whose enrich-order manifest asks for isolation = "worker" (made once). */
function workerTransforms(): string {
  const dir = join(WORK, "functions-worker");
  if (!existsSync(dir)) {
    cpSync(join(ROOT, "functions"), dir, { recursive: true });
    // A top-level key: before the manifest's tables.
    const manifest = join(dir, "enrich-order/transform.toml");
    writeFileSync(manifest, `isolation = "worker"\n${readFileSync(manifest, "utf8")}`);
  }
  return dir;
}

const ENGINES: Engine[] = [
  {
    id: "passthrough",
    label: "fv client pass-through (Bun)",
    workloads: "passthrough",
    command: (s) => ({ argv: [bin("bun"), "bench/peers/passthrough.ts", s.input, s.output, s.name] }),
  },
  ...(["alos", "eos"] as const).map((g): Engine => ({
    id: `kstreams-${g}`,
    label: "Kafka Streams",
    guarantee: g,
    workloads: ["stateless", "stateful", "hop", "compute"],
    command: (s) => ({ argv: java(KS_HEAP, "dev.fvstreams.bench.Main", ["streams", s.workload, g, s.input, s.output, `${s.name}-app`]), env: { BENCH_COMMIT_MS: COMMIT_MS } }),
  })),
  ...fvRuntimes.flatMap(({ id, label, argv, env, unavailable, optIn, workloads, transformsDir }) =>
    (["alos", "eos"] as const).map((g): Engine => ({
      id: `fv-${id}-${g}`,
      label: `fv-streams ${label}`,
      guarantee: g,
      workloads: workloads ?? ["stateless", "stateful", "hop", "compute"],
      unavailable,
      optIn,
      command: (s) => ({
        argv: [...argv, pipelineFile(s)],
        env: {
          ...env,
          STREAM_EXACTLY_ONCE: g === "eos" ? "true" : "false",
          STREAM_CHECKPOINT_INTERVAL_MS: COMMIT_MS,
          STREAM_CONSUMERS: "1",
          STREAM_ADMIN_ADDR: "off",
          STREAM_LOG_FORMAT: "json",
          STREAM_LOG_LEVEL: "warn",
          FV_TRANSFORMS_DIR: transformsDir?.() ?? join(ROOT, "functions"),
        },
      }),
    }))
  ),
];
const selected = process.env.BENCH_ENGINES ? process.env.BENCH_ENGINES.split(",") : undefined;
/** Named in BENCH_ENGINES, or, without it, every engine that is not opt-in. */
const wanted = (e: Engine) => (selected ? selected.includes(e.id) : !e.optIn);
const engines = ENGINES.filter((e) => wanted(e) && !e.unavailable);
/** Notes under the table: engines left out, rounds or passes skipped. */
const skipped: string[] = [];
// one line per runtime: its at-least-once and exactly-once engines share the label and the reason
for (const [label, why] of new Map(ENGINES.filter((e) => e.unavailable && wanted(e)).map((e) => [e.label, e.unavailable!]))) {
  skipped.push(`${label} left out: ${why}`);
  console.log(`${label}: SKIPPED, ${why}`);
}

/** The fv-streams pipeline of a workload: the same topology as StreamsPeer.java. */
const STEPS: Record<Workload, string> = {
  stateless: `[[transforms.steps]]\nop = "filter"\nexpression = "price >= 50"\n\n[[transforms.steps]]\nop = "applyExpression"\ncolumn = "notional"\nexpression = "price * qty"\n`,
  stateful: `[[transforms.steps]]\nop = "windowedAggregate"\ntimeColumn = "ts"\nwindowMs = 60000\ngroupBy = ["cust"]\naggs = [{ op = "count" }, { op = "sum", column = "qty" }]\nrepartition = false\n`,
  // The same windowed count through a repartition hop (Kafka Streams: groupBy, which always repartitions).
  hop: `[[transforms.steps]]\nop = "windowedAggregate"\ntimeColumn = "ts"\nwindowMs = 60000\ngroupBy = ["cust"]\naggs = [{ op = "count" }, { op = "sum", column = "qty" }]\nrepartition = true\n`,
  compute: `[[transforms.steps]]\nop = "wasm"\nref = "enrich-order"\n`,
};

function pipelineFile(s: RunSpec): string {
  const file = join(WORK, `${s.name}.toml`);
  const toml = `name = "${s.name}"\n[brokers]\ndefault = "${BROKERS}"\n[datasets.in]\ntopic = "${s.input}"\n[datasets.out]\ntopic = "${s.output}"\n\n[[transforms]]\ninputs = ["in"]\noutput = "out"\n\n${STEPS[s.workload as Workload]}`;
  writeFileSync(file, toml);
  return file;
}

// --- processes -------------------------------------------------------------------------------

function start(argv: string[], env: Record<string, string> = {}, log?: string): ChildProcess {
  const child = spawn(argv[0]!, argv.slice(1), { cwd: ROOT, env: { ...process.env, STREAM_BROKERS: BROKERS, ...env }, stdio: ["ignore", "pipe", "pipe"], detached: true });
  if (log) {
    child.stdout!.on("data", (d) => appendFileSync(log, d));
    child.stderr!.on("data", (d) => appendFileSync(log, d));
  }
  return child;
}

/** Runs a command to its end; resolves its stdout. */
function run(argv: string[], timeoutMs = 300_000): Promise<string> {
  return new Promise((done, fail) => {
    const child = start(argv);
    let out = "", err = "";
    child.stdout!.on("data", (d) => (out += d));
    child.stderr!.on("data", (d) => (err += d));
    const timer = setTimeout(() => stop(child, 0), timeoutMs);
    child.on("exit", (code) => {
      clearTimeout(timer);
      code === 0 ? done(out) : fail(new Error(`${argv.slice(0, 8).join(" ")} … exited ${code}: ${err.slice(-2000)}`));
    });
  });
}

/** SIGTERM to the process group we started, SIGKILL after `graceMs`. */
async function stop(child: ChildProcess, graceMs = 15_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  try { process.kill(-child.pid!, graceMs ? "SIGTERM" : "SIGKILL"); } catch { return; }
  const timer = setTimeout(() => { try { process.kill(-child.pid!, "SIGKILL"); } catch { /* gone */ } }, graceMs);
  await exited;
  clearTimeout(timer);
}

/** Peak RSS (VmHWM) of a process and its descendants, in MiB (each one's peak, summed). */
function peakRssMiB(pid: number): number {
  let kib = 0;
  const walk = (p: number) => {
    try {
      const m = /VmHWM:\s+(\d+)/.exec(readFileSync(`/proc/${p}/status`, "utf8"));
      if (m) kib += Number(m[1]);
      for (const t of readdirSync(`/proc/${p}/task`)) {
        for (const c of readFileSync(`/proc/${p}/task/${t}/children`, "utf8").split(" ").filter(Boolean)) walk(Number(c));
      }
    } catch { /* exited */ }
  };
  walk(pid);
  return kib / 1024;
}

interface Counted { count: number; expected: number; firstAt: number; doneAt: number; timedOut: boolean; p50?: number; p99?: number; latencyN?: number }

interface Counter {
  child: ChildProcess;
  /** The expected count is in (or the counter ended): from here on nothing is timed but the settle. */
  done: Promise<void>;
  /** After the settle. */
  result: Promise<Counted>;
}

/** Starts the read_committed counter on `topic`; resolves once it is positioned. */
async function counter(topic: string, expected: number, timeoutMs: number, latencyFrom = 0): Promise<Counter> {
  const child = start(tool(["count", topic, String(expected), String(timeoutMs), String(SETTLE_MS), String(latencyFrom)]));
  let buf = "";
  let ready!: () => void, done!: () => void;
  const isReady = new Promise<void>((r) => (ready = r));
  const isDone = new Promise<void>((r) => (done = r));
  const result = new Promise<Counted>((resolve) => {
    child.stdout!.on("data", (d) => {
      buf += d;
      if (buf.includes("READY")) ready();
      if (buf.includes("DONE")) done();
      const line = buf.split("\n").find((l) => l.startsWith("{"));
      if (line) resolve(JSON.parse(line));
    });
    child.on("exit", () => {
      ready();
      done();
      if (!buf.includes("{")) resolve({ count: 0, expected, firstAt: 0, doneAt: 0, timedOut: true });
    });
  });
  await isReady;
  return { child, done: isDone, result };
}

// --- one timed run -------------------------------------------------------------------------

interface Result { status: "ok" | "wrong" | "timeout" | "crashed" | "skipped"; rowsPerSec: number; seconds: number; rssMiB: number; firstOutS: number; count: number; expected: number }

/**
 * One run, timed from the engine's spawn to its expected output count. `count` is its counter,
 * already positioned on the empty output topic. `startNext` starts the next run's counter (a JVM)
 * once the expected count is in, so that it starts during this run's settle and stop, which are
 * not timed, instead of before the next engine.
 */
async function timed(engine: Engine, spec: RunSpec, inputRows: number, expected: number, count: Counter, startNext: () => Promise<Counter> | undefined): Promise<{ result: Result; next?: Counter }> {
  const log = join(WORK, `${spec.name}.log`);
  const { argv, env } = engine.command(spec);
  const startedAt = Date.now();
  const child = start(argv, env, log);
  let rss = 0;
  const poll = setInterval(() => (rss = Math.max(rss, peakRssMiB(child.pid!))), 1000);
  let crashed = false;
  child.once("exit", () => {
    crashed = true;
    // the engine is gone: give its last output a moment, then stop waiting
    setTimeout(() => stop(count.child, 0), SETTLE_MS + 3000);
  });
  const next = count.done.then(startNext);
  const c = await count.result;
  const exitedEarly = crashed; // before we stop it ourselves
  clearInterval(poll);
  rss = Math.max(rss, peakRssMiB(child.pid!));
  await stop(child);
  await stop(count.child, 0);
  const status = c.timedOut ? (exitedEarly ? "crashed" : "timeout") : c.count !== expected ? "wrong" : "ok";
  const seconds = (c.doneAt - startedAt) / 1000;
  const r: Result = { status, rowsPerSec: status === "ok" ? inputRows / seconds : 0, seconds: status === "ok" ? seconds : 0, rssMiB: rss, firstOutS: c.firstAt ? (c.firstAt - startedAt) / 1000 : 0, count: c.count, expected };
  console.log(`  ${spec.workload.padEnd(11)} ${engine.id.padEnd(16)} ${r.status.padEnd(7)} ${fmt(r.rowsPerSec)} rows/s  ${r.count}/${expected} out  first out ${r.firstOutS.toFixed(1)} s  peak RSS ${r.rssMiB.toFixed(0)} MiB${status !== "ok" ? `  (log: ${log})` : ""}`);
  return { result: r, next: await next };
}

// --- ceiling: Kafka's own perf tools -------------------------------------------------------

async function producerPerformance(topic: string, n: number): Promise<number> {
  const out = await run(java(["-Xmx512m"], "org.apache.kafka.tools.ProducerPerformance", ["--topic", topic, "--num-records", String(n), "--record-size", "200", "--throughput", "-1", "--command-property", `bootstrap.servers=${BROKERS}`]));
  const m = /records sent, ([\d.]+) records\/sec/.exec(out.trim().split("\n").at(-1) ?? "");
  if (!m) throw new Error(`ProducerPerformance: no result in ${out.slice(-500)}`);
  return Number(m[1]);
}

async function consumerPerformance(topic: string, n: number): Promise<number> {
  const out = await run(java(["-Xmx512m"], "org.apache.kafka.tools.ConsumerPerformance", ["--bootstrap-server", BROKERS, "--topic", topic, "--num-records", String(n)]));
  const lines = out.trim().split("\n");
  const header = lines.findIndex((l) => l.startsWith("start.time"));
  const cols = lines[header]!.split(",").map((s) => s.trim());
  const vals = lines[header + 1]!.split(",").map((s) => s.trim());
  return Number(vals[cols.indexOf("nMsg.sec")]);
}

// --- latency at a fixed input rate (stateless) -------------------------------------------------

/** Rows of the paced producer that pass the stateless filter (Rows.java: price(i) >= 50). */
const passing = (n: number) => { let k = 0; for (let i = 0; i < n; i++) if (((i * 7919) % 20000) / 100 >= 50) k++; return k; };

/** The latency run's topics (created for all engines at once). */
const latencySpec = (engine: Engine): RunSpec => {
  const name = `${PREFIX}-lat-${engine.id}`;
  return { workload: "stateless", input: `${name}-in`, output: `${name}-out`, name };
};

async function latency(engine: Engine): Promise<{ p50: number; p99: number; n: number; status: string }> {
  const spec = latencySpec(engine);
  const total = LATENCY_RATE * LATENCY_SECONDS;
  const { argv, env } = engine.command(spec);
  const paceAt = Date.now() + LATENCY_JOIN_MS; // the engine joins its group before the first paced row
  const child = start(argv, env, join(WORK, `${spec.name}.log`));
  // The counter's and the pacer's JVMs start while the engine joins, rather than after: neither
  // is timed, and rows sent in the first LATENCY_WARMUP_MS of pacing are not counted anyway.
  const [count] = await Promise.all([
    counter(spec.output, engine.workloads === "passthrough" ? total : passing(total), LATENCY_JOIN_MS + (LATENCY_SECONDS + 60) * 1000, paceAt + LATENCY_WARMUP_MS),
    run(tool(["pace", spec.input, String(LATENCY_RATE), String(LATENCY_SECONDS), String(paceAt)]), LATENCY_JOIN_MS + (LATENCY_SECONDS + 60) * 1000),
  ]);
  const c = await count.result;
  await stop(child);
  await stop(count.child, 0);
  // no rows measured: every output row was sent before the engine's first output + 1 s (a slow start)
  const status = c.timedOut ? "timeout" : c.count !== c.expected ? "wrong" : c.latencyN ? "ok" : "no rows measured";
  console.log(`  latency     ${engine.id.padEnd(16)} ${status.padEnd(7)} p50 ${c.p50 ?? "–"} ms  p99 ${c.p99 ?? "–"} ms  over ${c.latencyN ?? 0} rows`);
  return { p50: c.p50 ?? NaN, p99: c.p99 ?? NaN, n: c.latencyN ?? 0, status };
}

// --- the run -----------------------------------------------------------------------------------

/** What the latency pass takes: per engine, the join, the paced seconds, then about 5 s for the last output, the settle and the stop. */
function latencyPassMs(): number { return withLatency ? engines.length * (LATENCY_JOIN_MS + (LATENCY_SECONDS + 5) * 1000) : 0; }
const fmt = (n: number) => Math.round(n).toLocaleString("en").padStart(9);
const median = (xs: number[]) => { const s = [...xs].sort((a, b) => a - b); return s.length ? s[Math.floor(s.length / 2)]! : NaN; };
const began = Date.now();

const input = `${PREFIX}-in`;
const t0 = Math.floor(Date.now() / 60_000) * 60_000;
console.log(`bench:peers — ${ROWS.toLocaleString("en")} rows × ${REPEATS} repeats, workloads ${WORKLOADS.join(", ")}, brokers ${BROKERS}, work dir ${WORK}`);

/** A round's runs, in the order they run: workload-major, engines interleaved, so drift on the shared machine spreads over all. */
function roundRuns(r: number): Array<{ engine: Engine; spec: RunSpec }> {
  return WORKLOADS.flatMap((w) =>
    engines.filter((e) => e.workloads !== "passthrough" && e.workloads.includes(w)).map((engine) => {
      const name = `${PREFIX}-${w}-${engine.id}-${r}`;
      return { engine, spec: { workload: w, input, output: `${name}-out`, name } };
    })
  );
}
const passthrough = engines.find((e) => e.workloads === "passthrough");
const passthroughSpec: RunSpec = { workload: "passthrough", input, output: `${PREFIX}-passthrough-out`, name: `${PREFIX}-passthrough` };
const withLatency = LATENCY_RATE > 0 && WORKLOADS.includes("stateless");
// Every topic of the run in one go (one JVM start instead of one per round and per latency run);
// a round's topics are still deleted when it ends.
const topics = [input, `${PREFIX}-pp`, ...(passthrough ? [passthroughSpec.output] : []), ...Array.from({ length: REPEATS }, (_, i) => roundRuns(i + 1).map((x) => x.spec.output)).flat(),
  ...(withLatency ? engines.flatMap((e) => [latencySpec(e).input, latencySpec(e).output]) : [])];
await run(tool(["create", ...topics.map((t) => `${t}:${PARTITIONS}`)]));
const loaded = JSON.parse(await run(tool(["load", input, String(ROWS), String(t0)]), 600_000));
const expected = loaded.expected as Record<Workload, number>;
const inputRows = ROWS + CLOSERS;
console.log(`loaded ${input} in ${((Date.now() - began) / 1000).toFixed(0)} s; expected outputs ${JSON.stringify(expected)}`);

const results: Record<string, Result[]> = {};
const key = (w: string, e: string) => `${w}/${e}`;
const counterOf = (spec: RunSpec) => counter(spec.output, spec.workload === "passthrough" ? inputRows : expected[spec.workload], RUN_TIMEOUT_MS);
/** The next run's counter, started during the settle of the run before it (and across rounds). */
let count: Counter | undefined;

// The latency pass goes first: the budget check before each round then counts what the pass
// took, where it used to reserve an estimate for it at the end (the pass already came before a
// last round that would not fit both).
const lat: Record<string, { p50: number; p99: number; n: number; status: string }> = {};
if (withLatency && Date.now() - began + latencyPassMs() + 30_000 > BUDGET_MS) {
  skipped.push(`latency pass skipped: it would end past the ${BUDGET_MS / 60000}-minute budget`);
} else if (withLatency) {
  const passStart = Date.now();
  console.log(`latency at ${LATENCY_RATE} rows/s for ${LATENCY_SECONDS} s, stateless (${((passStart - began) / 60000).toFixed(1)} min)`);
  for (const engine of engines) lat[engine.id] = await latency(engine);
  console.log(`  latency pass took ${((Date.now() - passStart) / 1000).toFixed(0)} s`);
}

// The references, once, before the rounds: Kafka's tools measure the broker, the pass-through our
// client; neither depends on an engine or a workload, and once instead of every round saves about
// 50 s of the budget at 1M rows (docs/benchmarks.md). Their topics go at the end.
const referencesStart = Date.now();
const ceiling = { producer: await producerPerformance(`${PREFIX}-pp`, ROWS), consumer: await consumerPerformance(input, inputRows) };
console.log(`  ceiling     ProducerPerformance ${fmt(ceiling.producer)} rows/s, ConsumerPerformance ${fmt(ceiling.consumer)} rows/s`);
if (passthrough) {
  const done = await timed(passthrough, passthroughSpec, inputRows, inputRows, await counterOf(passthroughSpec), () => roundRuns(1)[0] && counterOf(roundRuns(1)[0]!.spec));
  results[key("passthrough", passthrough.id)] = [done.result];
  count = done.next;
}
console.log(`  references took ${((Date.now() - referencesStart) / 1000).toFixed(0)} s`);

let rounds = 0;
let longestRound = 0;
for (let r = 1; r <= REPEATS; r++) {
  const elapsed = Date.now() - began;
  if (r > 1 && elapsed + longestRound + 30_000 > BUDGET_MS) {
    if (count) void stop(count.child, 0);
    skipped.push(`${r < REPEATS ? `rounds ${r}–${REPEATS}` : `round ${r}`} skipped: a round took ${(longestRound / 60000).toFixed(1)} min and would end past the ${BUDGET_MS / 60000}-minute budget`);
    console.log(`  ${skipped.at(-1)}`);
    break;
  }
  const roundStart = Date.now();
  rounds = r;
  console.log(`round ${r} of ${REPEATS} (${((Date.now() - began) / 60000).toFixed(1)} min)`);
  const runs = roundRuns(r);
  let timedSeconds = 0;
  for (const [i, { engine, spec }] of runs.entries()) {
    const exp = expected[spec.workload as Workload];
    if (Date.now() - began > BUDGET_MS - 90_000) {
      // past the budget even within round 1: the run is reported as skipped, not silently dropped
      if (count) void stop(count.child, 0);
      count = undefined;
      (results[key(spec.workload, engine.id)] ??= []).push({ status: "skipped", rowsPerSec: 0, seconds: 0, rssMiB: NaN, firstOutS: 0, count: 0, expected: exp });
      continue;
    }
    const after = runs[i + 1] ?? (r < REPEATS ? roundRuns(r + 1)[0] : undefined);
    const done = await timed(engine, spec, inputRows, exp, count ?? (await counterOf(spec)), () => after && counterOf(after.spec));
    (results[key(spec.workload, engine.id)] ??= []).push(done.result);
    timedSeconds += done.result.seconds;
    count = done.next;
  }
  // this round's outputs, state and internal topics go: the broker's disk is shared
  await run(tool(["delete-prefix", ...runs.flatMap((x) => [x.spec.output, `fv-state-${x.spec.name}`, `${x.spec.name}-app`])])).catch((e) => console.warn(`cleanup: ${e.message}`));
  const took = Date.now() - roundStart;
  // what the runs themselves took, and the rest (the first counter's start, settles, stops, cleanup): the rest is overhead
  console.log(`  round ${r} took ${(took / 1000).toFixed(1)} s: ${timedSeconds.toFixed(1)} s from each engine's spawn to its expected output, ${(took / 1000 - timedSeconds).toFixed(1)} s around them`);
  longestRound = Math.max(longestRound, took);
}

await run(tool(["delete-prefix", PREFIX, `fv-state-${PREFIX}`])).catch((e) => console.warn(`cleanup: ${e.message}`));
// Kafka Streams keeps each application's state under <tmp>/fv-bench-kstreams/<application.id>
const ksState = join(tmpdir(), "fv-bench-kstreams");
if (existsSync(ksState)) for (const d of readdirSync(ksState)) if (d.startsWith(PREFIX)) rmSync(join(ksState, d), { recursive: true, force: true });

// --- the table -------------------------------------------------------------------------------

const ceilingRate = Math.min(ceiling.producer, ceiling.consumer);
const cell = (rs: Result[] | undefined) => {
  const ok = (rs ?? []).filter((x) => x.status === "ok");
  return { rate: median(ok.map((x) => x.rowsPerSec)), rss: median((rs ?? []).map((x) => x.rssMiB).filter(Number.isFinite)), first: median(ok.map((x) => x.firstOutS)), ok: ok.length, n: rs?.length ?? 0, bad: (rs ?? []).filter((x) => x.status !== "ok").map((x) => x.status === "wrong" ? `wrong count ${x.count}/${x.expected}` : x.status === "skipped" ? x.status : `${x.status} at ${x.count}/${x.expected}`) };
};
const ratio = (a: number, b: number) => (Number.isFinite(a) && Number.isFinite(b) && b > 0 ? (a / b).toFixed(2) : "–");
const gLabel = (g?: Guarantee) => (g === "eos" ? "exactly-once" : g === "alos" ? "at-least-once" : "–");

const lines: string[] = [];
const date = new Date().toISOString().slice(0, 10);
lines.push(`## ${new Date().toISOString().slice(0, 16).replace("T", " ")} UTC`, "");
lines.push(`${ROWS.toLocaleString("en")} input rows (~200 B JSON, ${PARTITIONS} partitions) + ${CLOSERS} closing rows; median of ${rounds} run${rounds > 1 ? "s" : ""}${rounds < REPEATS ? ` (${REPEATS} asked)` : ""}; one consumer / stream thread per engine; commit interval ${COMMIT_MS} ms for every engine; Kafka Streams heap ${KS_HEAP.join(" ")}; ${navigatorCores()} cores shared with the broker (load average at the end: ${loadAvg()}).`, "");
lines.push(`Raw ceiling (Kafka's tools; one run each, before the rounds, like the pass-through): ProducerPerformance ${fmt(ceiling.producer).trim()} rows/s, ConsumerPerformance ${fmt(ceiling.consumer).trim()} rows/s; ceiling = the slower of the two, ${fmt(ceilingRate).trim()} rows/s.`, "");
lines.push("| workload | engine | guarantee | rows/s | vs Kafka Streams | vs ceiling | peak RSS MiB | first output s | runs ok |");
lines.push("|---|---|---|--:|--:|--:|--:|--:|---|");
const chart: Array<{ workload: string; engine: string; vsKs: number; vsCeiling: number }> = [];
const pt = cell(results[key("passthrough", "passthrough")]);
if (results[key("passthrough", "passthrough")]) lines.push(`| pass-through | fv client pass-through (Bun) | – | ${fmt(pt.rate).trim()} | – | ${ratio(pt.rate, ceilingRate)} | ${pt.rss.toFixed(0)} | ${pt.first.toFixed(1)} | ${pt.ok}/${pt.n}${pt.bad.length ? ` (${pt.bad.join(", ")})` : ""} |`);
for (const w of WORKLOADS) {
  for (const e of engines.filter((x) => x.workloads !== "passthrough")) {
    const c = cell(results[key(w, e.id)]);
    const ks = cell(results[key(w, `kstreams-${e.guarantee}`)]);
    lines.push(`| ${w} | ${e.label} | ${gLabel(e.guarantee)} | ${Number.isFinite(c.rate) ? fmt(c.rate).trim() : "–"} | ${ratio(c.rate, ks.rate)} | ${ratio(c.rate, ceilingRate)} | ${c.rss.toFixed(0)} | ${Number.isFinite(c.first) ? c.first.toFixed(1) : "–"} | ${c.ok}/${c.n}${c.bad.length ? ` (${c.bad.join(", ")})` : ""} |`);
    if (!e.id.startsWith("kstreams")) chart.push({ workload: w, engine: `${e.label} ${e.guarantee === "eos" ? "EOS" : "ALOS"}`, vsKs: c.rate / ks.rate, vsCeiling: c.rate / ceilingRate });
  }
}
if (Object.keys(lat).length) {
  lines.push("", `End-to-end latency, stateless, paced at ${LATENCY_RATE.toLocaleString("en")} rows/s for ${LATENCY_SECONDS} s (rows sent before 1 s after the engine's first output not counted), one run each:`, "");
  lines.push("| engine | guarantee | p50 ms | p99 ms | rows measured | status |", "|---|---|--:|--:|--:|---|");
  for (const e of engines) { const l = lat[e.id]!; lines.push(`| ${e.label} | ${gLabel(e.guarantee)} | ${Number.isFinite(l.p50) ? l.p50 : "–"} | ${Number.isFinite(l.p99) ? l.p99 : "–"} | ${l.n} | ${l.status} |`); }
}
for (const note of skipped) lines.push("", `Note: ${note}.`);
const slowest = chart.filter((c) => Number.isFinite(c.vsKs)).sort((a, b) => a.vsKs - b.vsKs)[0];
if (slowest) lines.push("", `Slowest ratio to Kafka Streams: ${slowest.workload}, ${slowest.engine}: ${slowest.vsKs.toFixed(2)}.`);
const wall = (Date.now() - began) / 60000;
lines.push("", `Wall time of the run: ${wall.toFixed(1)} min.`, "");

const table = lines.join("\n");
console.log("\n" + table);
mkdirSync(join(ROOT, "bench/results"), { recursive: true });
const resultsFile = join(ROOT, `bench/results/${date}.md`);
if (!existsSync(resultsFile)) writeFileSync(resultsFile, `# bench:peers results, ${date}\n\nWritten by \`npm run bench:peers\` (method: docs/benchmarks.md). Ratios within one run are the result; absolute rows/s on a shared machine are noise.\n\n`);
const png = `bench/results/${date}-${STAMP.slice(9)}-ratios.png`;
writeFileSync(join(ROOT, png), renderChart(chart, `fv-streams vs Kafka Streams and the raw ceiling — ${ROWS.toLocaleString("en")} rows, median of ${rounds}, ${date}`));
appendFileSync(resultsFile, table + `\n![ratios](${png.replace("bench/results/", "")})\n\n`);
// docs/benchmarks.md shows the latest table of each commit interval between its markers (the
// default 1000 ms: "latest"; another: "latest commit <ms> ms", when the page has those markers)
const docs = join(ROOT, "docs/benchmarks.md");
const partial = process.env.BENCH_WORKLOADS !== undefined || process.env.BENCH_ENGINES !== undefined;
if (existsSync(docs) && !partial) {
  const text = readFileSync(docs, "utf8");
  const which = COMMIT_MS === "1000" ? "latest" : `latest commit ${COMMIT_MS} ms`;
  const begin = `<!-- bench:peers ${which} begin -->`, end = `<!-- bench:peers ${which} end -->`;
  if (text.includes(begin) && text.includes(end)) writeFileSync(docs, text.slice(0, text.indexOf(begin) + begin.length) + "\n\n" + table + `\n![ratios](../${png})\n\n` + text.slice(text.indexOf(end)));
}
console.log(`wrote ${resultsFile}, ${png}${partial ? " (a partial run: docs/benchmarks.md left as it was)" : ` and, where docs/benchmarks.md has its markers, the latest table of a ${COMMIT_MS} ms commit interval there`}`);
process.exit(0);

function navigatorCores(): number { return (globalThis.navigator as { hardwareConcurrency?: number } | undefined)?.hardwareConcurrency ?? 0; }
function loadAvg(): string { try { return readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" "); } catch { return "?"; } }
