import { FvError } from "../errors.ts";
import type { Row } from "../expr/index.ts";

// YYYY-MM-DD, optionally followed by T (or t, or a space) hh:mm[:ss[.fraction]] and an offset.
const ISO_8601 = /^(\d{4})-(\d{2})-(\d{2})(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?(?:([Zz])|([+-])(\d{2})(?::?(\d{2}))?)?)?$/;

const DAY_MS = 86_400_000;

/**
 * A row's event time in epoch milliseconds: a finite number is taken as epoch ms, a string must
 * be ISO-8601 (`2024-06-01T12:30:00.250Z`, `2024-06-01T14:30:00+02:00`, `2024-06-01`). A date
 * or date-time without an offset is read as UTC, so the result never depends on the host's
 * time zone. Fractions finer than a millisecond are truncated.
 *
 * Throws FvError POISON_ROW with reason "bad_event_time" for anything else (missing column,
 * null, another kind, an impossible date such as 2024-02-30).
 *
 * @example
 * eventTimeOf({ ts: "1970-01-01T00:01:00Z" }, "ts"); // 60000
 * eventTimeOf({ ts: 1717243200000 }, "ts");          // 1717243200000
 */
export function eventTimeOf(row: Row, timeColumn: string): number {
  const value = row[timeColumn];
  if (typeof value === "number") {
    if (Number.isFinite(value)) return value;
  } else if (typeof value === "string") {
    const ms = parseIsoTime(value);
    if (ms !== undefined) return ms;
  }
  throw badEventTime(timeColumn, value);
}

/** Parses an ISO-8601 date or date-time to epoch ms; undefined when it is not one or names an impossible instant. */
export function parseIsoTime(text: string): number | undefined {
  const m = ISO_8601.exec(text);
  if (m === null) return undefined;
  const year = Number(m[1]);
  const month = Number(m[2]);
  const day = Number(m[3]);
  const hour = m[4] === undefined ? 0 : Number(m[4]);
  const minute = m[5] === undefined ? 0 : Number(m[5]);
  const second = m[6] === undefined ? 0 : Number(m[6]);
  const ms = m[7] === undefined ? 0 : Number(m[7].slice(0, 3).padEnd(3, "0"));
  if (month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month)) return undefined;
  if (hour > 23 || minute > 59 || second > 59) return undefined;
  let offsetMinutes = 0;
  if (m[9] !== undefined) {
    const oh = Number(m[10]);
    const om = m[11] === undefined ? 0 : Number(m[11]);
    if (oh > 23 || om > 59) return undefined;
    offsetMinutes = (m[9] === "-" ? -1 : 1) * (oh * 60 + om);
  }
  return daysFromCivil(year, month, day) * DAY_MS + ((hour * 60 + minute - offsetMinutes) * 60 + second) * 1000 + ms;
}

export function badEventTime(timeColumn: string, value: unknown): FvError {
  const got = value === undefined ? "nothing (the column is missing)" : `${value === null ? "null" : typeof value} ${JSON.stringify(value)}`;
  return new FvError(
    "POISON_ROW",
    `event time column "${timeColumn}" needs epoch milliseconds (a number) or an ISO-8601 string, got ${got}`,
    { context: { reason: "bad_event_time", field: timeColumn } },
  );
}

function isLeapYear(year: number): boolean {
  return (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;
}

function daysInMonth(year: number, month: number): number {
  if (month === 2) return isLeapYear(year) ? 29 : 28;
  return month === 4 || month === 6 || month === 9 || month === 11 ? 30 : 31;
}

/** Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil). */
function daysFromCivil(year: number, month: number, day: number): number {
  const y = month <= 2 ? year - 1 : year;
  const era = Math.floor(y / 400);
  const yoe = y - era * 400;
  const doy = Math.floor((153 * (month > 2 ? month - 3 : month + 9) + 2) / 5) + day - 1;
  const doe = yoe * 365 + Math.floor(yoe / 4) - Math.floor(yoe / 100) + doy;
  return era * 146_097 + doe - 719_468;
}

/** Throws POISON_ROW "bad_event_time" unless `time` is a finite number (what `process` must be given). */
export function checkEventTime(time: number): void {
  if (typeof time !== "number" || !Number.isFinite(time)) {
    throw new FvError("POISON_ROW", `event time must be finite epoch milliseconds, got ${String(time)}`, { context: { reason: "bad_event_time" } });
  }
}
