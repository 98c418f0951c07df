import { describe, expect, test } from "bun:test";
import { eventTimeOf, parseIsoTime } from "../../src/ops/index.ts";
import { thrown } from "./helpers.ts";

describe("eventTimeOf", () => {
  test("takes a finite number as epoch milliseconds, fractions included", () => {
    expect(eventTimeOf({ ts: 1_717_243_200_000 }, "ts")).toBe(1_717_243_200_000);
    expect(eventTimeOf({ ts: -1 }, "ts")).toBe(-1);
    expect(eventTimeOf({ ts: 2.5 }, "ts")).toBe(2.5);
  });

  test("reads an ISO-8601 date-time with Z as UTC", () => {
    expect(eventTimeOf({ ts: "1970-01-01T00:01:00Z" }, "ts")).toBe(60_000);
    expect(eventTimeOf({ ts: "2024-06-01T12:30:00Z" }, "ts")).toBe(1_717_245_000_000);
    expect(eventTimeOf({ ts: "2024-06-01T12:30:00.250Z" }, "ts")).toBe(1_717_245_000_250);
  });

  test("applies an offset: +02:00 is two hours before the same wall time in UTC", () => {
    expect(eventTimeOf({ ts: "2024-06-01T14:30:00+02:00" }, "ts")).toBe(1_717_245_000_000);
    expect(eventTimeOf({ ts: "2024-06-01T07:00:00-05:30" }, "ts")).toBe(1_717_245_000_000);
    expect(eventTimeOf({ ts: "2024-06-01T14:30:00+0200" }, "ts")).toBe(1_717_245_000_000);
  });

  test("reads a date, and a date-time without an offset, as UTC whatever the host's time zone", () => {
    expect(eventTimeOf({ ts: "2024-06-01" }, "ts")).toBe(1_717_200_000_000);
    expect(eventTimeOf({ ts: "2024-06-01T12:30:00" }, "ts")).toBe(1_717_245_000_000);
    expect(eventTimeOf({ ts: "2024-06-01 12:30" }, "ts")).toBe(1_717_245_000_000);
  });

  test("truncates fractions finer than a millisecond and handles times before 1970", () => {
    expect(parseIsoTime("1970-01-01T00:00:00.123456Z")).toBe(123);
    expect(parseIsoTime("1970-01-01T00:00:00.1Z")).toBe(100);
    expect(parseIsoTime("1969-12-31T23:59:59.999Z")).toBe(-1);
  });

  test("knows leap years and keeps two-digit years out of the 1900s", () => {
    expect(parseIsoTime("2024-02-29")).toBe(1_709_164_800_000);
    expect(parseIsoTime("2023-02-29")).toBeUndefined();
    expect(parseIsoTime("2000-02-29")).toBe(951_782_400_000);
    expect(parseIsoTime("1900-02-29")).toBeUndefined();
    expect(parseIsoTime("0050-01-01T00:00:00Z")).toBe(-60_589_296_000_000);
  });

  test.each([
    ["a missing column", {}],
    ["null", { ts: null }],
    ["a boolean", { ts: true }],
    ["NaN", { ts: Number.NaN }],
    ["Infinity", { ts: Number.POSITIVE_INFINITY }],
    ["digits in a string", { ts: "1717243200000" }],
    ["free text", { ts: "June 1, 2024" }],
    ["an impossible day", { ts: "2024-02-30" }],
    ["month 13", { ts: "2024-13-01" }],
    ["hour 24", { ts: "2024-06-01T24:00:00Z" }],
    ["a leap second", { ts: "2016-12-31T23:59:60Z" }],
    ["an object", { ts: { at: 1 } }],
  ])("refuses %s as a poison row with reason bad_event_time", (_what, r) => {
    const error = thrown(() => eventTimeOf(r, "ts"));
    expect(error.code).toBe("POISON_ROW");
    expect(error.context?.reason).toBe("bad_event_time");
    expect(error.message).toContain('"ts"');
  });
});
