/** The first error of a user whose brokers do not answer: it names the address and what to check. No broker needed. */
import { describe, expect, test } from "bun:test";
import { runCli, writePipeline } from "../helpers/cli.ts";

describe("brokers that do not answer", () => {
  test("STREAM_BROKERS=127.0.0.1:1 fails the start saying no broker answered there, why, and what to check", async () => {
    const file = writePipeline(`name = "unreachable"\n[[transforms]]\ninputs = ["accx-in"]\noutput = "out"\n[[transforms.steps]]\nop = "select"\ncolumns = ["a"]\n`);
    const { code, output, records } = await runCli(["run", file], { runtime: "bun", env: { STREAM_BROKERS: "127.0.0.1:1" } });
    expect(code).toBe(1);
    const error = records.at(-1)?.error ?? "";
    expect(error).toStartWith("no broker answered at 127.0.0.1:1 (connection refused). Check that Kafka is running and listens on that address");
    expect(error).toContain("and that STREAM_BROKERS (or the pipeline's brokers) names it.");
    expect(output).toContain('pipeline "unreachable" failed: no broker answered at 127.0.0.1:1');
  }, 60_000);
});
