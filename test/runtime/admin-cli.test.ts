/**
 * What `fv-streams run` says about its admin server, and when it opens it. No broker needed:
 * the runs point at 127.0.0.1:1 and fail after the admin server is up (or before, for a
 * pipeline that will not run).
 */
import { describe, expect, test } from "bun:test";
import { type LogLine, runCli, startCli, writePipeline } from "../helpers/cli.ts";

const PIPELINE = `name = "admin-cli"\n[[transforms]]\ninputs = ["in"]\noutput = "out"\n[[transforms.steps]]\nop = "select"\ncolumns = ["a"]\n`;
const NO_BROKER = { STREAM_BROKERS: "127.0.0.1:1" };

async function adminLine(env: Record<string, string>) {
  const run = startCli(["run", writePipeline(PIPELINE)], { runtime: "bun", env: { ...NO_BROKER, ...env } });
  await run.exited;
  const line = run.logs.find((l) => l.msg.startsWith("admin listening on")) as LogLine;
  return { line, records: run.records };
}

describe("the admin server of a run", () => {
  test("bound to 0.0.0.0:0, the log line and the record name the real bind address, and say /stop is refused without a token", async () => {
    const { line, records } = await adminLine({ STREAM_ADMIN_ADDR: "0.0.0.0:0" });
    const port = String(line.bind).split(":")[1]!;
    expect(line.bind).toBe(`0.0.0.0:${port}`);
    expect(line.msg).toBe(
      `admin listening on http://0.0.0.0:${port} (every address; on this machine: http://127.0.0.1:${port}/); POST /stop is refused (no STREAM_ADMIN_TOKEN, and this is not loopback); reads are open to the network`,
    );
    expect(line.stop).toBe("refused");
    expect(line.url).toBe(`http://127.0.0.1:${port}`);
    expect(records.map((r) => r.admin)).toContain(`http://0.0.0.0:${port}`);
    expect(records.every((r) => r.admin === undefined || r.admin === `http://0.0.0.0:${port}`)).toBe(true);
  }, 30_000);

  test("with STREAM_ADMIN_TOKEN the log line says every route but the probes needs it, and which one is left open", async () => {
    const { line } = await adminLine({ STREAM_ADMIN_ADDR: "127.0.0.1:0", STREAM_ADMIN_TOKEN: "s3cret", STREAM_ADMIN_METRICS_OPEN: "true" });
    expect(line.stop).toBe("token");
    expect(line.msg).toEndWith("/?token=<STREAM_ADMIN_TOKEN>; every route but /healthz and /readyz needs STREAM_ADMIN_TOKEN (/metrics is open: STREAM_ADMIN_METRICS_OPEN)");
    expect(line.msg).not.toContain("s3cret");
  }, 30_000);

  test("on loopback without a token the log line says /stop is taken from this machine", async () => {
    const { line } = await adminLine({ STREAM_ADMIN_ADDR: "127.0.0.1:0" });
    expect(line.stop).toBe("loopback");
    expect(line.msg).toMatch(/^admin listening on http:\/\/127\.0\.0\.1:\d+\/; POST \/stop is taken from this machine without a token$/);
  }, 30_000);

  test("a pipeline that will not run opens no admin port: the build fails first", async () => {
    const bad = writePipeline(PIPELINE.replace("columns", "colums"));
    const { code, records, output } = await runCli(["run", bad], { runtime: "bun", env: { ...NO_BROKER, STREAM_ADMIN_ADDR: "127.0.0.1:0" } });
    expect(code).toBe(1);
    expect(output).not.toContain("admin listening on");
    expect(records.at(-1)?.status).toBe("FAILED");
    expect(records.at(-1)?.error).toContain('unknown field "colums" (did you mean "columns"?)');
    expect(records.some((r) => r.admin !== undefined)).toBe(false);
  }, 30_000);

  test("the usage text says STREAM_ADMIN_ADDR takes port 0, and names the settings of the token", async () => {
    const { output } = await runCli(["--help"], { runtime: "bun" });
    expect(output).toContain("host:port ([v6]:port; port 0 picks a free one) or off");
    expect(output).toContain("STREAM_ADMIN_METRICS_OPEN");
  });
});
