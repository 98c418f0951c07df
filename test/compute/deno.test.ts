import { describe, expect, test } from "bun:test";
import { resolve } from "node:path";
import { enriched, filtered, textStats } from "./fixtures.ts";

const root = resolve(import.meta.dir, "../..");

describe("wasm steps on Deno", () => {
  test("the AssemblyScript map and filter and the Go (WASI) map give the exact outputs, in a worker and in a process", async () => {
    const child = Bun.spawn([`${root}/node_modules/.bin/deno`, "run", "-A", "test/compute/deno-check.ts"], { cwd: root, stdout: "pipe", stderr: "pipe" });
    const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
    if (code !== 0) throw new Error(`deno exited with ${code}: ${stderr}`);
    const out = JSON.parse(stdout.trim().split("\n").at(-1)!);
    for (const isolation of ["worker", "process"]) {
      expect(out[`enrich-order/${isolation}`]).toEqual(enriched);
      expect(out[`price-filter/${isolation}`]).toEqual(filtered);
      expect(out[`text-stats-go/${isolation}`]).toEqual(textStats);
    }
  }, 120_000);
});
