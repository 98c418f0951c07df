/**
 * Time functions. Times are epoch milliseconds (numbers); text is ISO-8601 in UTC.
 * now, parseTime / toEpochMillis (ISO-8601 → ms), formatTime / toIso (ms → text).
 * Calendar arithmetic is done here (proleptic Gregorian), not with `Date`, so years below 100
 * and odd inputs behave the same on every runtime.
 */
import type { FunctionBody, FunctionContext, FunctionDef } from "../function-def.ts";
import type { Value } from "../value.ts";
import { badValue, numberArg, stringArg, wrongKind } from "./args.ts";

const MS_PER_DAY = 86_400_000;
/** The range `Date` supports, ±100,000,000 days around 1970. */
const MAX_EPOCH_MS = 8.64e15;

/** Days since 1970-01-01 for a civil date (Howard Hinnant's days_from_civil). */
export function daysFromCivil(year: number, month: number, day: number): number {
  const y = month <= 2 ? year - 1 : year;
  const era = Math.floor(y / 400);
  const yoe = y - era * 400;
  const doy = Math.floor((153 * (month + (month > 2 ? -3 : 9)) + 2) / 5) + day - 1;
  const doe = yoe * 365 + Math.floor(yoe / 4) - Math.floor(yoe / 100) + doy;
  return era * 146097 + doe - 719468;
}

/** The civil date of a day number (Howard Hinnant's civil_from_days). */
export function civilFromDays(days: number): { year: number; month: number; day: number } {
  const z = days + 719468;
  const era = Math.floor(z / 146097);
  const doe = z - era * 146097;
  const yoe = Math.floor((doe - Math.floor(doe / 1460) + Math.floor(doe / 36524) - Math.floor(doe / 146096)) / 365);
  const doy = doe - (365 * yoe + Math.floor(yoe / 4) - Math.floor(yoe / 100));
  const mp = Math.floor((5 * doy + 2) / 153);
  const day = doy - Math.floor((153 * mp + 2) / 5) + 1;
  const month = mp < 10 ? mp + 3 : mp - 9;
  return { year: yoe + era * 400 + (month <= 2 ? 1 : 0), month, day };
}

function daysInMonth(year: number, month: number): number {
  if (month === 2) return year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0) ? 29 : 28;
  return month === 4 || month === 6 || month === 9 || month === 11 ? 30 : 31;
}

const isoPattern =
  /^(\d{4})-(\d{2})-(\d{2})(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?([Zz]|[+-]\d{2}(?::?\d{2})?)?)?$/;

/**
 * Parses ISO-8601 (`2024-03-01`, `2024-03-01T12:30`, `2024-03-01T12:30:05.123+02:00`, ...)
 * to epoch ms. Without an offset the time is UTC. Digits past milliseconds are truncated.
 * Returns null for text that is not such a date or names an impossible one.
 */
export function parseIsoTime(text: string): number | null {
  const m = isoPattern.exec(text.trim());
  if (m === null) return null;
  const year = Number(m[1]);
  const month = Number(m[2]);
  const day = Number(m[3]);
  const hour = Number(m[4] ?? 0);
  const minute = Number(m[5] ?? 0);
  const second = Number(m[6] ?? 0);
  const millis = m[7] === undefined ? 0 : Number(m[7].slice(0, 3).padEnd(3, "0"));
  if (month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month)) return null;
  if (hour > 23 || minute > 59 || second > 59) return null;
  let offsetMinutes = 0;
  const zone = m[8];
  if (zone !== undefined && zone !== "Z" && zone !== "z") {
    const digits = zone.slice(1).replace(":", "");
    const oh = Number(digits.slice(0, 2));
    const om = digits.length > 2 ? Number(digits.slice(2)) : 0;
    if (oh > 23 || om > 59) return null;
    offsetMinutes = (zone[0] === "-" ? -1 : 1) * (oh * 60 + om);
  }
  return daysFromCivil(year, month, day) * MS_PER_DAY + ((hour * 60 + minute - offsetMinutes) * 60 + second) * 1000 + millis;
}

const tokens = ["yyyy", "SSS", "MM", "dd", "HH", "mm", "ss"] as const;
/** A compiled pattern piece: a field token or literal text. */
export type PatternPart = (typeof tokens)[number] | { readonly literal: string };

/** Splits a pattern into tokens and literal text. Unknown letters are literal. */
export function compilePattern(pattern: string): PatternPart[] {
  const parts: PatternPart[] = [];
  let literal = "";
  for (let i = 0; i < pattern.length; ) {
    const token = tokens.find((t) => pattern.startsWith(t, i));
    if (token === undefined) {
      literal += pattern[i];
      i++;
      continue;
    }
    if (literal !== "") parts.push({ literal });
    literal = "";
    parts.push(token);
    i += token.length;
  }
  if (literal !== "") parts.push({ literal });
  return parts;
}

const pad = (n: number, width: number): string => String(n).padStart(width, "0");

export const ISO_PATTERN = "yyyy-MM-ddTHH:mm:ss.SSSZ";
const isoParts = compilePattern(ISO_PATTERN);

/** Formats epoch ms in UTC; null when the time is outside years 0000-9999. */
export function formatEpochMillis(ms: number, parts: readonly PatternPart[] = isoParts): string | null {
  if (!Number.isFinite(ms) || Math.abs(ms) > MAX_EPOCH_MS) return null;
  const whole = Math.floor(ms);
  const days = Math.floor(whole / MS_PER_DAY);
  const { year, month, day } = civilFromDays(days);
  if (year < 0 || year > 9999) return null;
  let rest = whole - days * MS_PER_DAY;
  const millis = rest % 1000;
  rest = (rest - millis) / 1000;
  const second = rest % 60;
  rest = (rest - second) / 60;
  const minute = rest % 60;
  const hour = (rest - minute) / 60;
  let out = "";
  for (const part of parts) {
    switch (part) {
      case "yyyy": out += pad(year, 4); break;
      case "MM": out += pad(month, 2); break;
      case "dd": out += pad(day, 2); break;
      case "HH": out += pad(hour, 2); break;
      case "mm": out += pad(minute, 2); break;
      case "ss": out += pad(second, 2); break;
      case "SSS": out += pad(millis, 3); break;
      default: out += part.literal;
    }
  }
  return out;
}

function format(ms: number, parts: readonly PatternPart[], ctx: FunctionContext): string {
  const text = formatEpochMillis(ms, parts);
  if (text === null) throw badValue(ctx, `${ms} is not a time between years 0000 and 9999`);
  return text;
}

const parseTime: FunctionDef = {
  minArgs: 1,
  maxArgs: 1,
  signature: "parseTime(text)",
  fn: (args, ctx): Value => {
    const v = args[0];
    if (typeof v === "number") return v;
    if (typeof v !== "string") throw wrongKind(ctx, 0, "an ISO-8601 string", v);
    return parseIsoTime(v);
  },
};

const formatTime: FunctionDef = {
  minArgs: 1,
  maxArgs: 2,
  signature: "formatTime(ms[, pattern])",
  fn: (args, ctx) => format(numberArg(args, 0, ctx), args.length > 1 ? compilePattern(stringArg(args, 1, ctx)) : isoParts, ctx),
  specialize: (constants): FunctionBody | undefined => {
    const pattern = constants[1];
    if (typeof pattern !== "string") return undefined;
    const parts = compilePattern(pattern);
    return (args, ctx) => format(numberArg(args, 0, ctx), parts, ctx);
  },
};

export const timeFunctions: Record<string, FunctionDef> = {
  now: {
    minArgs: 0,
    maxArgs: 0,
    pure: false,
    signature: "now()",
    fn: (_args, ctx) => ctx.now(),
  },
  parseTime,
  toEpochMillis: { ...parseTime, signature: "toEpochMillis(text)" },
  formatTime,
  toIso: {
    minArgs: 1,
    maxArgs: 1,
    signature: "toIso(ms)",
    fn: (args, ctx) => format(numberArg(args, 0, ctx), isoParts, ctx),
  },
};
