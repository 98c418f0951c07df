import * as v from "valibot";
import type { Row } from "../../src/expr/index.ts";
import { type CompiledOperator, eventTimeOf, META_KEY, type Operator, operatorSteps, type StateEntry, type StateSource } from "../../src/ops/index.ts";

/** Parses a step definition with its schema and compiles it, as the topology will. */
export function compileOp(def: { op: string; [field: string]: unknown }, inputs = 1): CompiledOperator {
  const kind = operatorSteps[def.op];
  if (kind === undefined) throw new Error(`no operator ${def.op}`);
  return kind.compile(v.parse(kind.schema, def), { stage: 0, step: 0, inputs });
}

/** One thing that happens to an operator: a row (from an input) or a watermark. */
export type Event = { row: Row; input?: number } | { watermark: number };

/** Shorthands for scripts. */
export const row = (r: Row, input = 0): Event => ({ row: r, input });
export const wm = (watermark: number): Event => ({ watermark });

export interface Outcome {
  rows: Row[];
  late: Row[];
}

/** Runs events through an operator the way the engine will (event time read with eventTimeOf). */
export function run(op: Operator, time: string | CompiledOperator, events: readonly Event[], onStep?: () => void): Outcome {
  const out: Outcome = { rows: [], late: [] };
  // Given the compiled operator, its own way to read event time (tableJoin's table rows need none).
  const timeOf = typeof time === "string" ? (row: Row) => eventTimeOf(row, time) : (row: Row, input: number) => time.eventTime?.(row, input) ?? eventTimeOf(row, time.timeColumn);
  for (const event of events) {
    if ("watermark" in event) out.rows.push(...op.advance(event.watermark));
    else {
      const r = op.process(event.row, timeOf(event.row, event.input ?? 0), event.input ?? 0);
      out.rows.push(...r.rows);
      out.late.push(...r.late);
    }
    onStep?.();
  }
  return out;
}

/** Through JSON and back, as a changelog topic or a snapshot file would carry it. */
export function viaJson<T>(value: T): T {
  return JSON.parse(JSON.stringify(value)) as T;
}

/** What a compacted topic keeps: the latest entry per key (tombstones included), in the order of those latest writes. */
export function compacted(log: readonly StateEntry[]): StateEntry[] {
  const latest = new Map<string, StateEntry>();
  for (const entry of log) {
    latest.delete(entry.key);
    latest.set(entry.key, entry);
  }
  return [...latest.values()];
}

/** The error a function throws, for checking its code and context. */
export function thrown(fn: () => unknown): { code?: string; message: string; context?: Record<string, unknown> } {
  try {
    fn();
  } catch (error) {
    return error as { code?: string; message: string; context?: Record<string, unknown> };
  }
  throw new Error("expected an error, nothing was thrown");
}

/** A committed store in memory: the engine's local store does the same over LMDB. */
export class MemorySource implements StateSource {
  readonly map = new Map<string, unknown>();
  commit(entries: readonly StateEntry[]): void {
    for (const e of viaJson(entries)) {
      if (e.value === null) this.map.delete(e.key);
      else this.map.set(e.key, e.value);
    }
  }
  get(key: string): unknown {
    return this.map.get(key);
  }
  #sorted(): string[] {
    return [...this.map.keys()].filter((k) => k !== META_KEY).sort();
  }
  *prefixed(prefix: string, after?: string): Iterable<StateEntry> {
    for (const key of this.#sorted()) if (key.startsWith(prefix) && (after === undefined || key > after)) yield { key, value: this.map.get(key) };
  }
  firstKeyFrom(from: string): string | undefined {
    return this.#sorted().find((k) => k >= from);
  }
  get keys(): number {
    return this.#sorted().length;
  }
}
