/** `fv-streams run` on a terminal (a pseudo-terminal from script(1)): build records as one summary line each. No broker needed. */
import { describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { BUN, ROOT, writePipeline } from "../helpers/cli.ts";

describe("a run on a terminal", () => {
  test("in pretty mode shows each build record as one line, not the JSON record", () => {
    const file = writePipeline(`name = "tty"\n[[transforms]]\ninputs = ["in"]\noutput = "out"\n[[transforms.steps]]\nop = "select"\ncolumns = ["a"]\n`);
    const command = `${BUN} ${join(ROOT, "runtime/cli/main.ts")} run ${file}`;
    const result = spawnSync("script", ["-qec", command, "/dev/null"], {
      cwd: ROOT,
      encoding: "utf8",
      timeout: 60_000,
      env: { ...process.env, STREAM_BROKERS: "127.0.0.1:1", STREAM_ADMIN_ADDR: "off", NO_COLOR: "1", STREAM_LOG_FORMAT: "" },
    });
    const lines = result.stdout.split(/\r?\n/).filter(Boolean);
    expect(lines.some((l) => /^fv-streams [\d:.]+ record STARTING/.test(l))).toBe(true);
    expect(lines.some((l) => /^fv-streams [\d:.]+ record FAILED .*error="no broker answered at 127\.0\.0\.1:1/.test(l))).toBe(true);
    expect(lines.filter((l) => l.startsWith("{"))).toEqual([]);
  }, 90_000);
});
