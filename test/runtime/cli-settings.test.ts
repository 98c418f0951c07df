/** Bad settings on the command line's side: one exit code, and a message naming the variable. No broker needed. */
import { describe, expect, test } from "bun:test";
import { runCli, writePipeline } from "../helpers/cli.ts";

const file = () => writePipeline(`name = "settings"\n[[transforms]]\ninputs = ["in"]\noutput = "out"\n[[transforms.steps]]\nop = "select"\ncolumns = ["a"]\n`);

describe("bad settings", () => {
  test.each([
    ["STREAM_LOG_LEVEL", "loud", "STREAM_LOG_LEVEL must be debug, info, warn or error"],
    ["STREAM_LOG_FORMAT", "xml", "STREAM_LOG_FORMAT must be json or pretty"],
    ["STREAM_CONSUMERS", "0", "STREAM_CONSUMERS must be at least 1"],
    ["STREAM_CHECKPOINT_MAX_FAILURES", "many", "STREAM_CHECKPOINT_MAX_FAILURES must be a whole number"],
  ])("%s=%s exits 1 naming the variable, as every bad setting does", async (name, value, message) => {
    const { code, output } = await runCli(["run", file()], { runtime: "bun", env: { [name]: value, STREAM_BROKERS: "127.0.0.1:1" } });
    expect({ code, named: output.includes(message) }).toEqual({ code: 1, named: true });
  }, 30_000);

  test("the usage text says what an empty value means and what each exit code is", async () => {
    const { code, output } = await runCli(["--help"], { runtime: "bun" });
    expect(code).toBe(0);
    expect(output).toContain("an empty value, NAME=, counts as unset and takes the default");
    expect(output).toContain("Exit codes: 0 stopped in order (or valid), 1 the run failed or a setting is bad, 2 a wrong command line.");
  });
});
