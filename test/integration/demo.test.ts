/**
 * The demo (`npm start` with no file): among its first lines it prints the dashboard's URL, and
 * the dashboard answers with the demo's live counters. When the default port 8686 is taken, the
 * demo takes a free one and prints that.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { createServer, type Server } from "node:net";
import { join } from "node:path";
import { BUN, logsOf, ROOT, startCli, waitFor } from "../helpers/cli.ts";

let holder: Server | undefined;
afterAll(() => holder?.close());

/** Makes sure 127.0.0.1:8686 is taken: by us, or already by someone else. */
async function takeDefaultPort(): Promise<void> {
  await new Promise<void>((resolve) => {
    const server = createServer();
    server.once("error", () => resolve()); // taken already: just as good
    server.listen(8686, "127.0.0.1", () => ((holder = server), resolve()));
  });
}

describe("the demo", () => {
  test("prints the dashboard URL among its first lines and serves its live counters there, on a free port when 8686 is taken", async () => {
    await takeDefaultPort();
    // STREAM_ADMIN_ADDR empty: the default (127.0.0.1:8686), as on a fresh machine.
    const run = startCli([join(ROOT, "runtime/cli/start.ts")], { executable: BUN, env: { STREAM_ADMIN_ADDR: "" } });
    try {
      await waitFor(() => {
        if (run.child.exitCode !== null) throw new Error(`the demo exited (${run.child.exitCode}):\n${run.lines.join("\n")}`);
        return run.lines.some((l) => l.startsWith("dashboard: "));
      }, 60_000, "the dashboard line");
      const index = run.lines.findIndex((l) => l.startsWith("dashboard: "));
      expect(index).toBeLessThan(4);
      const url = run.lines[index]!.slice("dashboard: ".length);
      expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/$/);
      expect(url).not.toBe("http://127.0.0.1:8686/");

      const page = await fetch(url);
      expect(page.status).toBe(200);
      expect(await page.text()).toContain('fetch("status"');
      type Status = { record: { status: string; pipeline: string; metrics?: { consumed: number } } };
      let status: Status | undefined;
      await waitFor(async () => {
        status = (await (await fetch(`${url}status`)).json()) as Status;
        return status.record.status === "RUNNING" && (status.record.metrics?.consumed ?? 0) > 0;
      }, 60_000, "the dashboard's status to show the demo consuming");
      expect(status!.record.pipeline).toBe("demo");
      const first = status!.record.metrics!.consumed;
      await waitFor(async () => (((await (await fetch(`${url}status`)).json()) as Status).record.metrics?.consumed ?? 0) > first, 30_000, "the counters to move");

      run.child.kill("SIGTERM");
      expect({ code: await run.exited, logs: "" }).toEqual({ code: 0, logs: "" });
      expect(run.lines.some((l) => l.startsWith("demo ended: STOPPED"))).toBe(true);
    } catch (error) {
      throw new Error(`${(error as Error).message}\n${logsOf(run, 40)}`);
    } finally {
      if (run.child.exitCode === null) run.child.kill("SIGKILL");
    }
  }, 180_000);
});
