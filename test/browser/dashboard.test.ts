/**
 * The admin dashboard in a real browser: headless Chromium (Debian's, installed by
 * scripts/setup-browser.sh when missing) driven by playwright-core, on a pipeline that runs
 * against the real local broker while records keep arriving. The screenshot lands in
 * test/artifacts/ (ignored by git).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { type Browser, chromium } from "playwright-core";
import { adminUrlOf, BUN, type CliRun, lastRecord, ROOT, startCli, waitFor } from "../helpers/cli.ts";
import { createTopic, produce, uniqueName } from "../helpers/kafka.ts";
import { pipelineFile, windowedCountPipeline } from "../helpers/pipelines.ts";

const ARTIFACTS = join(ROOT, "test/artifacts");
let browser: Browser | undefined;
let run: CliRun | undefined;

beforeAll(async () => {
  // Installs Chromium with apt-get on a machine that lacks it (a fresh CI machine), then names it.
  const setup = spawnSync("bash", [join(ROOT, "scripts/setup-browser.sh")], { cwd: ROOT, encoding: "utf8", timeout: 900_000 });
  if (setup.status !== 0) throw new Error(`scripts/setup-browser.sh failed (${setup.status}):\n${setup.stderr}`);
  const executablePath = setup.stdout.trim().split("\n").pop()!;
  // Root in a container has no user namespaces for Chromium's sandbox.
  browser = await chromium.launch({ executablePath, headless: true, args: ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"] });
}, 900_000);

afterAll(async () => {
  await browser?.close();
  if (run && run.child.exitCode === null) run.child.kill("SIGKILL");
});

/** The number a counter card shows ("1,234" → 1234; the page abbreviates from 10,000 on). */
const shown = (text: string | null) => Number((text ?? "").replace(/,/g, ""));

describe("the admin dashboard", () => {
  test("shows a running pipeline, its counters move while records arrive, and it matches the build record", async () => {
    const name = uniqueName("dashboard");
    const input = `${name}-trades`;
    await createTopic(input, 2);
    const file = pipelineFile({
      name,
      datasets: { trades: { topic: input, deadLetter: `${name}-dlq` }, large: { topic: `${name}-large` } },
      transforms: [{ inputs: ["trades"], output: "large", steps: [{ op: "filter", expression: "price > 100" }, { op: "applyExpression", column: "notional", expression: "price * qty" }] }],
    });
    const trade = (id: number) => (id % 40 === 39 ? "not json {" : JSON.stringify({ id, sym: "ACME", price: 50 + (id % 100), qty: 1 + (id % 5) }));
    run = startCli(["run", file]);
    const admin = await adminUrlOf(run);

    // Trades keep arriving, 40 every 200 ms, until the test has seen the page move.
    let fed = 0;
    let feeding = true;
    const feeder = (async () => {
      while (feeding && fed < 4000) {
        await produce(Array.from({ length: 40 }, (_, i) => ({ topic: input, key: `k${fed + i}`, value: trade(fed + i) })));
        fed += 40;
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    })();

    const page = await browser!.newPage({ viewport: { width: 1280, height: 900 } });
    const problems: string[] = [];
    page.on("console", (message) => void (message.type() === "error" && problems.push(message.text())));
    page.on("pageerror", (error) => void problems.push(error.message));
    page.on("request", (request) => void (!request.url().startsWith(admin) && problems.push(`request to ${request.url()}`)));
    try {
      await page.goto(`${admin}/`);
      await page.waitForFunction(() => document.getElementById("status")?.textContent === "RUNNING", undefined, { timeout: 20_000 });
      expect(await page.textContent("#title")).toBe(name);
      expect(await page.textContent("#conn")).toBe("live");

      // The consumed counter moves: two readings a few polls apart, the second higher.
      await page.waitForFunction(() => Number(document.getElementById("consumed")?.textContent?.replace(/,/g, "")) > 0, undefined, { timeout: 20_000 });
      const before = shown(await page.textContent("#consumed"));
      await page.waitForFunction((n) => Number(document.getElementById("consumed")?.textContent?.replace(/,/g, "")) > n, before, { timeout: 20_000 });
      const after = shown(await page.textContent("#consumed"));
      expect(after).toBeGreaterThan(before);
      expect(shown(await page.textContent("#emitted"))).toBeGreaterThan(0);
      expect(await page.textContent("#graph")).toContain("applyExpression");

      // Feeding stops; once the stream has read everything, the page shows the record's exact counters.
      feeding = false;
      await feeder;
      await waitFor(async () => {
        const status = (await (await fetch(`${admin}/status`)).json()) as { record: { metrics?: { consumed: number } } };
        return status.record.metrics?.consumed === fed;
      }, 20_000, `the stream to consume all ${fed} trades`);
      await page.waitForFunction((n) => Number(document.getElementById("consumed")?.textContent?.replace(/,/g, "")) === n, fed, { timeout: 10_000 });
      const { record } = (await (await fetch(`${admin}/status`)).json()) as { record: { metrics: Record<string, number> } };
      for (const counter of ["consumed", "emitted", "dropped", "poison", "deadLettered"]) {
        await page.waitForFunction(([id, n]) => Number(document.getElementById(id as string)?.textContent?.replace(/,/g, "")) === n, [counter, record.metrics[counter]], { timeout: 5_000 });
      }
      expect(record.metrics.poison).toBe(Math.floor(fed / 40));
      expect(shown(await page.textContent("#owned"))).toBe(2);

      mkdirSync(ARTIFACTS, { recursive: true });
      const screenshot = join(ARTIFACTS, "dashboard.png");
      await page.screenshot({ path: screenshot, fullPage: true });
      console.log(`dashboard: ${before} → ${after} consumed while feeding, ${fed} in all; screenshot ${screenshot}`);
      expect(problems).toEqual([]);
    } finally {
      feeding = false;
      await feeder;
      await page.close();
    }

    run.child.kill("SIGTERM");
    expect(await run.exited).toBe(0);
    expect(lastRecord(run.records)!.status).toBe("STOPPED");
  }, 90_000);

  // What a newcomer sees first: `npm start` prints the dashboard's URL, and the page shows the
  // demo's counters moving as its feeder trades.
  test("the demo's dashboard, from the URL the demo prints, shows its counters moving", async () => {
    const demo = startCli([join(ROOT, "runtime/cli/start.ts")], { executable: BUN, env: { STREAM_ADMIN_ADDR: "127.0.0.1:0" } });
    const page = await browser!.newPage({ viewport: { width: 1280, height: 900 } });
    try {
      await waitFor(() => {
        if (demo.child.exitCode !== null) throw new Error(`the demo exited (${demo.child.exitCode}):\n${demo.lines.join("\n")}`);
        return demo.lines.some((l) => l.startsWith("dashboard: "));
      }, 60_000, "the demo's dashboard line");
      const url = demo.lines.find((l) => l.startsWith("dashboard: "))!.slice("dashboard: ".length);
      await page.goto(url);
      await page.waitForFunction(() => document.getElementById("status")?.textContent === "RUNNING", undefined, { timeout: 30_000 });
      await page.waitForFunction(() => Number(document.getElementById("consumed")?.textContent?.replace(/,/g, "")) > 0, undefined, { timeout: 30_000 });
      const before = shown(await page.textContent("#consumed"));
      await page.waitForFunction((n) => Number(document.getElementById("consumed")?.textContent?.replace(/,/g, "")) > n, before, { timeout: 20_000 });
      const after = shown(await page.textContent("#consumed"));
      expect(after).toBeGreaterThan(before);
      mkdirSync(ARTIFACTS, { recursive: true });
      const screenshot = join(ARTIFACTS, "demo-dashboard.png");
      await page.screenshot({ path: screenshot, fullPage: true });
      console.log(`demo dashboard: ${before} → ${after} consumed; screenshot ${screenshot}`);
    } finally {
      await page.close();
      demo.child.kill("SIGTERM");
      await demo.exited;
    }
  }, 120_000);

  test("the state panel: pick a stage, type a key, and see its value update live", async () => {
    const name = uniqueName("dashboard-state");
    const input = `${name}-in`;
    await createTopic(input, 2);
    const T0 = Date.UTC(2026, 0, 1);
    const at = (n: number) => ({ topic: input, key: `m${n}`, value: JSON.stringify({ g: "ACME", qty: 1, ts: T0 + n }) });
    await produce([0, 1, 2].map(at));
    const stateRun = startCli(["run", windowedCountPipeline(name, input, `${name}-out`, "g")]);
    const admin = await adminUrlOf(stateRun);
    const page = await browser!.newPage({ viewport: { width: 1280, height: 1100 } });
    const problems: string[] = [];
    page.on("console", (message) => void (message.type() === "error" && problems.push(message.text())));
    page.on("pageerror", (error) => void problems.push(error.message));
    const shownCount = () => page.evaluate(() => {
      const text = document.getElementById("state-value")?.textContent ?? "";
      return text ? (JSON.parse(text) as Array<{ n: number }>)[0]?.n ?? null : null;
    });
    try {
      await page.goto(`${admin}/`);
      await page.waitForSelector("#state-panel:not([hidden])", { timeout: 20_000 });
      expect(await page.textContent("#state-stage")).toBe("stage 1 · windowedAggregate by g");
      await page.selectOption("#state-stage", "1");
      await page.fill("#state-key", "ACME");
      await page.click("#state-form button");
      await page.waitForFunction(() => (document.getElementById("state-value")?.textContent ?? "").includes('"n": 3'), undefined, { timeout: 30_000 });
      // A new row for the key: the panel shows the new count without another click.
      await produce([at(3)]);
      await page.waitForFunction(() => (document.getElementById("state-value")?.textContent ?? "").includes('"n": 4'), undefined, { timeout: 30_000 });
      expect(await shownCount()).toBe(4);
      expect(await page.textContent("#state-meta")).toContain(`from ${admin}`);
      mkdirSync(ARTIFACTS, { recursive: true });
      await page.screenshot({ path: join(ARTIFACTS, "dashboard-state.png"), fullPage: true });
      expect(problems).toEqual([]);
    } finally {
      await page.close();
      stateRun.child.kill("SIGTERM");
    }
    expect(await stateRun.exited).toBe(0);
  }, 90_000);
});
