/**
 * Trades for the stateful suites: keyed by sym over a few minutes, with the windows a 1-minute
 * count and sum of qty per sym must give (`windowedCountPipeline(name, input, output, "sym")`).
 */
import type { OutboundRecord } from "../../src/kafka/port.ts";
import { MINUTE } from "./pipelines.ts";

export const T0 = Date.UTC(2026, 0, 1);
export const SYMS = ["ACME", "GLOBEX", "INITECH", "UMBRELLA", "HOOLI"];

/**
 * Trades keyed by sym (so one sym lives in one partition), spread over `minutes` minutes.
 * The last minute's rows only move the watermark past every earlier window.
 */
export function trades(topic: string, perMinute: number, minutes: number): OutboundRecord[] {
  const out: OutboundRecord[] = [];
  for (let m = 0; m < minutes; m++) {
    for (let i = 0; i < perMinute; i++) {
      const sym = SYMS[(m * 7 + i) % SYMS.length]!;
      out.push({ topic, key: sym, value: JSON.stringify({ sym, qty: 1 + (i % 3), ts: T0 + m * MINUTE + Math.floor((i * MINUTE) / perMinute) }) });
    }
  }
  return out;
}

/** count and sum(qty) per (sym, minute), by hand, for every minute but the last (still open). */
export function expectedWindows(perMinute: number, minutes: number) {
  const map = new Map<string, { windowStart: number; windowEnd: number; sym: string; n: number; qty: number }>();
  for (let m = 0; m < minutes - 1; m++) {
    for (let i = 0; i < perMinute; i++) {
      const sym = SYMS[(m * 7 + i) % SYMS.length]!;
      const key = `${sym}@${m}`;
      const w = map.get(key) ?? { windowStart: T0 + m * MINUTE, windowEnd: T0 + (m + 1) * MINUTE, sym, n: 0, qty: 0 };
      w.n++;
      w.qty += 1 + (i % 3);
      map.set(key, w);
    }
  }
  return [...map.values()];
}

/** The latest value per (sym, window): at-least-once may re-emit a window, but with the right value. */
export function finalWindows(rows: Array<Record<string, unknown>>) {
  const latest = new Map<string, Record<string, unknown>>();
  for (const r of rows) latest.set(`${r.sym}@${r.windowStart}`, r);
  const key = (r: Record<string, unknown>) => `${r.windowStart}|${r.sym}`;
  return [...latest.values()].sort((a, b) => key(a).localeCompare(key(b)));
}
export const sorted = (rows: Array<Record<string, unknown>>) => [...rows].sort((a, b) => `${a.windowStart}|${a.sym}`.localeCompare(`${b.windowStart}|${b.sym}`));
