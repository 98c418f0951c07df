/**
 * Where fv-streams' time goes in one bench:peers workload: runs the engine once under the
 * runtime's CPU profiler over a freshly loaded input, stops it once a read_committed consumer
 * has seen every output, and prints the top self-time functions (and the CPU seconds of the
 * engine process against its plugin process, which the main profile does not see).
 *
 *   bun bench/peers/profile.ts WORKLOAD RUNTIME GUARANTEE [ROWS]
 *   bun bench/peers/profile.ts compute deno eos 200000
 *   bun bench/peers/profile.ts compute node alos 200000   (Node from dist/: npm run build first; its default
 *                                                          client, pure JS; STREAM_KAFKA_CLIENT=confluent for librdkafka)
 *
 * Bun and Node: `--cpu-prof` (written at exit). Deno has no --cpu-prof: the engine starts with
 * `--inspect` and this script drives V8's profiler over the DevTools protocol. Both give a
 * .cpuprofile (Chrome's format; open it in DevTools or speedscope), kept in the work directory.
 * Needs the Java side built (bash bench/peers/build.sh).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { delay } from "../../src/async.ts";
import { summarize } from "../profile-summary.ts";

const [workload = "compute", runtime = "bun", guarantee = "eos", rowsArg = "200000"] = process.argv.slice(2);
const ROWS = Number(rowsArg);
const ROOT = resolve(import.meta.dirname, "../..");
const BROKERS = process.env.STREAM_BROKERS ?? "127.0.0.1:9092";
const KS_DIR = join(ROOT, "bench/peers/kafka-streams");
const WORK = mkdtempSync(join(tmpdir(), "fv-bench-profile-"));
const name = `bp-prof-${Date.now().toString(36)}`;
const tool = (args: string[]) => ["java", "-Xmx512m", `-Dlog4j2.configurationFile=${KS_DIR}/log4j2.properties`, "-cp", `${KS_DIR}/target/fv-bench-peers-0.jar:${KS_DIR}/target/lib/*`, "dev.fvstreams.bench.Main", ...args];
const STEPS: Record<string, string> = {
  stateless: `[[transforms.steps]]\nop = "filter"\nexpression = "price >= 50"\n\n[[transforms.steps]]\nop = "applyExpression"\ncolumn = "notional"\nexpression = "price * qty"\n`,
  stateful: `[[transforms.steps]]\nop = "windowedAggregate"\ntimeColumn = "ts"\nwindowMs = 60000\ngroupBy = ["cust"]\naggs = [{ op = "count" }, { op = "sum", column = "qty" }]\nrepartition = false\n`,
  hop: `[[transforms.steps]]\nop = "windowedAggregate"\ntimeColumn = "ts"\nwindowMs = 60000\ngroupBy = ["cust"]\naggs = [{ op = "count" }, { op = "sum", column = "qty" }]\nrepartition = true\n`,
  compute: `[[transforms.steps]]\nop = "wasm"\nref = "enrich-order"\n`,
};

const start = (argv: string[], env: Record<string, string> = {}) =>
  spawn(argv[0]!, argv.slice(1), { cwd: ROOT, env: { ...process.env, STREAM_BROKERS: BROKERS, ...env }, stdio: ["ignore", "pipe", "pipe"], detached: true });
const run = (argv: string[]) => new Promise<string>((done, fail) => {
  const c = start(argv);
  let out = "";
  c.stdout!.on("data", (d) => (out += d));
  c.on("exit", (code) => (code === 0 ? done(out) : fail(new Error(`${argv.join(" ")} exited ${code}`))));
});

/** CPU seconds (user + system) of a process and, separately, of each descendant. */
function cpuSeconds(pid: number, out: Array<{ pid: number; cmd: string; s: number }> = []) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const cmd = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter(Boolean).slice(0, 4).join(" ");
    out.push({ pid, cmd, s: (Number(f[11]) + Number(f[12])) / 100 });
    for (const t of readdirSync(`/proc/${pid}/task`)) {
      for (const c of readFileSync(`/proc/${pid}/task/${t}/children`, "utf8").split(" ").filter(Boolean)) cpuSeconds(Number(c), out);
    }
  } catch { /* gone */ }
  return out;
}

// 1. input and output topics, the input loaded as bench:peers loads it
const t0 = Math.floor(Date.now() / 60_000) * 60_000;
await run(tool(["create", `${name}-in:4`, `${name}-out:4`]));
const expected = JSON.parse(await run(tool(["load", `${name}-in`, String(ROWS), String(t0)]))).expected[workload] as number;
const file = join(WORK, `${name}.toml`);
writeFileSync(file, `name = "${name}"\n[datasets.in]\ntopic = "${name}-in"\n[datasets.out]\ntopic = "${name}-out"\n\n[[transforms]]\ninputs = ["in"]\noutput = "out"\n\n${STEPS[workload]}`);

// 2. the counter, positioned before the engine starts
const counter = start(tool(["count", `${name}-out`, String(expected), "600000", "500"]));
let counted = "";
await new Promise<void>((r) => counter.stdout!.on("data", (d) => { counted += d; if (counted.includes("READY")) r(); }));
const done = new Promise<void>((r) => counter.on("exit", () => r()));

// 3. the engine under its profiler
const env = { STREAM_EXACTLY_ONCE: String(guarantee === "eos"), STREAM_CHECKPOINT_INTERVAL_MS: process.env.BENCH_COMMIT_MS ?? "1000", STREAM_ADMIN_ADDR: "off", STREAM_LOG_FORMAT: "json", STREAM_LOG_LEVEL: "warn", FV_TRANSFORMS_DIR: join(ROOT, "functions") };
const bin = (b: string) => join(ROOT, "node_modules/.bin", b);
let engine: ChildProcess;
let stopDeno: (() => Promise<unknown>) | undefined;
if (runtime === "bun") {
  engine = start([bin("bun"), "--cpu-prof", `--cpu-prof-dir=${WORK}`, "runtime/cli/main.ts", "run", file], env);
} else if (runtime === "node") {
  // Node runs the tsc build (npm run build), with the npm package's current Node; its client is
  // the default (pure JS) unless STREAM_KAFKA_CLIENT says otherwise.
  engine = start([bin("node"), "--cpu-prof", `--cpu-prof-dir=${WORK}`, "dist/runtime/cli/main.js", "run", file], env);
} else {
  const port = 9400 + Math.floor(Math.random() * 500);
  engine = start([bin("deno"), "run", "-A", `--inspect=127.0.0.1:${port}`, "runtime/cli/main.ts", "run", file], env);
  let ws: WebSocket | undefined;
  for (let i = 0; i < 100 && !ws; i++) {
    await delay(100);
    try {
      const [target] = await (await fetch(`http://127.0.0.1:${port}/json/list`)).json() as Array<{ webSocketDebuggerUrl: string }>;
      ws = new WebSocket(target!.webSocketDebuggerUrl);
    } catch { /* not listening yet */ }
  }
  await new Promise((r) => ws!.addEventListener("open", r, { once: true }));
  let id = 0;
  const pending = new Map<number, (v: unknown) => void>();
  ws!.addEventListener("message", (e) => { const m = JSON.parse(String(e.data)); pending.get(m.id)?.(m.result); });
  const call = (method: string, params = {}) => new Promise<unknown>((r) => { pending.set(++id, r); ws!.send(JSON.stringify({ id, method, params })); });
  await call("Profiler.enable");
  await call("Profiler.setSamplingInterval", { interval: 1000 });
  await call("Profiler.start");
  stopDeno = async () => {
    const { profile } = await call("Profiler.stop") as { profile: unknown };
    writeFileSync(join(WORK, `deno-${engine.pid}.cpuprofile`), JSON.stringify(profile));
    ws!.close();
  };
}
const began = Date.now();
let cpu: ReturnType<typeof cpuSeconds> = [];
const poll = setInterval(() => { const c = cpuSeconds(engine.pid!); if (c.length) cpu = c; }, 500);
await done;
clearInterval(poll);
const seconds = (Date.now() - began) / 1000;
if (stopDeno) await stopDeno();
process.kill(-engine.pid!, "SIGTERM");
await new Promise((r) => engine.once("exit", r));
console.log(`${workload} on ${runtime}, ${guarantee}: ${counted.trim().split("\n").at(-1)}; ${(ROWS / seconds).toFixed(0)} rows/s over ${seconds.toFixed(1)} s`);
console.log(`CPU seconds: ${cpu.map((c) => `${c.cmd.replace(ROOT + "/", "")} ${c.s.toFixed(1)} s`).join("; ")}`);

// 4. the summary: self time per function, and per place (our code, the Kafka client, the runtime)
const profFile = readdirSync(WORK).find((f) => f.endsWith(".cpuprofile"));
if (!profFile) throw new Error(`no .cpuprofile in ${WORK}`);
console.log(`\n${summarize(join(WORK, profFile))}`);
await run(tool(["delete-prefix", name, `fv-state-${name}`]));
process.exit(0);
