import { describe, expect, test } from "bun:test";
import { FvError } from "../../src/index.ts";
import { classifyStderrLine, createLogger, type LoggerOptions, loggerFromEnv, parseLogSettings, stderrRecordWriter, withContext } from "../../runtime/logging.ts";

const AT = new Date("2026-01-02T03:04:05.678Z");

function capture(format: "json" | "pretty", extra: Partial<LoggerOptions> = {}) {
  const lines: string[] = [];
  const log = createLogger({ format, now: () => AT, write: (l) => lines.push(l), ...extra });
  return { log, lines };
}

describe("logging", () => {
  test("a JSON line has time, level and msg first, then the context", () => {
    const { log, lines } = capture("json", { base: { pipeline: "demo" } });
    log("info", "partition assigned", { stage: 1, partition: 3, topic: "trades" });
    expect(lines[0]).toBe('{"time":"2026-01-02T03:04:05.678Z","level":"info","msg":"partition assigned","pipeline":"demo","stage":1,"partition":3,"topic":"trades"}');
  });

  test("context cannot overwrite time, level or msg, and errors and bigints stay readable", () => {
    const { log, lines } = capture("json");
    log("error", "commit failed", { level: "x", msg: "y", offset: 2n ** 70n, small: 5n, error: new FvError("KAFKA_RETRYABLE", "broker gone", { cause: new Error("ECONNRESET") }) });
    const line = JSON.parse(lines[0]!);
    expect(line).toMatchObject({ level: "error", msg: "commit failed", "ctx.level": "x", "ctx.msg": "y", offset: "1180591620717411303424", small: 5 });
    expect(line.error).toEqual({ name: "FvError", message: "broker gone", code: "KAFKA_RETRYABLE", cause: "ECONNRESET" });
  });

  test("a pretty line starts with fv-streams, so it is never mistaken for a build record", () => {
    const { log, lines } = capture("pretty");
    log("warn", "slow commit\nsecond line", { pipeline: "demo", partition: 2, note: "two words", error: new Error("boom") });
    expect(lines[0]).toBe('fv-streams 03:04:05.678 warn  slow commit\\nsecond line pipeline=demo partition=2 note="two words" error="boom"');
    expect(classifyStderrLine(lines[0]!)).toBe("text");
  });

  test("colour marks only the level", () => {
    const { log, lines } = capture("pretty", { color: true });
    log("error", "failed");
    expect(lines[0]).toBe("fv-streams 03:04:05.678 \u001b[31merror\u001b[0m failed");
  });

  test("lines below STREAM_LOG_LEVEL are not written", () => {
    const { log, lines } = capture("json", { level: "warn" });
    log("debug", "a");
    log("info", "b");
    log("warn", "c");
    log("error", "d");
    expect(lines.map((l) => JSON.parse(l).msg)).toEqual(["c", "d"]);
  });

  test("withContext adds a stage's or partition's context to every line", () => {
    const { log, lines } = capture("json", { base: { pipeline: "demo" } });
    withContext(log, { stage: 2 })("info", "fired", { partition: 0 });
    expect(JSON.parse(lines[0]!)).toMatchObject({ pipeline: "demo", stage: 2, partition: 0 });
  });

  test("STREAM_LOG_FORMAT defaults to pretty on a terminal and json otherwise; bad values name the variable", () => {
    expect(parseLogSettings({}, true)).toEqual({ format: "pretty", level: "info" });
    expect(parseLogSettings({}, false)).toEqual({ format: "json", level: "info" });
    expect(parseLogSettings({ STREAM_LOG_FORMAT: "JSON", STREAM_LOG_LEVEL: "debug" }, true)).toEqual({ format: "json", level: "debug" });
    expect(() => parseLogSettings({ STREAM_LOG_FORMAT: "xml" }, true)).toThrow('invalid setting STREAM_LOG_FORMAT="xml": STREAM_LOG_FORMAT must be json or pretty');
    expect(() => parseLogSettings({ STREAM_LOG_LEVEL: "trace" }, true)).toThrow(/STREAM_LOG_LEVEL must be debug, info, warn or error/);
  });

  test("loggerFromEnv writes what the environment asks for", () => {
    const lines: string[] = [];
    const log = loggerFromEnv({ STREAM_LOG_FORMAT: "json", STREAM_LOG_LEVEL: "error" }, { isTTY: true, write: (l) => lines.push(l) });
    log("warn", "hidden");
    log("error", "shown");
    expect(lines.map((l) => JSON.parse(l).msg)).toEqual(["shown"]);
  });

  test("JSON log lines and build records on one stderr are told apart", () => {
    const { log, lines } = capture("json");
    log("info", "running", { status: "RUNNING", kind: "stream" }); // even a context that looks like a record
    const record = JSON.stringify({ id: "b1", pipeline: "demo", kind: "stream", status: "RUNNING", metrics: { consumed: 1 } });
    expect(classifyStderrLine(lines[0]!)).toBe("log");
    expect(classifyStderrLine(record)).toBe("record");
    expect(classifyStderrLine("fv-streams info  hello")).toBe("text");
    expect(classifyStderrLine("{not json")).toBe("text");
  });
});

describe("build records on stderr", () => {
  const RECORD = {
    id: "demo-1", pipeline: "demo", kind: "stream", status: "RUNNING",
    metrics: { consumed: 2000, emitted: 900, dropped: 1000, poison: 100, deadLettered: 100, partitions: [{ topic: "t", partition: 0 }], recordsPerSecond: 50 },
  };
  const writer = (env: Record<string, string>, isTTY: boolean) => {
    const lines: string[] = [];
    return { write: stderrRecordWriter(env, { isTTY, write: (l) => lines.push(l) }), lines };
  };

  test("on a terminal in pretty mode a record is one summary line that reads as text, not a 1 KB JSON object", () => {
    const { write, lines } = writer({}, true);
    write(JSON.stringify(RECORD));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^fv-streams \d\d:\d\d:\d\d\.\d{3} record RUNNING consumed=2000 emitted=900 dropped=1000 poison=100 dead-lettered=100 partitions=1 rate=50\/s build=demo-1$/);
    expect(classifyStderrLine(lines[0]!)).toBe("text");
  });

  test("for a pipe, or STREAM_LOG_FORMAT=json on a terminal, records stay JSON lines", () => {
    for (const [env, isTTY] of [[{}, false], [{ STREAM_LOG_FORMAT: "json" }, true], [{ STREAM_LOG_FORMAT: "pretty" }, false]] as const) {
      const { write, lines } = writer(env, isTTY);
      write(JSON.stringify(RECORD));
      expect(classifyStderrLine(lines[0]!)).toBe("record");
    }
  });
});
