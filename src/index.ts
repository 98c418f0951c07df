/**
 * fv-streams: a stream-function runtime over Apache Kafka.
 *
 * @example
 * import { runStream, parseSettings } from "fv-streams";
 * const final = await runStream(host, "demo", "build-1", { id: "build-1", pipeline: "demo", kind: "stream", status: "STARTING" }, { settings: parseSettings(process.env) });
 */
export * from "./control/types.ts";
export { parseSettings, type Settings, settingsTable } from "./control/settings.ts";
export { type CompiledStage, type CompiledTopology, compileTopology } from "./topology/compile-topology.ts";
export { groupKeyText, planKeying, repartitionTopicOf, type StageKeying } from "./topology/keying.ts";
export { type ErrorCode, ErrorCodes, type ErrorContext, FvError, type Recovery, recoveryOf } from "./errors.ts";
export { compileExpression, type CompiledExpression, type Row, type Value } from "./expr/index.ts";
export type { LoopCounters } from "./loop/counters.ts";
export { type Logger, type LogLevel, silentLogger } from "./logger.ts";
export { groupIdOf } from "./loop/plan.ts";
export { planStream, runStream, type RunStreamOptions, type StreamPlan } from "./loop/run-stream.ts";
export type * from "./kafka/port.ts";
export { loadKafkaClient } from "./kafka/clients.ts";
export { rowPipeline, type RowCounters, type RowPipelineOptions } from "./topology/row-pipeline.ts";
export * from "./metrics/index.ts";
export { type AsyncCursorStore, type AsyncStateStore, type Cursor, CursorsIn } from "./state/async-store.ts";
export { Checkpointer, StoreCheckpointer } from "./state/checkpointer.ts";
export { Deduplicator, type DeduplicatorOptions } from "./state/deduplicator.ts";
export { nodeFiles } from "./state/node-files.ts";
export { type S3Client, S3ClientError, S3StateStore } from "./state/s3-store.ts";
export { AwsS3Client, type AwsS3ClientOptions, s3OptionsFromEnv } from "./state/aws-s3-client.ts";
export { FileStateStore, type StateStore, type TextFiles } from "./ops/index.ts";
