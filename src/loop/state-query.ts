/**
 * Queryable state inside the engine: what a consumer loop answers about the state of its
 * stateful stages (one group key, every group key, the partitions it holds), as plain data that
 * crosses a Worker boundary, and the description of each stateful stage. The admin server's
 * /state routes (runtime/admin/state-routes.ts) ask every loop of the process through this.
 */
import type { Row } from "../expr/index.ts";
import type { CompiledTopology } from "../topology/compile-topology.ts";
import type { OperatorTasks } from "./operator-tasks.ts";
import type { StateRead } from "./state-reads.ts";
import type { Peer } from "./members-directory.ts";
import type { StandbyTasks } from "./standby-tasks.ts";

export { type StateRead, StateWatches, watchKeyOf } from "./state-reads.ts";

/** What the admin server asks a loop. `stage` is 0-based here (the HTTP routes are 1-based). */
export type StateQuery =
  /**
   * `retired`: also the state of partitions let go of lately; `standby`: only the standby copies
   * (answers marked stale).
   */
  | { kind: "read"; stage: number; group: unknown[]; retired?: boolean; standby?: boolean }
  | { kind: "groups"; stage: number }
  | { kind: "partitions"; stage: number };

export type StateAnswer =
  | { kind: "read"; reads: StateRead[] }
  | { kind: "groups"; groups: Array<{ partition: number; group: readonly unknown[] }> }
  | { kind: "partitions"; partitions: Array<{ partition: number; position: number | null }>; standbys: Array<{ partition: number; lag: number }> };

/** Answers a query from a loop's operator tasks (none: a loop between sessions holds nothing). */
export function answerQuery(tasks: OperatorTasks | undefined, query: StateQuery, rebalancing = false, standbys?: StandbyTasks): StateAnswer {
  switch (query.kind) {
    case "read": {
      if (query.standby) return { kind: "read", reads: standbys?.readState(query.stage, query.group) ?? [] };
      const reads = tasks?.readState(query.stage, query.group, { retired: query.retired === true }) ?? [];
      // Read while the group rebalances: the partition may be moving away.
      return { kind: "read", reads: rebalancing ? reads.map((r) => ({ ...r, stale: true })) : reads };
    }
    case "groups":
      return { kind: "groups", groups: tasks?.stateGroups(query.stage) ?? [] };
    case "partitions":
      return {
        kind: "partitions",
        partitions: tasks?.statePartitions(query.stage) ?? [],
        standbys: (standbys?.list() ?? []).filter((s) => s.stage === query.stage + 1).map((s) => ({ partition: s.partition, lag: s.lag })),
      };
  }
}

/** A stateful stage, as GET /state lists it. */
export interface StateStage {
  /** 1-based, as in the routes. */
  stage: number;
  /** 0-based, as the build record's `stages` count. */
  index: number;
  op: string;
  /** The group key's columns, in order: a key is given as their values. */
  keyColumns: string[];
  /** Whether GET /state/{stage}/keys/... answers for it (a stream join keeps rows, not keyed values). */
  queryable: boolean;
  /** Windowed stages: the window size and slide (ms), as the step names them. */
  windowMs?: number;
  slideMs?: number;
  /** Session stages: the gap (ms). */
  gapMs?: number;
}

/** The stateful stages of a compiled topology. */
export function stateStages(compiled: CompiledTopology): StateStage[] {
  const out: StateStage[] = [];
  for (const stage of compiled.stages) {
    const operator = stage.operator;
    if (!operator) continue;
    const def = stage.def.steps[operator.step] as Record<string, unknown> | undefined;
    const windowMs = typeof def?.windowMs === "number" ? def.windowMs : undefined;
    const slideMs = typeof def?.slideMs === "number" ? def.slideMs : windowMs;
    const gapMs = typeof def?.gapMs === "number" ? def.gapMs : undefined;
    out.push({
      stage: stage.index + 1,
      index: stage.index,
      op: operator.op,
      keyColumns: [...operator.compiled.keyColumns],
      queryable: operator.op !== "streamJoin",
      ...(windowMs !== undefined ? { windowMs, slideMs: slideMs! } : {}),
      ...(gapMs !== undefined ? { gapMs } : {}),
    });
  }
  return out;
}

/** Rows of windowed stages inside [from, to) of event time: a window overlapping the range is kept. */
export function inRange(rows: Row[], from: number | undefined, to: number | undefined): Row[] {
  if (from === undefined && to === undefined) return rows;
  return rows.filter((row) => {
    const start = (row.windowStart ?? row.sessionStart) as number | undefined;
    const end = (row.windowEnd ?? row.sessionEnd) as number | undefined;
    if (typeof start !== "number" || typeof end !== "number") return true;
    return (from === undefined || end > from) && (to === undefined || start < to);
  });
}

/** The state of every loop of this process, for the admin server. */
export interface LocalState {
  readonly stages: StateStage[];
  /** This process's name in the group's directory (STREAM_INSTANCE_ID, else a random id per start). */
  readonly instance: string;
  /** Hears each change a row makes to one key (stage index 0-based), from whichever loop holds it; returns the end. */
  watch(stage: number, group: unknown[], listener: (read: StateRead) => void): () => void;
  /** The pipeline's other processes, where a key this process does not hold may be. */
  peers(): Promise<Peer[]>;
  /** Asks every loop; the answers of the ones that hold something, merged. */
  ask<K extends StateQuery["kind"]>(query: StateQuery & { kind: K }): Promise<Array<StateAnswer & { kind: K }>>;
}

/** A LocalState over loops that answer queries (run-stream's loop handles). */
export function localState(
  stages: StateStage[],
  loops: () => ReadonlyArray<{ query(query: StateQuery): Promise<StateAnswer>; watch?(stage: number, group: unknown[], listener: (read: StateRead) => void): () => void }>,
  peers: () => Promise<Peer[]> = () => Promise.resolve([]),
  instance = "",
): LocalState {
  return {
    stages,
    instance,
    watch: (stage, group, listener) => {
      const ends = loops().map((loop) => loop.watch?.(stage, group, listener) ?? (() => {}));
      return () => ends.forEach((end) => end());
    },
    peers,
    ask: async <K extends StateQuery["kind"]>(query: StateQuery & { kind: K }) =>
      (await Promise.all(loops().map((loop) => loop.query(query)))) as Array<StateAnswer & { kind: K }>,
  };
}
