/**
 * Structured logs on stderr, as JSON lines or as readable text.
 *
 *   STREAM_LOG_FORMAT  json | pretty   default: pretty when stderr is a terminal, json otherwise
 *   STREAM_LOG_LEVEL   debug | info | warn | error   default: info
 *
 * json:   {"time":"2026-01-02T03:04:05.678Z","level":"info","msg":"running 2 consumer(s)","pipeline":"demo"}
 * pretty: fv-streams 03:04:05.678 info  running 2 consumer(s) pipeline=demo
 *
 * Build records share stderr with the logs. They stay apart: every JSON log line has "level"
 * and "msg", a build record never has "msg" and always has "kind":"stream" and "status"; every
 * pretty line starts with "fv-streams", never with "{". `classifyStderrLine` applies the rule.
 */
import process from "node:process";
import * as v from "valibot";
import { type BuildRecord, FvError, type Logger, type LogLevel } from "../src/index.ts";

export type LogFormat = "json" | "pretty";

const LEVELS: readonly LogLevel[] = ["debug", "info", "warn", "error"];
/** Keys every JSON line owns; a context key of the same name is written as `ctx.<key>`. */
const RESERVED = new Set(["time", "level", "msg"]);

export interface LoggerOptions {
  format: LogFormat;
  /** Lines below this level are not written. Default info. */
  level?: LogLevel;
  /** Where a finished line goes (without its newline). Default: stderr. */
  write?: (line: string) => void;
  /** Clock, for tests. */
  now?: () => Date;
  /** Colour the level in pretty lines. Default false. */
  color?: boolean;
  /** Context on every line, e.g. `{ pipeline, build }`. The call's context wins over it. */
  base?: Record<string, unknown>;
}

const writeStderr = (line: string) => void process.stderr.write(line + "\n");

/** Context values as JSON can hold them: errors as name/message/code, bigints as numbers or strings. */
function plain(value: unknown): unknown {
  if (value instanceof Error) {
    return {
      name: value.name,
      message: value.message,
      ...(value instanceof FvError ? { code: value.code } : {}),
      ...(value.cause !== undefined ? { cause: value.cause instanceof Error ? value.cause.message : value.cause } : {}),
    };
  }
  if (typeof value === "bigint") return Number.isSafeInteger(Number(value)) ? Number(value) : value.toString();
  return value;
}

function toJson(value: unknown): string {
  try {
    return JSON.stringify(value, (_key, v) => plain(v));
  } catch {
    return JSON.stringify(String(value)); // cycles and the like: still one line
  }
}

const COLORS: Record<LogLevel, string> = { debug: "\u001b[90m", info: "\u001b[36m", warn: "\u001b[33m", error: "\u001b[31m" };

function prettyValue(value: unknown): string {
  const p = plain(value);
  if (typeof p === "string") return /[\s"=]/.test(p) || p === "" ? JSON.stringify(p) : p;
  if (p && typeof p === "object" && "message" in p && value instanceof Error) return JSON.stringify((p as { message: string }).message);
  return toJson(p);
}

/**
 * @example
 * const log = createLogger({ format: "json", base: { pipeline: "demo" } });
 * log("warn", "partition revoked", { topic: "trades", partition: 3 });
 * // {"time":"…","level":"warn","msg":"partition revoked","pipeline":"demo","topic":"trades","partition":3}
 */
export function createLogger(options: LoggerOptions): Logger {
  const threshold = LEVELS.indexOf(options.level ?? "info");
  const write = options.write ?? writeStderr;
  const now = options.now ?? (() => new Date());
  const base = options.base ?? {};
  return (level, message, context) => {
    if (LEVELS.indexOf(level) < threshold) return;
    const fields = { ...base, ...context };
    const time = now();
    if (options.format === "json") {
      const line: Record<string, unknown> = { time: time.toISOString(), level, msg: message };
      for (const [key, value] of Object.entries(fields)) {
        if (value !== undefined) line[RESERVED.has(key) ? `ctx.${key}` : key] = value;
      }
      write(toJson(line));
      return;
    }
    const tag = options.color ? `${COLORS[level]}${level.padEnd(5)}\u001b[0m` : level.padEnd(5);
    const ctx = Object.entries(fields)
      .filter(([, value]) => value !== undefined)
      .map(([key, value]) => ` ${key}=${prettyValue(value)}`)
      .join("");
    // Messages are one line: a newline inside would start a line that is neither log nor record.
    write(`fv-streams ${time.toISOString().slice(11, 23)} ${tag} ${message.replace(/\r?\n/g, "\\n")}${ctx}`);
  };
}

/** A logger that adds `context` to every line (a stage's, a partition's). */
export function withContext(log: Logger, context: Record<string, unknown>): Logger {
  return (level, message, extra) => log(level, message, { ...context, ...extra });
}

export interface LogSettings {
  format: LogFormat;
  level: LogLevel;
}

const settingsSchema = v.object({
  STREAM_LOG_FORMAT: v.optional(v.picklist(["json", "pretty"], "STREAM_LOG_FORMAT must be json or pretty")),
  STREAM_LOG_LEVEL: v.optional(v.picklist(LEVELS, "STREAM_LOG_LEVEL must be debug, info, warn or error"), "info"),
});

/**
 * Reads STREAM_LOG_FORMAT and STREAM_LOG_LEVEL. `isTTY` picks the default format: pretty for
 * a person at a terminal, json for a collector (Kubernetes, systemd, a pipe).
 */
export function parseLogSettings(env: Record<string, string | undefined>, isTTY: boolean): LogSettings {
  const picked: Record<string, string> = {};
  for (const key of Object.keys(settingsSchema.entries)) {
    const value = env[key]?.trim().toLowerCase();
    if (value) picked[key] = value;
  }
  const result = v.safeParse(settingsSchema, picked);
  if (!result.success) {
    const issue = result.issues[0]!;
    const name = v.getDotPath(issue) ?? "setting";
    throw new FvError("INVALID_SETTINGS", `invalid setting ${name}=${JSON.stringify(picked[name] ?? "")}: ${issue.message}`, { context: { field: name } });
  }
  return { format: result.output.STREAM_LOG_FORMAT ?? (isTTY ? "pretty" : "json"), level: result.output.STREAM_LOG_LEVEL };
}

/**
 * The process's logger, from its environment, writing to stderr.
 *
 * @example
 * const log = loggerFromEnv(process.env, { base: { pipeline: file.name } });
 */
export function loggerFromEnv(env: Record<string, string | undefined>, options: Omit<LoggerOptions, "format" | "level"> & { isTTY?: boolean } = {}): Logger {
  const isTTY = options.isTTY ?? process.stderr.isTTY === true;
  const settings = parseLogSettings(env, isTTY);
  const color = options.color ?? (settings.format === "pretty" && isTTY && !env.NO_COLOR);
  return createLogger({ ...options, ...settings, color });
}

/**
 * A build record as one line for a person at a terminal, like a pretty log line:
 * `fv-streams 03:04:05.678 record RUNNING consumed=2000 emitted=900 … rate=50/s build=demo-1`.
 */
export function recordSummary(record: BuildRecord, now: Date = new Date()): string {
  const m = record.metrics;
  const figures = m
    ? ` consumed=${m.consumed} emitted=${m.emitted} dropped=${m.dropped} poison=${m.poison} dead-lettered=${m.deadLettered} partitions=${m.partitions.length} rate=${m.recordsPerSecond}/s`
    : "";
  const error = record.error ? ` error=${JSON.stringify(record.error)}` : "";
  return `fv-streams ${now.toISOString().slice(11, 23)} record ${record.status}${figures}${error} build=${record.id}`;
}

/**
 * Where the build records of a run go on stderr: JSON lines for pipes, files and collectors;
 * on a terminal in pretty log mode, one summary line each (`recordSummary`), so a 1 KB record
 * does not land between the pretty lines every few seconds. `--record-file` keeps the JSON.
 */
export function stderrRecordWriter(
  env: Record<string, string | undefined>,
  options: { isTTY?: boolean; write?: (line: string) => void } = {},
): (jsonLine: string) => void {
  const isTTY = options.isTTY ?? process.stderr.isTTY === true;
  const write = options.write ?? ((line: string) => void process.stderr.write(line + "\n"));
  if (!isTTY || parseLogSettings(env, isTTY).format !== "pretty") return write;
  return (jsonLine) => write(recordSummary(JSON.parse(jsonLine) as BuildRecord));
}

/**
 * What a line on stderr is: a JSON log line, a build record, or text (a pretty log line, or
 * anything else). Readers of stderr (tests, log shippers) sort lines with it.
 */
export function classifyStderrLine(line: string): "log" | "record" | "text" {
  if (!line.startsWith("{")) return "text";
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch {
    return "text";
  }
  if (!value || typeof value !== "object") return "text";
  const o = value as Record<string, unknown>;
  if (typeof o.msg === "string" && typeof o.level === "string") return "log";
  if (o.kind === "stream" && typeof o.status === "string") return "record";
  return "text";
}
