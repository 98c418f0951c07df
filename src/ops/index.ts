/**
 * Stateful operators: windowedAggregate, sessionAggregate, streamJoin, topN, lastN. Pure and
 * synchronous (rows and event time in, fired rows out, state snapshot and restore); the engine
 * runs one instance per input partition and owns all I/O. See docs/operators.md.
 *
 * @example
 * import { eventTimeOf, operatorSteps } from "./ops/index.ts";
 * const kind = operatorSteps.windowedAggregate;
 * const compiled = kind.compile(v.parse(kind.schema, def), { stage: 0, step: 1, inputs: 1 });
 * const op = compiled.create(); // per partition
 * op.process(row, eventTimeOf(row, compiled.timeColumn), 0);
 * op.advance(watermark);        // fired rows
 * op.drainChanges();            // changelog entries to write
 */
import { compileLastN, lastNSchema } from "./last-n.ts";
import type { OperatorKind } from "./operator.ts";
import { compileSessionAggregate, sessionAggregateSchema } from "./session-aggregate.ts";
import { compileStreamJoin, streamJoinSchema } from "./stream-join.ts";
import { compileTableJoin, tableJoinSchema } from "./table-join.ts";
import { compileTopN, topNSchema } from "./top-n.ts";
import { compileWindowedAggregate, windowedAggregateSchema } from "./windowed-aggregate.ts";

export type {
  CacheStats,
  CompiledOperator,
  Operator,
  OperatorContext,
  OperatorKind,
  OperatorOutput,
  OperatorSnapshot,
  StateEntry,
  StateSource,
} from "./operator.ts";
export { NO_OUTPUT, SNAPSHOT_VERSION } from "./operator.ts";
export { META_KEY } from "./operator-state.ts";
export { RawState } from "./state-values.ts";
export { eventTimeOf, parseIsoTime } from "./event-time.ts";
export type { AggregateDef, AggregateOp } from "./aggregates.ts";
export type { StateStore } from "./state-store.ts";
export { FileStateStore, type TextFiles } from "./file-state-store.ts";

/** The stateful steps, by `op`. */
export const operatorSteps: Record<string, OperatorKind> = {
  windowedAggregate: { schema: windowedAggregateSchema, compile: compileWindowedAggregate },
  sessionAggregate: { schema: sessionAggregateSchema, compile: compileSessionAggregate },
  streamJoin: { schema: streamJoinSchema, compile: compileStreamJoin },
  tableJoin: { schema: tableJoinSchema, compile: compileTableJoin },
  topN: { schema: topNSchema, compile: compileTopN },
  lastN: { schema: lastNSchema, compile: compileLastN },
};
