/** The WASM plugin process (isolation = "process") outlives a stop signal meant for the stream, and ends when its stream closes its stdin. */
import { expect, test } from "bun:test";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { BUN, ROOT } from "../helpers/cli.ts";

test("SIGTERM and SIGINT to the plugin process (systemd signals every process of the unit) do not end it; the end of its stdin does", async () => {
  const child = spawn(BUN, [join(ROOT, "runtime/compute/wasm-process.ts")], { stdio: ["pipe", "pipe", "inherit"] });
  const exited = new Promise<[number | null, string | null]>((resolve) => child.on("exit", (code, signal) => resolve([code, signal])));
  try {
    await new Promise<void>((resolve) => child.stdout!.once("data", () => resolve())); // {"type":"hello"}
    child.kill("SIGTERM");
    child.kill("SIGINT");
    await new Promise((r) => setTimeout(r, 500));
    expect(child.exitCode).toBeNull();
    expect(child.signalCode).toBeNull();
    child.stdin!.end();
    expect(await Promise.race([exited, new Promise((r) => setTimeout(() => r("still running after 5 s"), 5000))])).toEqual([0, null]);
  } finally {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  }
}, 20_000);
