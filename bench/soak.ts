/**
 * Soak: fv-streams under faults for N minutes, judged by an independent read_committed reader.
 *
 *   npm run soak -- [--minutes 10] [--runtime bun|deno|node] [--guarantee exactly-once|at-least-once]
 *                   [--seed S] [--kafka-client platformatic|confluent] [--rate 2000]
 *   (without --kafka-client the engine's default runs: the pure-JS client, on Node too)
 *
 * What it does:
 *  1. Starts a broker of its own (scripts/kafka.sh with FV_KAFKA_HOME=<repo>/.kafka-soak,
 *     FV_KAFKA_PORT=19092), fresh each run (`reset` first), and creates an 8-partition input topic.
 *  2. Feeds it at a steady --rate rows/s from this process: `{ id, key: "k<id % 50>", v: 0..999,
 *     ts: Date.now() }`, message key = key, idempotent producer, retried (same rows) through
 *     broker restarts (bench/soak/kafka.ts).
 *  3. Runs two pipelines, three CLI processes each in one group (bench/soak/fleet.ts):
 *     stateless = filter `v % 10 != 0` + `double = v * 2`; stateful = windowedAggregate count and
 *     sum(v) per key over tumbling 10 s windows of `ts`, `repartition = false` (the message key is
 *     the group column).
 *  4. After a 45 s warm-up, every 30-60 s (seeded mulberry32) one fault, cycling through a
 *     shuffled list of the four kinds so each comes before any repeats: kill9 (SIGKILL a process,
 *     restart it in its slot 1-2 s later), stop (SIGSTOP 20 s, SIGCONT), scaleout (a 4th process
 *     for 20-30 s, then SIGTERM: a non-zero exit is a failed ordered stop), broker (kafka.sh down,
 *     up again ~20 s after). A process that exits unasked is counted and restarted after 2 s.
 *  5. At the end: stops the faults and the feed, waits up to 90 s for the groups' lag to reach 0
 *     (committed offsets vs end offsets, from the Java admin client), SIGTERMs every process, dumps
 *     the input and both outputs with the Java KafkaConsumer (read_committed; KafkaCheck dump) and
 *     judges them (bench/soak/judge.ts). Prints one table and writes it, with the fault log, to
 *     bench/results/soak-<YYYY-MM-DD-HHMM>.md; each process's stderr is kept under
 *     bench/results/soak-logs-<stamp>/.
 * Exit code 0: under exactly-once, nothing missing, duplicated or wrong, no process exited by
 * itself and no ordered stop failed; under at-least-once, nothing missing.
 *
 * Every child (CLI processes, kafka.sh, java) is SIGKILLed and the soak broker stopped when the
 * soak ends, however it ends (exit, Ctrl-C, exception).
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { type Counter, Fleet, type Proc, type Runtime } from "./soak/fleet.ts";
import { judgeStateful, judgeStateless, readInput, type Verdict, WINDOW_MS } from "./soak/judge.ts";
import { BOOTSTRAP, brokerDown, brokerUp, createTopic, dumpTopic, Feeder, groupLag, kafkaSh, openTransactions, ROOT, stopBrokerSync } from "./soak/kafka.ts";
import { clock, elapsed, killAllChildren, Rng, say, sleep } from "./soak/util.ts";

// --- options -----------------------------------------------------------------------------------

interface Options {
  minutes: number;
  runtime: Runtime;
  exactlyOnce: boolean;
  seed: number;
  kafkaClient?: "platformatic" | "confluent";
  rate: number;
}

function parseArgs(argv: string[]): Options {
  const o: Options = { minutes: 10, runtime: "bun", exactlyOnce: true, seed: (Math.random() * 2 ** 32) >>> 0, rate: 2000 };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i]!;
    const value = () => {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${flag} needs a value`);
      return v;
    };
    if (flag === "--minutes") o.minutes = Number(value());
    else if (flag === "--runtime") o.runtime = value() as Runtime;
    else if (flag === "--guarantee") {
      const g = value();
      if (g !== "exactly-once" && g !== "at-least-once") throw new Error("--guarantee is exactly-once or at-least-once");
      o.exactlyOnce = g === "exactly-once";
    } else if (flag === "--seed") o.seed = Number(value()) >>> 0;
    else if (flag === "--kafka-client") o.kafkaClient = value() as Options["kafkaClient"];
    else if (flag === "--rate") o.rate = Number(value());
    else if (flag === "-h" || flag === "--help") {
      console.log("usage: npm run soak -- [--minutes N] [--runtime bun|deno|node] [--guarantee exactly-once|at-least-once] [--seed S] [--kafka-client platformatic|confluent] [--rate ROWS_PER_S]");
      process.exit(0);
    } else throw new Error(`unknown option ${flag}`);
  }
  if (!(o.minutes > 0)) throw new Error("--minutes must be > 0");
  if (!(o.rate > 0)) throw new Error("--rate must be > 0");
  if (!["bun", "deno", "node"].includes(o.runtime)) throw new Error("--runtime is bun, deno or node");
  if (o.kafkaClient && !["platformatic", "confluent"].includes(o.kafkaClient)) throw new Error("--kafka-client is platformatic or confluent");
  if (o.kafkaClient === "confluent" && o.runtime !== "node") throw new Error("--kafka-client confluent (librdkafka) runs on Node only");
  return o;
}

// --- set-up --------------------------------------------------------------------------------------

const INPUT = "soak-in";
const PARTITIONS = 8;
const PIPELINES = ["stateless", "stateful"] as const;
type Pipeline = (typeof PIPELINES)[number];
const OUTPUT: Record<Pipeline, string> = { stateless: "soak-stateless-out", stateful: "soak-stateful-out" };
const groupOf = (pipeline: string) => `fv-stream-${pipeline}`;
const SLOTS = [1, 2, 3];

const PIPELINE_TOML: Record<Pipeline, string> = {
  stateless: `name = "stateless"

[[transforms]]
inputs = ["${INPUT}"]
output = "${OUTPUT.stateless}"
[[transforms.steps]]
op = "filter"
expression = "v % 10 != 0"
[[transforms.steps]]
op = "applyExpression"
column = "double"
expression = "v * 2"
`,
  stateful: `name = "stateful"

[[transforms]]
inputs = ["${INPUT}"]
output = "${OUTPUT.stateful}"
[[transforms.steps]]
op = "windowedAggregate"
timeColumn = "ts"
windowMs = ${WINDOW_MS}
groupBy = ["key"]
aggs = [{ op = "count", alias = "n" }, { op = "sum", column = "v", alias = "sum" }]
# The message key is the key column: no repartition hop.
repartition = false
`,
};

function stampNow(): string {
  const d = new Date();
  const p = (n: number) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}-${p(d.getHours())}${p(d.getMinutes())}`;
}

// --- faults --------------------------------------------------------------------------------------

type FaultKind = "kill9" | "stop" | "scaleout" | "broker";
const FAULT_KINDS: readonly FaultKind[] = ["kill9", "stop", "scaleout", "broker"];

interface Fault {
  n: number;
  kind: FaultKind;
  at: number;
  epoch: number;
  until?: number;
  detail: string;
}

interface FailedStop {
  name: string;
  at: number;
  why: string;
  phase: "scaleout" | "final";
}

class Faults {
  readonly log: Fault[] = [];
  readonly failedStops: FailedStop[] = [];
  #cycle: FaultKind[] = [];

  constructor(readonly rng: Rng, readonly fleet: Fleet) {}

  #note(fault: Fault, detail: string): void {
    fault.detail = fault.detail ? `${fault.detail}; ${detail}` : detail;
    say(`fault #${fault.n} ${fault.kind}: ${detail}`);
  }

  /** A live process of a random pipeline and slot (one of 1..3). */
  #victim(): Proc | undefined {
    const candidates = this.fleet.live().filter((p) => p.slot <= 3);
    if (!candidates.length) return undefined;
    const pipeline = this.rng.pick([...new Set(candidates.map((p) => p.pipeline))].sort());
    return this.rng.pick(candidates.filter((p) => p.pipeline === pipeline).sort((a, b) => a.slot - b.slot));
  }

  /** Faults from `firstAt` on (soak clock, ms) until `endAt`; the one running at `endAt` finishes. */
  async run(firstAt: number, endAt: number, shouldStop: () => boolean): Promise<void> {
    let next = firstAt;
    while (!shouldStop() && next < endAt) {
      if (elapsed() < next) {
        await sleep(Math.min(500, next - elapsed()));
        continue;
      }
      if (!this.#cycle.length) this.#cycle = this.rng.shuffle(FAULT_KINDS);
      const kind = this.#cycle.shift()!;
      const fault: Fault = { n: this.log.length + 1, kind, at: elapsed(), epoch: Date.now(), detail: "" };
      this.log.push(fault);
      await this.#inject(fault);
      fault.until = elapsed();
      // The next one 30-60 s after this one began; sooner (not under 30 s) when the kinds not
      // seen yet would otherwise not fit in the run.
      const unseen = FAULT_KINDS.filter((k) => !this.log.some((f) => f.kind === k)).length;
      let gap = this.rng.between(30_000, 60_000);
      if (unseen > 0) gap = Math.min(gap, Math.max(30_000, (endAt - 20_000 - fault.at) / unseen));
      next = Math.max(fault.at + gap, elapsed() + 5_000);
    }
  }

  async #inject(fault: Fault): Promise<void> {
    switch (fault.kind) {
      case "kill9": {
        const victim = this.#victim();
        if (!victim) return this.#note(fault, "no live process to kill");
        this.#note(fault, `SIGKILL ${victim.name}`);
        this.fleet.signal(victim, "SIGKILL");
        await victim.exited;
        const pause = this.rng.between(1000, 2000);
        await sleep(pause);
        // The slot may have been refilled meanwhile only by us; start it again.
        if (!this.fleet.current(victim.pipeline, victim.slot)) {
          const p = this.fleet.start(victim.pipeline, victim.slot);
          this.#note(fault, `restarted as ${p.name} after ${(pause / 1000).toFixed(1)} s`);
        }
        return;
      }
      case "stop": {
        const victim = this.#victim();
        if (!victim) return this.#note(fault, "no live process to stop");
        this.#note(fault, `SIGSTOP ${victim.name} for 20 s`);
        this.fleet.signal(victim, "SIGSTOP");
        await sleep(20_000);
        this.fleet.signal(victim, "SIGCONT");
        this.#note(fault, `SIGCONT ${victim.name}${victim.exit ? " (it had exited meanwhile)" : ""}`);
        return;
      }
      case "scaleout": {
        const pipeline = this.rng.pick(PIPELINES);
        const p = this.fleet.start(pipeline, 4);
        const runFor = this.rng.between(20_000, 30_000);
        this.#note(fault, `started ${p.name} for ${(runFor / 1000).toFixed(1)} s`);
        await sleep(runFor);
        const stopped = await this.fleet.stopSlot(pipeline, 4);
        const name = stopped.proc?.name ?? p.name;
        if (!stopped.ok && stopped.why !== "no process") this.failedStops.push({ name, at: elapsed(), why: stopped.why, phase: "scaleout" });
        this.#note(fault, `SIGTERM ${name}: ${stopped.ok ? "stopped in order (exit 0)" : `FAILED ordered stop: ${stopped.why}`}`);
        return;
      }
      case "broker": {
        const downAt = Date.now();
        this.#note(fault, "kafka.sh down");
        await brokerDown();
        await sleep(20_000 - (Date.now() - downAt));
        this.#note(fault, `kafka.sh up (down ${((Date.now() - downAt) / 1000).toFixed(1)} s)`);
        await brokerUp();
        this.#note(fault, `broker answering again after ${((Date.now() - downAt) / 1000).toFixed(1)} s`);
        return;
      }
    }
  }
}

// --- the run -------------------------------------------------------------------------------------

let brokerRunning = false;
let exiting = false;
function cleanupSync(): void {
  const killed = killAllChildren();
  if (killed) console.log(`[soak] killed ${killed} child process(es) still running`);
  if (brokerRunning) {
    brokerRunning = false;
    console.log("[soak] stopping the soak broker");
    stopBrokerSync();
  }
}
process.on("exit", cleanupSync);
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
  process.on(signal, () => {
    if (exiting) return;
    exiting = true;
    console.log(`\n[soak] ${signal}: stopping everything`);
    cleanupSync();
    process.exit(130);
  });
}

async function main(): Promise<number> {
  const options = parseArgs(process.argv.slice(2));
  const guarantee = options.exactlyOnce ? "exactly-once" : "at-least-once";
  const started = Date.now();
  let stamp = stampNow();
  const results = join(ROOT, "bench/results");
  for (let i = 2; existsSync(join(results, `soak-logs-${stamp}`)); i++) stamp = `${stampNow()}-${i}`;
  const logDir = join(results, `soak-logs-${stamp}`);
  mkdirSync(logDir, { recursive: true });
  say(`seed ${options.seed}, ${options.minutes} min, ${options.runtime}${options.kafkaClient ? ` + ${options.kafkaClient}` : ""}, ${guarantee}, ${options.rate} rows/s; logs in ${logDir}`);
  const rng = new Rng(options.seed);

  if (options.runtime === "node") {
    say("npm run build (Node runs dist/)");
    const build = spawnSync("npm", ["run", "--silent", "build"], { cwd: ROOT, stdio: "inherit" });
    if (build.status !== 0) throw new Error("npm run build failed");
  }

  // 1. A fresh broker of our own.
  say(`broker: reset and up on ${BOOTSTRAP}`);
  await kafkaSh(["reset"]);
  brokerRunning = true;
  await brokerUp();
  await createTopic(INPUT, PARTITIONS);

  const files: Record<string, string> = {};
  for (const p of PIPELINES) {
    files[p] = join(logDir, `${p}.toml`);
    writeFileSync(files[p], PIPELINE_TOML[p]);
  }
  const fleet = new Fleet({ runtime: options.runtime, kafkaClient: options.kafkaClient, exactlyOnce: options.exactlyOnce, brokers: BOOTSTRAP, logDir, files });

  // 2. Feed, and the processes.
  const feeder = new Feeder(INPUT, options.rate, mulberryFrom(rng));
  feeder.start();
  for (const p of PIPELINES) for (const slot of SLOTS) fleet.start(p, slot);
  say(`started ${fleet.procs.length} processes; feeding ${INPUT} at ${options.rate} rows/s`);

  const progress = setInterval(() => {
    const lag = PIPELINES.map((p) => `${p} consumed ${fleet.sum("consumed", p)} lag ${fleet.reportedLag(p)}`).join(", ");
    say(`progress: fed ${feeder.acked} rows (${feeder.sendFailures} send failures); ${lag}; ${fleet.live().length} live processes`);
  }, 30_000);

  // 3. Faults until the time is up.
  const faults = new Faults(rng, fleet);
  // The run's minutes count from the start of the feed; the first fault after a 45 s warm-up
  // (a quarter of the run if that is shorter).
  const runStart = elapsed();
  const runMs = options.minutes * 60_000;
  const endAt = runStart + runMs;
  try {
    await faults.run(runStart + Math.min(45_000, runMs / 4), endAt, () => exiting);
    await sleep(endAt - elapsed());
  } finally {
    clearInterval(progress);
  }

  // 4. The end: feed stops, lag drains, processes stop.
  say(`time is up after ${faults.log.length} faults: stopping the feed`);
  await feeder.stop();
  const feedStoppedAt = elapsed();
  say(`feed stopped: ${feeder.acked} rows acknowledged, ${feeder.nextId} ids made, ${feeder.sendFailures} send failures, ${feeder.gaveUp} rows given up`);
  const groups = PIPELINES.map(groupOf);
  let lagAt30: Map<string, number> | undefined;
  let drainedAfter: number | undefined;
  let lastLag: Map<string, number> | undefined;
  while (elapsed() - feedStoppedAt < 90_000) {
    const lag = await groupLag(INPUT, groups);
    const since = elapsed() - feedStoppedAt;
    if (lag) lastLag = lag;
    if (lag && since >= 30_000 && !lagAt30) lagAt30 = lag;
    if (lag && [...lag.values()].every((n) => n === 0)) {
      drainedAfter = since;
      lagAt30 ??= lag; // drained before 30 s: the lag at 30 s is 0 (committed offsets only move forward)
      break;
    }
    await sleep(2_000);
  }
  lagAt30 ??= lastLag;
  say(drainedAfter !== undefined ? `drained: lag 0 in both groups ${(drainedAfter / 1000).toFixed(1)} s after the feed stopped` : `NOT drained within 90 s: lag ${JSON.stringify(Object.fromEntries(lastLag ?? []))}`);
  // Not drained: what holds it, from the coordinator (open transactions, unstable committed offsets).
  const held = drainedAfter === undefined ? await openTransactions(INPUT, groups) : [];
  for (const line of held) say(`  ${line}`);
  // A moment for the last windows' transactions, then the ordered stop of every process.
  await sleep(3_000);
  // Members that own nothing now (8 partitions, 3 members: each should own some), from their
  // last build records: a member wedged outside the group shows here.
  const idle = fleet.live().filter((p) => !((p.metrics?.partitions as unknown[] | undefined)?.length)).map((p) => `${p.name} (consumed ${Number(p.metrics?.consumed) || 0})`);
  if (idle.length) say(`members owning no partition before the stop: ${idle.join(", ")}`);
  fleet.stopping();
  say("SIGTERM to every process");
  const stops = await Promise.all(fleet.live().map((p) => fleet.stopSlot(p.pipeline, p.slot)));
  for (const s of stops) {
    if (!s.ok && s.proc) faults.failedStops.push({ name: s.proc.name, at: elapsed(), why: s.why, phase: "final" });
  }
  say(`stopped: ${stops.filter((s) => s.ok).length} in order, ${stops.filter((s) => !s.ok).length} not`);

  // 5. The Java reader's view, and the verdicts.
  say("dumping the input and the outputs with the Java read_committed reader");
  const inputDump = await dumpTopic(INPUT, join(logDir, "dump-input.tsv"), false);
  const outDumps: Record<string, Awaited<ReturnType<typeof dumpTopic>>> = {};
  for (const p of PIPELINES) {
    try {
      outDumps[p] = await dumpTopic(OUTPUT[p], join(logDir, `dump-${p}.tsv`), true);
    } catch (error) {
      say(`could not dump ${OUTPUT[p]}: ${(error as Error).message}`);
      outDumps[p] = { records: [], note: `NOT DUMPED: ${(error as Error).message}` };
    }
  }
  const input = readInput(inputDump.records);
  const stateless = judgeStateless(input, outDumps.stateless!.records);
  const stateful = judgeStateful(input, outDumps.stateful!.records);

  const report = renderReport({ options, guarantee, stamp, logDir, fleet, faults, feeder, input, stateless, stateful, lagAt30, drainedAfter, held, idle, runStart, feedStoppedAt, wallMs: Date.now() - started, dumpNotes: [inputDump.note, ...PIPELINES.map((p) => outDumps[p]!.note)] });
  const reportFile = join(results, `soak-${stamp}.md`);
  writeFileSync(reportFile, report.text);
  console.log(`\n${report.text}`);
  say(`report: ${reportFile}`);
  say(`logs:   ${logDir}`);
  return report.pass ? 0 : 1;
}

/** The feeder's values come from their own stream of the seeded RNG. */
function mulberryFrom(rng: Rng): () => number {
  const child = new Rng(rng.int(0, 2 ** 31));
  return () => child.float();
}

// --- the report ----------------------------------------------------------------------------------

interface ReportInput {
  options: Options;
  guarantee: string;
  stamp: string;
  logDir: string;
  fleet: Fleet;
  faults: Faults;
  feeder: Feeder;
  input: ReturnType<typeof readInput>;
  stateless: Verdict;
  stateful: ReturnType<typeof judgeStateful>;
  lagAt30?: Map<string, number>;
  drainedAfter?: number;
  /** When not drained: the coordinator's open transactions and unstable offsets (KafkaCheck transactions). */
  held: string[];
  idle: string[];
  runStart: number;
  feedStoppedAt: number;
  wallMs: number;
  dumpNotes: string[];
}

function renderReport(r: ReportInput): { text: string; pass: boolean } {
  const { fleet, faults, feeder, stateless, stateful } = r;
  const per = (f: (p: Pipeline) => number | string) => PIPELINES.map((p) => `${p} ${f(p)}`).join(" / ");
  const sum = (c: Counter) => `${fleet.sum(c)} (${per((p) => fleet.sum(c, p))})`;
  const byKind = FAULT_KINDS.map((k) => `${k} ${faults.log.filter((f) => f.kind === k).length}`).join(", ");
  const kills = faults.log.filter((f) => f.kind === "kill9").length;
  const clients = [...new Set(fleet.procs.map((p) => p.kafkaClient).filter(Boolean))].join(", ") || r.options.kafkaClient || "(not reported)";
  const selfExits = fleet.selfExits;
  const failed = faults.failedStops;
  const verdicts = [stateless, stateful];
  const missing = verdicts.reduce((s, v) => s + v.missing, 0);
  const duplicates = verdicts.reduce((s, v) => s + v.duplicates, 0);
  const wrong = verdicts.reduce((s, v) => s + v.wrong, 0);
  const pass = r.options.exactlyOnce ? missing === 0 && duplicates === 0 && wrong === 0 && selfExits.length === 0 && failed.length === 0 : missing === 0;
  const lag30 = r.lagAt30 ? `${Math.max(...r.lagAt30.values())} (${per((p) => r.lagAt30!.get(groupOf(p)) ?? "?")})` : "n/a (the lag could not be read)";
  const rows: Array<[string, string]> = [
    ["seed", String(r.options.seed)],
    ["runtime", r.options.runtime],
    ["client", clients],
    ["guarantee", r.guarantee],
    ["minutes", String(r.options.minutes)],
    ["faults by kind", `${byKind} (${faults.log.length} in all)`],
    ["rows in (input topic, Java reader)", `${r.input.rows} (${r.input.byId.size} distinct ids; feeder: ${feeder.acked} acknowledged, ${feeder.sendFailures} send failures (${feeder.sendTimeouts} of them 30 s timeouts), ${feeder.nextId - r.input.byId.size} ids made but not in the topic, ${feeder.gaveUp} given up)`],
    ["rows out: stateless", `${stateless.out} (expected ${stateless.expected})`],
    ["rows out: stateful (window rows)", `${stateful.out} (expected windows ${stateful.expected}: windows starting at or before ${new Date(stateful.cutoffStart).toISOString().slice(11, 19)})`],
    ["missing", `stateless ${stateless.missing} rows (${stateless.missingIds} ids absent) / stateful ${stateful.missing} windows`],
    ["duplicates", `stateless ${stateless.duplicates} / stateful ${stateful.duplicates}${r.options.exactlyOnce ? "" : `; per kill: ${kills ? ((stateless.duplicates + stateful.duplicates) / kills).toFixed(1) : "n/a"} (${kills} kills)`}`],
    ["wrong", `stateless ${stateless.wrong} rows / stateful ${stateful.wrong} windows`],
    ["processes that exited by themselves", selfExits.length ? `${selfExits.length}: ${selfExits.map((e) => `${e.name} (${e.code ?? e.signal})`).join(", ")}` : "0"],
    ["failed ordered stops", failed.length ? `${failed.length}: ${failed.map((f) => `${f.name} (${f.phase})`).join(", ")}` : "0"],
    ["rebalances (`assignment changed` log lines)", `${fleet.rebalances()} (${per((p) => fleet.rebalances(p))})`],
    ["transactions committed / aborted", `${fleet.sum("transactionsCommitted")} / ${fleet.sum("transactionsAborted")}`],
    ["restored records (state restore)", sum("restoredRecords")],
    ["loop restarts / stallRestarts", `${fleet.sum("restarts")} / ${fleet.sum("stallRestarts")}`],
    ["late rows (stateful)", String(fleet.sum("late", "stateful"))],
    ["largest lag 30 s after the feed stopped", lag30],
    ["drained (lag 0) after", r.drainedAfter !== undefined ? `${(r.drainedAfter / 1000).toFixed(1)} s` : "not within 90 s"],
    ["members owning no partition before the final stop", r.idle.length ? `${r.idle.length}: ${r.idle.join(", ")}` : "0"],
    ["processes started", `${fleet.procs.length}`],
    ["wall time", `${(r.wallMs / 60_000).toFixed(1)} min`],
    ["verdict", pass ? "PASS" : "FAIL"],
  ];
  const lines = [`# Soak ${r.stamp}`, "", "| figure | value |", "| --- | --- |", ...rows.map(([k, v]) => `| ${k} | ${v.replaceAll("|", "\\|")} |`), ""];

  lines.push("## Faults", "", `Times on the soak clock (m:ss since the soak started); the feed ran from ${clock(r.runStart)} to ${clock(r.feedStoppedAt)}.`, "", "| # | at | kind | what happened |", "| --- | --- | --- | --- |");
  for (const f of faults.log) lines.push(`| ${f.n} | ${clock(f.at)}–${f.until ? clock(f.until) : "?"} | ${f.kind} | ${f.detail} |`);
  lines.push("");

  if (selfExits.length) {
    lines.push("## Processes that exited by themselves", "");
    for (const e of selfExits) lines.push(`- ${clock(e.at)} ${e.name}: code ${e.code}, signal ${e.signal}, last status ${e.status ?? "?"}; last error: ${e.lastError.slice(0, 400)}`);
    lines.push("");
  }
  if (failed.length) {
    lines.push("## Failed ordered stops", "");
    for (const f of failed) lines.push(`- ${clock(f.at)} ${f.name} (${f.phase}): ${f.why.slice(0, 400)}`);
    lines.push("");
  }
  for (const [name, v] of [["stateless", stateless], ["stateful", stateful]] as const) {
    if (v.examples.length || v.notes.length) {
      lines.push(`## ${name}: examples and notes`, "");
      for (const e of v.examples) lines.push(`- ${e}`);
      for (const n of v.notes) lines.push(`- note: ${n}`);
      lines.push("");
    }
  }
  if (stateless.duplicates + stateful.duplicates > 0) {
    lines.push("## Duplicates by fault interval", "", "Each extra copy is placed by its record timestamp (when the engine wrote it) in the interval from one fault's start to the next one's.", "", "| interval | stateless | stateful |", "| --- | --- | --- |");
    const bounds = faults.log.map((f) => f.epoch);
    const bucket = (ts: number) => {
      let i = -1;
      for (let j = 0; j < bounds.length; j++) if (ts >= bounds[j]!) i = j;
      return i;
    };
    for (let i = -1; i < faults.log.length; i++) {
      const a = stateless.extras.filter((e) => bucket(e.timestamp) === i).length;
      const b = stateful.extras.filter((e) => bucket(e.timestamp) === i).length;
      if (a || b) lines.push(`| ${i < 0 ? "before the first fault" : `after #${i + 1} ${faults.log[i]!.kind}`} | ${a} | ${b} |`);
    }
    lines.push("");
  }
  // What the engine said: warn and error lines over all processes, most frequent first.
  const said = new Map<string, number>();
  for (const p of fleet.procs) {
    for (const w of p.warnings) {
      const k = w.replace(/\d+/g, "N").slice(0, 200);
      said.set(k, (said.get(k) ?? 0) + 1);
    }
  }
  if (r.held.length) lines.push("## What held the groups (not drained)", "", ...r.held.map((l) => `- ${l}`), "");
  if (said.size) {
    lines.push("## Warn and error lines of the processes (digits as N, most frequent first)", "");
    for (const [k, n] of [...said].sort((a, b) => b[1] - a[1]).slice(0, 20)) lines.push(`- ${n}× ${k}`);
    lines.push("");
  }
  lines.push(
    "## How the figures are measured",
    "",
    "- Rows in/out, missing, duplicates and wrong come only from the Java KafkaConsumer (read_committed, assign() all partitions, up to the LSO) of scripts/kafka/KafkaCheck.java (`dump`); the feeder's own counts are shown for comparison.",
    "- Counters (transactions, restored records, restarts, stallRestarts, late) are the sum over every process of its last build record (sent every 1 s): a SIGKILLed process loses what it counted in its last second.",
    "- Rebalances count the `assignment changed` log lines of every process (one per member per new assignment, so one group rebalance counts once per member).",
    "- Lag is the Java admin client's end offsets minus the group's committed offsets on the input topic.",
    `- Java reader: ${r.dumpNotes.filter(Boolean).join("; ")}`,
    "",
    `Logs: ${r.logDir}`,
    "",
  );
  return { text: lines.join("\n"), pass };
}

let code = 1;
try {
  code = await main();
} catch (error) {
  console.error(`[soak] FAILED: ${(error as Error).stack ?? error}`);
  code = 2;
} finally {
  if (!exiting) {
    killAllChildren();
    if (brokerRunning) {
      say("stopping the soak broker (its data stays in .kafka-soak until the next run's reset)");
      await brokerDown().catch((e) => say(`kafka.sh down: ${(e as Error).message}`));
      brokerRunning = false;
    }
  }
}
process.exit(code);
