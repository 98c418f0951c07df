import * as v from "valibot";
import type { Row } from "../expr/index.ts";
import { aggregateList, Aggregates, type Slots } from "./aggregates.ts";
import { checkEventTime } from "./event-time.ts";
import { type GroupKey, groupKey, readGroup, writeGroup } from "./group-key.ts";
import { MinHeap } from "./min-heap.ts";
import { type CompiledOperator, NO_OUTPUT, type OperatorContext, type OperatorOutput } from "./operator.ts";
import { type Entity, OperatorState, StatefulOperator } from "./operator-state.ts";
import type { StateReader } from "./state-values.ts";
import { allowedLatenessMs, checkDistinctColumns, emitMode, checkInputs, groupBy, groupByColumns, groupedOperator, invalidStep, milliseconds, timeColumn } from "./step-fields.ts";

export const sessionAggregateSchema = v.strictObject({
  op: v.literal("sessionAggregate"),
  timeColumn,
  /** A session closes after this much event-time inactivity. */
  gapMs: milliseconds("gapMs", 1),
  allowedLatenessMs,
  groupBy,
  aggs: aggregateList,
  emit: emitMode,
});

export type SessionAggregateDef = v.InferOutput<typeof sessionAggregateSchema>;

const OP = "sessionAggregate";

/**
 * `{ op = "sessionAggregate", timeColumn = "ts", gapMs = 30000, groupBy = ["user"], aggs = [...] }`:
 * per group, sessions of rows less than gapMs apart; one row per session once the watermark
 * reaches its last event + gapMs.
 *
 * @example
 * const op = compileSessionAggregate({ op: "sessionAggregate", timeColumn: "ts", gapMs: 10, allowedLatenessMs: 0, groupBy: [], aggs: [{ op: "count" }] }, { stage: 0, step: 0, inputs: 1 }).create();
 * op.process({ ts: 0 }, 0, 0);
 * op.process({ ts: 5 }, 5, 0);
 * op.advance(15); // [{ sessionStart: 0, sessionEnd: 15, count: 2 }]
 */
export function compileSessionAggregate(def: SessionAggregateDef, ctx: OperatorContext): CompiledOperator {
  checkInputs(OP, ctx, "one or more");
  const aggs = new Aggregates(def.aggs);
  aggs.list.forEach((a, i) => {
    if (!a.mergeable) {
      throw invalidStep(OP, ctx, `aggs.${i}.op`, `${a.op} depends on arrival order, so two sessions a row bridges cannot be merged; use it in windowedAggregate`);
    }
  });
  checkDistinctColumns(OP, ctx, [
    { name: "sessionStart", field: "sessionStart" },
    { name: "sessionEnd", field: "sessionEnd" },
    ...groupByColumns(def.groupBy),
    ...aggs.list.map((a, i) => ({ name: a.alias, field: `aggs.${i}.alias` })),
  ]);
  const config: SessionConfig = { gapMs: def.gapMs, aggs, group: groupKey(def.groupBy), update: def.emit === "update" };
  return groupedOperator(OP, def, ctx, () => new SessionAggregate(config));
}

interface SessionConfig {
  gapMs: number;
  aggs: Aggregates;
  group: GroupKey;
  /** emit = "update": a row per change (the session as it stands, merges included), none at close. */
  update: boolean;
}

interface Session {
  start: number;
  /** The latest event time in the session; it closes at last + gapMs. */
  last: number;
  seq: number;
  acc: Slots;
  /** False once fired or merged into another session (its timers are then stale). */
  open: boolean;
}

/** One group's open sessions, sorted by start. Key: `s:<group key JSON>`. */
interface Group extends Entity {
  /** The group's in-memory identity (see GroupKey.idOf). */
  readonly id: unknown;
  readonly group: unknown[];
  sessions: Session[];
}

interface Timer {
  end: number;
  seq: number;
  group: Group;
  session: Session;
}

class SessionAggregate extends StatefulOperator<Group> {
  readonly #c: SessionConfig;
  protected readonly state: OperatorState<Group>;
  readonly #groups = new Map<unknown, Group>();
  // One timer per session end; a session that grew or merged leaves stale timers, skipped when they pop.
  readonly #timers = new MinHeap<Timer>((a, b) => a.end < b.end || (a.end === b.end && a.seq < b.seq));
  readonly #values: unknown[];

  constructor(config: SessionConfig) {
    super();
    this.#c = config;
    this.#values = new Array(config.aggs.size);
    this.state = new OperatorState<Group>(OP, {
      decode: (r, value) => this.#decode(r, value),
      encode: (g) => ({
        group: g.group,
        seq: g.seq,
        sessions: g.sessions.map((s) => ({ start: s.start, last: s.last, seq: s.seq, acc: this.#c.aggs.encode(s.acc) })),
      }),
      clear: () => {
        this.#groups.clear();
        this.#timers.clear();
      },
      load: (groups) => {
        for (const g of groups) {
          this.#groups.set(g.id, g);
          for (const s of g.sessions) this.#timers.push({ end: s.last + this.#c.gapMs, seq: s.seq, group: g, session: s });
        }
      },
      live: () => this.#groups.values(),
    });
  }

  process(row: Row, eventTime: number, _input: number): OperatorOutput {
    this.state.begin();
    checkEventTime(eventTime);
    const { aggs, gapMs } = this.#c;
    // 1. Read and check every aggregate input, so a poison row changes nothing.
    aggs.read(row, this.#values);
    // 2. Find the open sessions the row falls into: less than gapMs from their first or last event.
    const id = this.#c.group.idOfRow(row);
    const g = this.#groups.get(id);
    const sessions = g?.sessions ?? [];
    let first = -1;
    let count = 0;
    for (let i = 0; i < sessions.length; i++) {
      const s = sessions[i]!;
      if (eventTime > s.start - gapMs && eventTime < s.last + gapMs) {
        if (first < 0) first = i;
        count++;
      }
    }
    // 3. None: a new session, unless the watermark already closed it (the row is late).
    if (count === 0 && eventTime + gapMs <= this.state.watermark) return { rows: [], late: [row] };
    const group = g ?? this.#newGroup(id, row);
    let session: Session;
    if (count === 0) {
      session = { start: eventTime, last: eventTime, seq: this.state.nextSeq(), acc: aggs.create(), open: true };
      let at = 0;
      while (at < group.sessions.length && group.sessions[at]!.start < eventTime) at++;
      group.sessions.splice(at, 0, session);
    } else {
      // 4. The row bridges `count` sessions (they are adjacent in start order): merge them into the first.
      session = group.sessions[first]!;
      for (let k = 1; k < count; k++) {
        const other = group.sessions[first + k]!;
        aggs.merge(session.acc, other.acc);
        if (other.last > session.last) session.last = other.last;
        if (other.seq < session.seq) session.seq = other.seq;
        other.open = false;
      }
      if (count > 1) group.sessions.splice(first + 1, count - 1);
    }
    // 5. Add the row and set the timer for the session's new end.
    const endBefore = count === 0 ? -Infinity : session.last + gapMs;
    if (eventTime < session.start) session.start = eventTime;
    if (eventTime > session.last) session.last = eventTime;
    aggs.add(session.acc, this.#values, eventTime);
    const end = session.last + gapMs;
    if (end !== endBefore || count > 1) this.#timers.push({ end, seq: session.seq, group, session });
    if (g === undefined) this.state.created(group);
    else this.state.touched(group);
    return this.#c.update ? { rows: [this.#result(group, session)], late: [] } : NO_OUTPUT;
  }

  advance(watermark: number): Row[] {
    this.state.begin();
    if (!this.state.advanceTo(watermark)) return [];
    const out: Row[] = [];
    const gapMs = this.#c.gapMs;
    for (let t = this.#timers.peek(); t !== undefined && t.end <= watermark; t = this.#timers.peek()) {
      this.#timers.pop();
      const { group, session } = t;
      if (!session.open || session.last + gapMs !== t.end || session.seq !== t.seq) continue;
      session.open = false;
      if (!this.#c.update) out.push(this.#result(group, session));
      group.sessions.splice(group.sessions.indexOf(session), 1);
      if (group.sessions.length === 0) {
        this.#groups.delete(group.id);
        this.state.removed(group);
      } else {
        this.state.touched(group);
      }
    }
    return out;
  }

  read(group: readonly unknown[]): Row[] {
    this.state.ready();
    const g = this.#groups.get(this.#c.group.idOf(group));
    return g === undefined ? [] : g.sessions.filter((s) => s.open).map((s) => this.#result(g, s));
  }

  *groups(): Iterable<readonly unknown[]> {
    this.state.ready();
    for (const g of this.#groups.values()) yield g.group;
  }

  override stateKeys(): number {
    this.state.ready();
    return this.#groups.size;
  }

  stateSize(): { keys: number; bytes: number } {
    this.state.ready();
    let bytes = 0;
    for (const g of this.#groups.values()) {
      bytes += 96 + 4 * g.key.length;
      for (const s of g.sessions) bytes += 64 + this.#c.aggs.bytes(s.acc);
    }
    return { keys: this.#groups.size, bytes };
  }

  #newGroup(id: unknown, row: Row): Group {
    const values = this.#c.group.values(row);
    const group: Group = { key: `s:${this.#c.group.textOf(values)}`, seq: this.state.nextSeq(), persisted: false, dirty: false, removed: false, id, group: values, sessions: [] };
    this.#groups.set(id, group);
    return group;
  }

  #result(g: Group, s: Session): Row {
    const out: Row = { sessionStart: s.start, sessionEnd: s.last + this.#c.gapMs };
    writeGroup(out, this.#c.group.columns, g.group);
    this.#c.aggs.results(s.acc, out);
    return out;
  }

  #decode(r: StateReader, value: unknown): Group {
    const o = r.object(value, "a session group");
    const group = readGroup(r, o.group, this.#c.group);
    const sessions = r.list(o.sessions, "sessions").map((raw): Session => {
      const s = r.object(raw, "a session");
      const start = r.number(s.start, "session start");
      const last = r.number(s.last, "session last");
      if (last < start) r.fail("a session ends before it starts");
      return { start, last, seq: r.integer(s.seq, "session seq"), acc: this.#c.aggs.decode(r, s.acc), open: true };
    });
    if (sessions.length === 0) r.fail("a session group with no session");
    sessions.sort((a, b) => a.start - b.start);
    return { key: `s:${this.#c.group.textOf(group)}`, seq: r.integer(o.seq, "seq"), persisted: true, dirty: false, removed: false, id: this.#c.group.idOf(group), group, sessions };
  }
}
