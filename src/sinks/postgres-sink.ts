/**
 * `sink = "postgres"`: each checkpoint's rows upserted on the key into one table, in ONE SQL
 * transaction that also writes the input offsets they cover into `fv_sink_offsets`, the way Kafka
 * Connect's JDBC sinks keep offsets in the database. The database is then the truth about how far
 * the stream got: a restarted member skips what the table already holds (see SinkSet), so rows
 * are written once even when Kafka's own commit did not happen (kill -9 between the two).
 * The client is `postgres` (porsager/postgres), which runs on Bun, Deno and Node.
 */
import postgres from "postgres";
import { FvError } from "../errors.ts";
import type { Logger } from "../logger.ts";
import type { CommitOffset, OutboundRecord, TopicPartition } from "../kafka/port.ts";
import { type PostgresSinkConfig, redactedUrl } from "./config.ts";
import { DeadLetters, type Refused, type Sink, type SinkRow, type SinkWritten } from "./sink.ts";

/** The table of offsets, one row per (pipeline, sink, topic, partition). */
export const OFFSETS_TABLE = "fv_sink_offsets";
/** Rows per INSERT statement, at most: Postgres takes at most 65,535 parameters in one (see #upsert). */
const ROWS_PER_STATEMENT = 1000;
const PARAMETERS_PER_STATEMENT = 65_000;
/** How often the table's columns are read again while rows carry a field the table has no column for. */
const COLUMNS_MS = 30_000;

type Sql = postgres.Sql;
type Column = { name: string; type: string };

export interface PostgresSinkOptions {
  pipeline: string;
  dataset: string;
  log: Logger;
  /** How often the columns are read again while rows carry a field without one (default COLUMNS_MS). */
  columnsMs?: number;
}

export class PostgresSink implements Sink {
  readonly kind = "postgres";
  readonly dataset: string;
  readonly #config: PostgresSinkConfig;
  readonly #pipeline: string;
  readonly #log: Logger;
  readonly #sql: Sql;
  readonly #schema: string;
  readonly #table: string;
  /** The table's columns once known (read, or created from the first rows). */
  #columns: Column[] | undefined;
  #offsetsTableReady = false;
  /** Fields of rows that the table has no column for, each warned about once. */
  readonly #unknownFields = new Set<string>();
  /** When the columns were last read: a field without a column reads them again after COLUMNS_MS (an ALTER TABLE meanwhile). */
  #columnsReadAt = 0;
  readonly #columnsMs: number;
  readonly #deadLetters = new DeadLetters();
  /**
   * "topic:partition" → the epoch this member claimed it at (`claim`, before the partition's first
   * records since its assignment, bumped `fv_sink_offsets.epoch`). A write checks its partitions' epochs
   * first, row-locked: a bumped one means another member owns it now (this one is a zombie).
   */
  readonly #claimed = new Map<string, bigint>();

  constructor(config: PostgresSinkConfig, options: PostgresSinkOptions) {
    this.#config = config;
    this.dataset = options.dataset;
    this.#pipeline = options.pipeline;
    this.#log = options.log;
    this.#columnsMs = options.columnsMs ?? COLUMNS_MS;
    const [schema, table] = config.table.includes(".") ? config.table.split(".") as [string, string] : ["public", config.table];
    this.#schema = schema;
    this.#table = table;
    // Two connections: a checkpoint's transaction, and a positions read next to it.
    // A lock held elsewhere (a session idle in a transaction) must not hold the stream forever: a
    // statement or lock wait past these is cancelled, and the checkpoint tried again (unavailable).
    this.#sql = postgres(config.url, {
      max: 2,
      onnotice: () => {},
      connect_timeout: 10,
      idle_timeout: 60,
      max_lifetime: null,
      connection: { statement_timeout: 60_000, lock_timeout: 30_000, idle_in_transaction_session_timeout: 120_000 },
    });
  }

  /** `fv_sink_offsets` in the sink table's schema (where the sink's user may create tables). */
  get #offsetsTable(): string {
    return `${this.#schema}.${OFFSETS_TABLE}`;
  }

  get #where(): string {
    return `postgres sink "${this.dataset}" (${redactedUrl(this.#config.url)}, table ${this.#schema}.${this.#table})`;
  }

  async positions(): Promise<Map<string, bigint>> {
    return await this.#guard(async () => {
      await this.#ensureOffsetsTable();
      const rows = await this.#sql<Array<{ topic: string; partition: number; next_offset: string }>>`
        SELECT topic, partition, next_offset FROM ${this.#sql(this.#offsetsTable)} WHERE pipeline = ${this.#pipeline} AND sink = ${this.dataset}`;
      return new Map(rows.map((r) => [`${r.topic}:${r.partition}`, BigInt(r.next_offset)]));
    });
  }

  /**
   * Claims the input partitions not claimed yet (each one's epoch up by one), before any of their
   * records is processed: a member paused after that, even before its first write, finds its claim
   * taken when it writes. The claim waits for an open transaction of the partition's last owner
   * (its row lock), so a positions read after it sees what that owner wrote.
   */
  async claim(partitions: readonly TopicPartition[]): Promise<void> {
    const fresh = sortedPartitions(partitions).filter((tp) => !this.#claimed.has(`${tp.topic}:${tp.partition}`));
    if (fresh.length === 0) return;
    await this.#guard(async () => {
      await this.#ensureOffsetsTable();
      this.#claim(await this.#sql.begin((tx) => this.#claimIn(tx, fresh)));
    });
  }

  /** Partitions assigned or revoked: claimed again before their next records (a new epoch). */
  release(partitions: readonly TopicPartition[]): void {
    for (const { topic, partition } of partitions) this.#claimed.delete(`${topic}:${partition}`);
  }

  /** A new session: every partition is claimed again. */
  releaseAll(): void {
    this.#claimed.clear();
  }

  async write(rows: readonly SinkRow[], offsets: readonly CommitOffset[], deadLetter: (records: OutboundRecord[]) => Promise<void>, inputs: readonly TopicPartition[] = offsets): Promise<SinkWritten> {
    return await this.#guard(async () => {
      await this.#ensureOffsetsTable();
      const keyed: SinkRow[] = [];
      const noKey: Refused[] = [];
      for (const row of rows) {
        const missing = this.#config.key.find((column) => row.row[column] === undefined || row.row[column] === null);
        if (missing === undefined) keyed.push(row);
        else noKey.push({ row, reason: "sink_rejected", message: `${this.#where}: the row has no value for key column "${missing}"` });
      }
      if (keyed.length > 0) await this.#ensureTable(keyed);
      const upserts = mergedByKey(keyed, this.#config.key);
      const send = (refused: readonly Refused[]) => this.#deadLetters.send(refused, `postgres:${this.#schema}.${this.#table}`, deadLetter);
      const partitions = sortedPartitions(inputs, offsets);
      try {
        const claims = await this.#sql.begin(async (tx) => {
          const claims = await this.#fence(tx, partitions);
          for (const chunk of this.#chunks(upserts)) await this.#upsert(tx, chunk);
          await send(noKey);
          await this.#saveOffsets(tx, offsets);
          return claims;
        });
        this.#claim(claims);
        return { written: upserts.length, duplicates: 0, refused: noKey };
      } catch (error) {
        if (!isRowError(error)) throw error;
      }
      // A row the database refused failed the whole transaction: again, one row at a time, each
      // behind a savepoint, so only the refused rows are left out (and dead-lettered).
      let written = 0;
      const refused = [...noKey];
      const claims = await this.#sql.begin(async (tx) => {
        const claims = await this.#fence(tx, partitions);
        for (const row of upserts) {
          try {
            await tx.savepoint((sp) => this.#upsert(sp, [row]));
            written++;
          } catch (error) {
            if (!isRowError(error)) throw error;
            refused.push({ row, reason: "sink_rejected", message: `${this.#where} refused the row: ${(error as Error).message} (SQLSTATE ${(error as { code?: string }).code})` });
          }
        }
        await send(refused);
        await this.#saveOffsets(tx, offsets);
        return claims;
      });
      this.#claim(claims);
      return { written, duplicates: 0, refused };
    });
  }

  /**
   * In the checkpoint's transaction, before its rows: the partitions claimed before must still
   * have this member's epoch (their rows locked until the commit, so a new owner's claim waits for
   * it and then sees what it wrote); the others are claimed now, their epoch bumped. Another
   * member's claim since ours: SINK_FENCED, and nothing of this transaction is written. Answers
   * the new claims, kept once the transaction commits.
   */
  async #fence(tx: postgres.TransactionSql, partitions: readonly TopicPartition[]): Promise<Array<[string, bigint]>> {
    const held = partitions.filter((tp) => this.#claimed.has(`${tp.topic}:${tp.partition}`));
    const fresh = partitions.filter((tp) => !this.#claimed.has(`${tp.topic}:${tp.partition}`));
    const table = tx(this.#offsetsTable);
    if (held.length > 0) {
      const found = await tx<Array<{ topic: string; partition: number; epoch: string }>>`
        SELECT topic, partition, epoch FROM ${table}
        WHERE pipeline = ${this.#pipeline} AND sink = ${this.dataset}
          AND (topic, partition) IN (SELECT * FROM unnest(${held.map((tp) => tp.topic)}::text[], ${held.map((tp) => tp.partition)}::int[]))
        ORDER BY topic, partition FOR UPDATE`;
      const now = new Map(found.map((r) => [`${r.topic}:${r.partition}`, BigInt(r.epoch)]));
      const taken = held.filter((tp) => now.get(`${tp.topic}:${tp.partition}`) !== this.#claimed.get(`${tp.topic}:${tp.partition}`));
      if (taken.length > 0) {
        throw new FvError("SINK_FENCED", `${this.#where}: another member claimed ${taken.map((tp) => `${tp.topic}:${tp.partition}`).join(", ")} since this one did (this member was paused or cut off while the group moved on); its rows are not written, and it rejoins the group`, { context: { sink: this.dataset } });
      }
    }
    // Not claimed before its records were processed (rows a timer fired for a task restored
    // without new records): claimed now.
    return await this.#claimIn(tx, fresh);
  }

  /** Bumps the epochs of `partitions` (sorted) in `tx`: this member's claims, once it commits. */
  async #claimIn(tx: postgres.TransactionSql, partitions: readonly TopicPartition[]): Promise<Array<[string, bigint]>> {
    if (partitions.length === 0) return [];
    const table = tx(this.#offsetsTable);
    const values = partitions.map((tp) => ({ pipeline: this.#pipeline, sink: this.dataset, topic: tp.topic, partition: tp.partition, next_offset: "0", epoch: "1" }));
    const claimed = await tx<Array<{ topic: string; partition: number; epoch: string }>>`
      INSERT INTO ${table} ${tx(values, "pipeline", "sink", "topic", "partition", "next_offset", "epoch")}
      ON CONFLICT (pipeline, sink, topic, partition) DO UPDATE SET epoch = ${table}.epoch + 1
      RETURNING topic, partition, epoch`;
    return claimed.map((r) => [`${r.topic}:${r.partition}`, BigInt(r.epoch)]);
  }

  #claim(claims: ReadonlyArray<[string, bigint]>): void {
    for (const [key, epoch] of claims) this.#claimed.set(key, epoch);
  }

  /** Upserts in statements of at most ROWS_PER_STATEMENT rows, and PARAMETERS_PER_STATEMENT values. */
  #chunks(rows: readonly SinkRow[]): SinkRow[][] {
    const perRow = Math.max(1, this.#columns?.length ?? 1);
    const size = Math.max(1, Math.min(ROWS_PER_STATEMENT, Math.floor(PARAMETERS_PER_STATEMENT / perRow)));
    const out: SinkRow[][] = [];
    for (let i = 0; i < rows.length; i += size) out.push(rows.slice(i, i + size));
    return out;
  }

  async close(): Promise<void> {
    await this.#sql.end({ timeout: 5 }).catch(() => {});
  }

  /**
   * Upserts rows, one statement per set of columns the rows carry: a field a row lacks is neither
   * set to NULL on an existing row nor inserted as NULL instead of the column's default.
   */
  async #upsert(tx: postgres.TransactionSql, rows: readonly SinkRow[]): Promise<void> {
    const groups = new Map<string, { columns: Column[]; rows: SinkRow[] }>();
    for (const row of rows) {
      const columns = this.#columns!.filter((c) => row.row[c.name] !== undefined || this.#config.key.includes(c.name));
      const signature = columns.map((c) => c.name).join("\u0000");
      const group = groups.get(signature) ?? { columns, rows: [] };
      group.rows.push(row);
      groups.set(signature, group);
    }
    const target = this.#sql(`${this.#schema}.${this.#table}`);
    const conflict = this.#sql(this.#config.key);
    for (const { columns, rows: members } of groups.values()) {
      const names = columns.map((c) => c.name);
      const values = members.map((r) => Object.fromEntries(columns.map((c) => [c.name, toParameter(r.row[c.name], c.type)])));
      const updates = names.filter((c) => !this.#config.key.includes(c));
      if (updates.length === 0) {
        await tx`INSERT INTO ${target} ${tx(values, names)} ON CONFLICT (${conflict}) DO NOTHING`;
        continue;
      }
      const set = tx.unsafe(updates.map((c) => `${quoteIdent(c)} = EXCLUDED.${quoteIdent(c)}`).join(", "));
      await tx`INSERT INTO ${target} ${tx(values, names)} ON CONFLICT (${conflict}) DO UPDATE SET ${set}`;
    }
  }

  async #saveOffsets(tx: postgres.TransactionSql, offsets: readonly CommitOffset[]): Promise<void> {
    if (offsets.length === 0) return;
    const values = offsets.map((o) => ({ pipeline: this.#pipeline, sink: this.dataset, topic: o.topic, partition: o.partition, next_offset: String(o.offset) }));
    // Never backwards: a member that lost a partition mid-checkpoint cannot undo its new owner's progress.
    await tx`INSERT INTO ${tx(this.#offsetsTable)} ${tx(values, "pipeline", "sink", "topic", "partition", "next_offset")}
      ON CONFLICT (pipeline, sink, topic, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset, updated_at = now()
      WHERE ${tx(this.#offsetsTable)}.next_offset <= EXCLUDED.next_offset`;
  }

  async #ensureOffsetsTable(): Promise<void> {
    if (this.#offsetsTableReady) return;
    await ignoringRace(() => this.#sql`CREATE TABLE IF NOT EXISTS ${this.#sql(this.#offsetsTable)} (
      pipeline text NOT NULL, sink text NOT NULL, topic text NOT NULL, partition integer NOT NULL,
      next_offset bigint NOT NULL, updated_at timestamptz NOT NULL DEFAULT now(), epoch bigint NOT NULL DEFAULT 0,
      PRIMARY KEY (pipeline, sink, topic, partition))`);
    // A table made by an earlier version has no epoch yet (looked up first: ALTER TABLE would wait for every member's open transaction).
    const epoch = await this.#sql`SELECT 1 FROM information_schema.columns WHERE table_schema = ${this.#schema} AND table_name = ${OFFSETS_TABLE} AND column_name = 'epoch'`;
    if (epoch.length === 0) await ignoringRace(() => this.#sql`ALTER TABLE ${this.#sql(this.#offsetsTable)} ADD COLUMN IF NOT EXISTS epoch bigint NOT NULL DEFAULT 0`);
    this.#offsetsTableReady = true;
  }

  /** Reads the table's columns; a missing table is created from these rows (Kafka Connect's auto.create). */
  async #ensureTable(rows: readonly SinkRow[]): Promise<void> {
    // Rows carried fields the table had no column for: read again now and then (an ALTER TABLE meanwhile).
    if (this.#columns !== undefined && this.#unknownFields.size > 0 && Date.now() - this.#columnsReadAt >= this.#columnsMs) this.#columns = undefined;
    if (this.#columns === undefined) {
      this.#columnsReadAt = Date.now();
      const found = await this.#sql<Column[]>`
        SELECT column_name AS name, data_type AS type FROM information_schema.columns
        WHERE table_schema = ${this.#schema} AND table_name = ${this.#table} ORDER BY ordinal_position`;
      if (found.length > 0) {
        const missingKey = this.#config.key.filter((k) => !found.some((c) => c.name === k));
        if (missingKey.length) throw new FvError("SINK_FAILED", `${this.#where}: the table has no column ${missingKey.map((k) => `"${k}"`).join(", ")} of the sink's key. Fix the dataset's key, or the table`, { context: { field: "key" } });
        this.#columns = [...found];
        for (const c of found) this.#unknownFields.delete(c.name);
      } else {
        this.#columns = await this.#createTable(rows);
      }
    }
    for (const { row } of rows) {
      for (const field of Object.keys(row)) {
        if (this.#unknownFields.has(field) || this.#columns.some((c) => c.name === field)) continue;
        this.#unknownFields.add(field);
        this.#log("warn", `${this.#where}: the table has no column "${field}", so that field of the rows is not written; add the column (ALTER TABLE) to keep it (the sink reads the columns again every ${this.#columnsMs / 1000} s while rows carry one it lacks)`);
      }
    }
  }

  async #createTable(rows: readonly SinkRow[]): Promise<Column[]> {
    const columns = new Map<string, string>();
    for (const { row } of rows) for (const [name, value] of Object.entries(row)) if (!columns.has(name) || columns.get(name) === "text" && value !== null) columns.set(name, sqlTypeOf(value));
    for (const key of this.#config.key) if (!columns.has(key)) columns.set(key, "text");
    const definition = [...columns].map(([name, type]) => `${quoteIdent(name)} ${type}${this.#config.key.includes(name) ? " NOT NULL" : ""}`).join(", ");
    const primaryKey = this.#config.key.map(quoteIdent).join(", ");
    await ignoringRace(() => this.#sql.unsafe(`CREATE TABLE IF NOT EXISTS ${quoteIdent(this.#schema)}.${quoteIdent(this.#table)} (${definition}, PRIMARY KEY (${primaryKey}))`));
    this.#log("info", `${this.#where}: created the table (${[...columns].map(([n, t]) => `${n} ${t}`).join(", ")}; primary key ${this.#config.key.join(", ")})`);
    // Another member may have created it first, from other rows: read what it has.
    const found = await this.#sql<Column[]>`
      SELECT column_name AS name, data_type AS type FROM information_schema.columns
      WHERE table_schema = ${this.#schema} AND table_name = ${this.#table} ORDER BY ordinal_position`;
    return [...found];
  }

  /** Sorts the database's failures: unreachable → SINK_UNAVAILABLE (wait, retry); the stream refused → SINK_FAILED. */
  async #guard<T>(work: () => Promise<T>): Promise<T> {
    try {
      return await work();
    } catch (error) {
      if (error instanceof FvError) throw error;
      const code = String((error as { code?: unknown }).code ?? "");
      const message = (error as Error).message;
      if (isUnavailable(code)) {
        throw new FvError("SINK_UNAVAILABLE", `${this.#where} is unreachable: ${message || code}`, { cause: error, context: { sink: this.dataset } });
      }
      throw new FvError("SINK_FAILED", `${this.#where} refused the stream: ${message}${code ? ` (${code})` : ""}. Check the URL, the user's rights on the table, and that the database exists`, { cause: error, context: { sink: this.dataset } });
    }
  }
}

/**
 * A failure of one row's values: SQLSTATE classes 22 (data exception) and 23 (integrity
 * constraint), a value of another type (42804), two rows of one key in a statement (21000).
 */
function isRowError(error: unknown): boolean {
  const code = String((error as { code?: unknown }).code ?? "");
  return /^2[23]/.test(code) || code === "42804" || code === "21000";
}

/**
 * Try again later: the server went away or cannot take us now (class 08, shutdown 57P0x, too many
 * connections 53300, read-only while a standby is promoted 25006), a transaction that lost a race
 * (deadlock 40P01, serialization 40001), a lock, statement or open transaction that waited too
 * long (55P03, 57014, 25P03), a network or name that is not there now.
 */
function isUnavailable(code: string): boolean {
  return /^08/.test(code) || /^57P0[1-3]$/.test(code) || /^(53300|25006|40P01|40001|55P03|57014|25P03)$/.test(code) ||
    /^(ECONNREFUSED|ECONNRESET|ECONNABORTED|ETIMEDOUT|EPIPE|ENOTFOUND|EAI_AGAIN|EHOSTUNREACH|EHOSTDOWN|ENETUNREACH|CONNECT_TIMEOUT|CONNECTION_CLOSED|CONNECTION_ENDED|CONNECTION_DESTROYED)$/.test(code);
}

/**
 * One row per key (ON CONFLICT may not touch a row twice in one statement). As text: 1 and "1" are
 * one key to a numeric column. A later row of the key sets the fields it carries over the earlier
 * one's, as two upserts one after the other would.
 */
function mergedByKey(rows: readonly SinkRow[], key: readonly string[]): SinkRow[] {
  const latest = new Map<string, SinkRow>();
  for (const row of rows) {
    const k = JSON.stringify(key.map((column) => String(row.row[column])));
    const earlier = latest.get(k);
    latest.set(k, earlier ? { ...row, row: { ...earlier.row, ...row.row } } : row);
  }
  return [...latest.values()];
}

/** Concurrent members may both create a table: the loser's "already exists" is not an error. */
async function ignoringRace(create: () => PromiseLike<unknown>): Promise<void> {
  try {
    await create();
  } catch (error) {
    const code = (error as { code?: string }).code;
    if (code !== "42P07" && code !== "23505") throw error;
  }
}

/** A column type for a new table, from a value (numbers as double precision: JSON's numbers). */
function sqlTypeOf(value: unknown): string {
  if (typeof value === "number") return "double precision";
  if (typeof value === "boolean") return "boolean";
  if (typeof value === "object" && value !== null) return "jsonb";
  return "text";
}

/**
 * A row's value as the column takes it: text columns get text (an object as its JSON), others the
 * value as is (the client serializes it for the column's type: JSON for json and jsonb).
 */
function toParameter(value: unknown, type: string): unknown {
  if (value === undefined || value === null) return null;
  if ((type === "text" || type === "character varying" || type === "character") && typeof value !== "string") return typeof value === "object" ? JSON.stringify(value) : String(value);
  return value;
}

function quoteIdent(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

/** The partitions a write stands for, each once, in one order for every member (row locks taken in it cannot deadlock). */
function sortedPartitions(...lists: ReadonlyArray<readonly TopicPartition[]>): TopicPartition[] {
  const byKey = new Map<string, TopicPartition>();
  for (const list of lists) for (const { topic, partition } of list) byKey.set(`${topic}:${partition}`, { topic, partition });
  return [...byKey.values()].sort((a, b) => (a.topic < b.topic ? -1 : a.topic > b.topic ? 1 : a.partition - b.partition));
}
