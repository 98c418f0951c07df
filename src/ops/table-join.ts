/**
 * `tableJoin`: each row of a stream joined to the current row of a table, the latest value per
 * key of a (compacted) topic, as Kafka Streams' KStream-KTable join. A stage with two inputs, one
 * of them named by `table`. Table records are keyed by their message key (a tombstone, a record
 * without a value, deletes the key); a stream row's key is its `on` columns as message-key text
 * (one string column: the string; otherwise JSON), so `sym = "ACME"` finds the table record
 * keyed `ACME`.
 *
 * - `asOf = "processingTime"` (default): the table as this member has read it when the stream row
 *   is processed (Kafka Streams without a versioned store).
 * - `asOf = "eventTime"`: the table version in force at the stream row's event time, from a
 *   history of `historyMs` per key (Kafka Streams' versioned stores, Quix's join_asof). Table
 *   rows then need the time column too.
 *
 * State: one entity per table key, `t:<key>`, holding its versions.
 */
import * as v from "valibot";
import type { Row } from "../expr/index.ts";
import { FvError } from "../errors.ts";
import { eventTimeOf } from "./event-time.ts";
import { groupKeyText } from "./group-key.ts";
import { type CompiledOperator, NO_OUTPUT, type OperatorContext, type OperatorOutput } from "./operator.ts";
import { type Entity, OperatorState, StatefulOperator } from "./operator-state.ts";
import { approxBytes, type StateReader } from "./state-values.ts";
import { allowedLatenessMs, columnName, invalidStep, milliseconds, timeColumn } from "./step-fields.ts";

const keyColumns = v.union(
  [columnName, v.pipe(v.array(columnName), v.minLength(1, "list at least one key column"))],
  "on is a column name or a list of them",
);

export const tableJoinSchema = v.strictObject({
  op: v.literal("tableJoin"),
  /** The input dataset that is the table (default: the stage's second input). */
  table: v.optional(v.pipe(v.string("table names one of the stage's inputs"), v.minLength(1, "table names one of the stage's inputs"))),
  /** The stream's column(s) whose value is the table's key. */
  on: keyColumns,
  timeColumn,
  type: v.optional(v.picklist(["inner", "left"], 'type is "inner" or "left"'), "inner"),
  /** Table columns added to the stream row (default: all); a left join must list them. */
  columns: v.optional(v.array(columnName, "columns is a list of the table's columns")),
  /** Put before each table column's name (default none). */
  prefix: v.optional(v.string("prefix is a string"), ""),
  asOf: v.optional(v.picklist(["processingTime", "eventTime"], 'asOf is "processingTime" or "eventTime"'), "processingTime"),
  /** asOf = "eventTime": how far behind its newest version a key's older versions are kept. */
  historyMs: v.optional(milliseconds("historyMs", 0)),
  /** Every member reads the whole table (Kafka Streams' GlobalKTable): no co-partitioning needed. */
  global: v.optional(v.boolean("global is true or false"), false),
  allowedLatenessMs,
});

export type TableJoinDef = v.InferOutput<typeof tableJoinSchema>;

const OP = "tableJoin";

/** What the engine needs beyond a CompiledOperator: which input is the table, and whether it is global. */
export interface CompiledTableJoin extends CompiledOperator {
  readonly tableInput: number;
  readonly global: boolean;
  /** global = true: the table every partition's operator looks rows up in; the engine fills it (src/loop/global-tables.ts). */
  readonly globalTable?: GlobalTable;
}

/**
 * A global table's rows by key, as the engine reads them from every partition of the table
 * topic. A key lives in one partition, so the row at the highest offset is its latest: a write
 * from an older offset (another reader behind this one) is ignored, and a tombstone is kept as
 * such so that nothing older brings the key back.
 */
export class GlobalTable {
  readonly #rows = new Map<string, { row: Row | null; partition: number; offset: bigint }>();

  put(key: string, row: Row | null, partition: number, offset: bigint): void {
    const known = this.#rows.get(key);
    if (known !== undefined && known.partition === partition && known.offset >= offset) return;
    this.#rows.set(key, { row, partition, offset });
  }

  get(key: string): Row | undefined {
    return this.#rows.get(key)?.row ?? undefined;
  }

  get size(): number {
    return this.#rows.size;
  }
}

/**
 * @example
 * const op = compileTableJoin(v.parse(tableJoinSchema, { op: "tableJoin", on: "sym", timeColumn: "ts" }), { stage: 0, step: 0, inputs: 2 }).create();
 * op.process({ sym: "ACME", price: 12 }, 0, 1, "ACME"); // the table
 * op.process({ sym: "ACME", ts: 5, qty: 3 }, 5, 0).rows; // [{ sym: "ACME", ts: 5, qty: 3, price: 12 }]
 */
export function compileTableJoin(def: TableJoinDef, ctx: OperatorContext): CompiledTableJoin {
  if (ctx.inputs !== 2) throw invalidStep(OP, ctx, "op", `a tableJoin stage has two inputs, the stream and the table; this one has ${ctx.inputs}`);
  let tableInput = 1;
  if (def.table !== undefined) {
    const names = ctx.inputNames ?? [];
    tableInput = names.indexOf(def.table);
    if (tableInput < 0) throw invalidStep(OP, ctx, "table", `"${def.table}" is not an input of this stage (its inputs: ${names.map((n) => `"${n}"`).join(", ")})`);
  }
  if (def.type === "left" && def.columns === undefined) {
    throw invalidStep(OP, ctx, "columns", 'a left join fills the table columns with null when a stream row finds no table row: list them, e.g. columns = ["price"]');
  }
  if (def.historyMs !== undefined && def.asOf !== "eventTime") throw invalidStep(OP, ctx, "historyMs", 'historyMs goes with asOf = "eventTime"');
  if (def.global && def.asOf === "eventTime") throw invalidStep(OP, ctx, "asOf", 'a global table is joined as of processing time: drop asOf, or global');
  const on = typeof def.on === "string" ? [def.on] : [...def.on];
  const globalTable = def.global ? new GlobalTable() : undefined;
  const config: TableJoinConfig = {
    globalTable,
    on,
    tableInput,
    leftJoin: def.type === "left",
    columns: def.columns,
    prefix: def.prefix,
    timeColumn: def.timeColumn,
    asOf: def.asOf === "eventTime" ? (def.historyMs ?? 24 * 3600 * 1000) : undefined,
  };
  return {
    op: OP,
    timeColumn: def.timeColumn,
    allowedLatenessMs: def.allowedLatenessMs,
    keyColumns: on,
    // The table is keyed by its message key: only the stream is re-keyed when it needs to be (and
    // not at all against a global table, which every partition sees whole).
    inputKeyColumns: def.global ? [[], []] : tableInput === 1 ? [on, []] : [[], on],
    tableInput,
    global: def.global,
    ...(globalTable ? { globalTable } : {}),
    // Processing time needs no event time of the table's rows; as of event time, they must carry one.
    eventTime: (row, input) => (input === tableInput && config.asOf === undefined && row[def.timeColumn] == null ? 0 : eventTimeOf(row, def.timeColumn)),
    create: () => new TableJoin(config),
  };
}

interface TableJoinConfig {
  /** global = true: the rows are looked up here, not kept in the operator's state. */
  globalTable: GlobalTable | undefined;
  on: string[];
  tableInput: number;
  leftJoin: boolean;
  columns: string[] | undefined;
  prefix: string;
  timeColumn: string;
  /** asOf = "eventTime": the history kept per key (ms); undefined: processing time, the latest version only. */
  asOf: number | undefined;
}

/** A table key's versions, oldest first (one, the latest, as of processing time). Key: `t:<key text>`. */
interface TableKey extends Entity {
  readonly text: string;
  /** A null row: deleted as of that time (a tombstone, as of event time). */
  versions: Array<{ time: number; row: Row | null }>;
}

class TableJoin extends StatefulOperator<TableKey> {
  readonly #c: TableJoinConfig;
  protected readonly state: OperatorState<TableKey>;
  readonly #table = new Map<string, TableKey>();
  #bytes = 0;

  constructor(config: TableJoinConfig) {
    super();
    this.#c = config;
    this.state = new OperatorState<TableKey>(OP, {
      decode: (r, value) => this.#decode(r, value),
      encode: (k) => ({ key: k.text, seq: k.seq, versions: k.versions.map((x) => [x.time, x.row]) }),
      clear: () => {
        this.#table.clear();
        this.#bytes = 0;
      },
      load: (keys) => {
        for (const k of keys) {
          this.#table.set(k.text, k);
          for (const x of k.versions) this.#bytes += approxBytes(x.row);
        }
      },
      live: () => this.#table.values(),
    });
  }

  process(row: Row, eventTime: number, input: number, key?: string | null): OperatorOutput {
    this.state.begin();
    const c = this.#c;
    if (input === c.tableInput) {
      // A table row: its message key (a library caller without one: the row's `on` columns).
      const text = key === undefined ? groupKeyText(c.on.map((col) => row[col] ?? null)) : key;
      if (text === null) throw nullKey("a table record has no key: the table's records are keyed by their message key");
      this.#upsert(text, eventTime, row);
      return NO_OUTPUT;
    }
    // A stream row: its key, then the table's row for it.
    const values = c.on.map((col) => row[col] ?? null);
    if (values.every((x) => x === null)) throw nullKey(`the stream row's ${c.on.join(", ")} ${c.on.length > 1 ? "are" : "is"} null: it cannot find a table row`);
    const text = groupKeyText(values);
    let found: Row | undefined;
    if (c.globalTable !== undefined) found = c.globalTable.get(text);
    else {
      const entry = this.#table.get(text);
      found = entry === undefined ? undefined : this.#versionAt(entry, eventTime);
    }
    if (found === undefined && !c.leftJoin) return NO_OUTPUT;
    return { rows: [this.#joined(row, found)], late: [] };
  }

  /**
   * A table tombstone: the key is gone (as of event time: from `time`, the record's timestamp,
   * on, as Kafka Streams' versioned stores keep it; a stream row before it still finds the older
   * version).
   */
  tombstone(key: string, _input: number, time?: number): OperatorOutput {
    this.state.begin();
    const entry = this.#table.get(key);
    if (entry === undefined) return NO_OUTPUT;
    if (this.#c.asOf !== undefined && time !== undefined) {
      this.#upsert(key, time, null);
      return NO_OUTPUT;
    }
    this.#forget(entry);
    return NO_OUTPUT;
  }

  #forget(entry: TableKey): void {
    this.#table.delete(entry.text);
    for (const x of entry.versions) this.#bytes -= approxBytes(x.row);
    this.state.removed(entry);
  }

  /** Nothing fires by time: a stream row is joined when it arrives. */
  advance(watermark: number): Row[] {
    this.state.begin();
    this.state.advanceTo(watermark);
    return [];
  }

  read(group: readonly unknown[]): Row[] {
    this.state.ready();
    const entry = this.#table.get(groupKeyText(group));
    const latest = entry?.versions.at(-1)?.row;
    return latest === undefined || latest === null ? [] : [latest];
  }

  *groups(): Iterable<readonly unknown[]> {
    this.state.ready();
    for (const k of this.#table.values()) yield [k.text];
  }

  stateSize(): { keys: number; bytes: number } {
    this.state.ready();
    return { keys: this.#table.size, bytes: this.#bytes + 96 * this.#table.size };
  }

  #upsert(text: string, time: number, row: Row | null): void {
    const c = this.#c;
    let entry = this.#table.get(text);
    const created = entry === undefined;
    if (entry === undefined) {
      entry = { key: `t:${text}`, seq: this.state.nextSeq(), persisted: false, dirty: false, removed: false, text, versions: [] };
      this.#table.set(text, entry);
    }
    const versions = entry.versions;
    if (c.asOf === undefined) {
      for (const x of versions) this.#bytes -= approxBytes(x.row);
      entry.versions = [{ time, row }];
    } else {
      // In time order; the same time replaces. Then the versions older than the history, but the
      // one in force at its start.
      let at = versions.length;
      while (at > 0 && versions[at - 1]!.time > time) at--;
      if (at > 0 && versions[at - 1]!.time === time) {
        this.#bytes -= approxBytes(versions[at - 1]!.row);
        versions[at - 1] = { time, row };
      } else {
        versions.splice(at, 0, { time, row });
      }
      const horizon = versions.at(-1)!.time - c.asOf;
      let drop = 0;
      while (drop + 1 < versions.length && versions[drop + 1]!.time <= horizon) drop++;
      for (let i = 0; i < drop; i++) this.#bytes -= approxBytes(versions[i]!.row);
      if (drop > 0) versions.splice(0, drop);
      // Only a tombstone left: nothing in the history to find any more.
      if (versions.length === 1 && versions[0]!.row === null) {
        if (created) this.#table.delete(text);
        else this.#forget(entry);
        return;
      }
    }
    this.#bytes += approxBytes(row);
    if (created) this.state.created(entry);
    else this.state.touched(entry);
  }

  /** The version in force at `time` (as of processing time: the latest); undefined when none, or deleted then. */
  #versionAt(entry: TableKey, time: number): Row | undefined {
    const versions = entry.versions;
    if (this.#c.asOf === undefined) return versions.at(-1)?.row ?? undefined;
    for (let i = versions.length - 1; i >= 0; i--) if (versions[i]!.time <= time) return versions[i]!.row ?? undefined;
    return undefined;
  }

  #joined(row: Row, table: Row | undefined): Row {
    const { columns, prefix } = this.#c;
    const out: Row = { ...row };
    if (columns !== undefined) {
      for (const col of columns) out[prefix + col] = table === undefined ? null : (table[col] ?? null);
    } else if (table !== undefined) {
      // Every table column the stream row does not have already (the key columns, say).
      for (const col of Object.keys(table)) if (!(prefix + col in out)) out[prefix + col] = table[col]!;
    }
    return out;
  }

  #decode(r: StateReader, value: unknown): TableKey {
    const o = r.object(value, "a table key");
    const text = r.string(o.key, "key");
    if (r.key !== `t:${text}`) r.fail("the value belongs to another key");
    const versions = r.list(o.versions, "versions").map((raw) => {
      const pair = r.list(raw, "a version");
      if (pair.length !== 2) r.fail("a version is [time, row]");
      return { time: r.number(pair[0], "a version's time"), row: pair[1] === null ? null : r.row(pair[1], "a version's row") };
    });
    if (versions.length === 0) r.fail("a table key with no version");
    const seq = r.integer(o.seq, "seq");
    if (seq < 0) r.fail("seq is negative");
    return { key: r.key, seq, persisted: true, dirty: false, removed: false, text, versions };
  }
}

function nullKey(message: string): FvError {
  return new FvError("POISON_ROW", `${OP}: ${message}`, { context: { reason: "null_key" } });
}
