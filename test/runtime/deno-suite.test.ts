import { expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { DENO, ROOT } from "../helpers/cli.ts";

test("the Deno suite (deno task test) passes on Deno", () => {
  const result = spawnSync(DENO, ["task", "test"], { cwd: ROOT, encoding: "utf8", env: { ...process.env, NO_COLOR: "1" } });
  const output = `${result.stdout}\n${result.stderr}`;
  expect(output).toContain("4 passed | 0 failed");
  expect(result.status).toBe(0);
});
