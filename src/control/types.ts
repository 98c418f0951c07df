/**
 * The host interface: what the engine asks of whoever runs it (a TOML file, a platform over
 * HTTP). Everything else is the engine's.
 */
import type { SinkConfig, SinkKind } from "../sinks/config.ts";

/** One step of a stage, in the engine's JSON vocabulary (`{ op: "filter", expression: "..." }`). */
export type StepDef = { op: string; [field: string]: unknown };

/** A stage: inline steps around at most one operator or compute step, from inputs to one output. */
export interface StageDef {
  inputs: string[];
  output: string;
  steps: StepDef[];
}

export interface Topology {
  stages: StageDef[];
}

export type SourceKind = "kafka";
export type { SinkKind } from "../sinks/config.ts";

/** What to do with rows of a dataset that cannot be processed. */
export interface TopicPolicy {
  /** Topic that receives poison rows, with the reason in headers. None: poison is counted only. */
  deadLetter?: string;
}

/** A dataset resolved to where it lives. */
export interface TopicBinding {
  apiName: string;
  topic: string;
  brokers: string;
  policy: TopicPolicy;
  source: SourceKind;
  sink: SinkKind;
  /** Where the rows go when `sink` is not "kafka" (then `topic` is not a Kafka topic: nothing reads it back). */
  sinkConfig?: SinkConfig;
}

/** What a heartbeat tells the stream. */
export const BuildSignal = {
  Continue: "Continue",
  Stop: "Stop",
  /** The host could not be reached: keep running on what we have. */
  ContinueUnreachable: "ContinueUnreachable",
} as const;
export type BuildSignal = (typeof BuildSignal)[keyof typeof BuildSignal];

export type BuildStatus = "STARTING" | "RUNNING" | "STOPPED" | "FAILED";

/** Counters of one stream; every worker's counters add up to the build's. */
export interface StreamCounters {
  /** Records read from the input topics. */
  consumed: number;
  /** Records written to output topics. */
  emitted: number;
  /** Rows a filter removed. */
  dropped: number;
  /** Rows that could not be processed (isolated, counted, dead-lettered when a topic is set). */
  poison: number;
  /** Poison rows written to a dead-letter topic. */
  deadLettered: number;
  /** Offset commits done. */
  commits: number;
}

/** The live build record, sent to the host on a cadence and at every status change. */
export interface BuildRecord {
  id: string;
  pipeline: string;
  kind: "stream";
  status: BuildStatus;
  startedAt?: string;
  updatedAt?: string;
  error?: string;
  metrics?: BuildMetrics;
  /** Topics the engine created for itself: the state changelog and repartition topics. */
  internalTopics?: InternalTopic[];
  [field: string]: unknown;
}

export interface InternalTopic {
  topic: string;
  partitions: number;
  purpose: "state" | "repartition";
  /** For a repartition topic: the stage (from 1) it feeds, and the columns its records are keyed by. */
  stage?: number;
  keyedBy?: string[];
}

export interface BuildMetrics extends StreamCounters {
  poisonByReason: Record<string, number>;
  /** Transactions committed and aborted (exactly-once). */
  transactionsCommitted: number;
  transactionsAborted: number;
  /** Failed checkpoints, and those of them that ran past the deadline. */
  checkpointFailures: number;
  checkpointTimeouts: number;
  /** Times a loop rejoined after a recoverable failure (fenced, broker gone, aborted transaction). */
  restarts: number;
  /** Of those, the times the stall watchdog started a fresh consumer (no records while partitions had lag). */
  stallRestarts: number;
  /**
   * Exactly-once: transactional ids of previous owners fenced by this process because their open
   * transaction still held partitions it got (a member killed mid-transaction), so the broker
   * aborted it at once rather than at its timeout (src/loop/departed-owners.ts).
   */
  transactionsFenced?: number;
  /**
   * http steps (present when the pipeline has one): attempts made (retries included), retries,
   * calls in flight now, and circuit breakers open now (refusing calls in their cool-down; half-open ones, ready to probe, are not counted) across consumers.
   */
  httpCalls?: number;
  httpRetries?: number;
  httpInFlight?: number;
  httpBreakersOpen?: number;
  /**
   * Sinks (present when the pipeline writes to postgres or http): rows written into them (upserted,
   * delivered), rows skipped as delivered before (the http sink's Deduplicator), and the sinks that
   * cannot be reached now, each with the last reason (the stream waits; `/readyz` answers 503).
   */
  sinkWritten?: number;
  sinkDuplicates?: number;
  sinksWaiting?: Record<string, string>;
  /** Rows refused by a stateful operator because their window had closed. */
  late: number;
  /** Rows written, re-keyed, to repartition topics (consumed back from there, they are not counted in `consumed` again). */
  repartitioned: number;
  /** State restore: changelog records read, and the time restores ran (wall clock: tasks restore in parallel). */
  restoredRecords: number;
  /** State entries restores took from the local state store (STREAM_STATE_DIR) instead of the changelog: loaded into memory, or left there for an operator that reads its state from the store (state beyond memory). */
  restoredFromStore: number;
  restoreMs: number;
  /** Live state now (not a running total): keys and approximate bytes over all stateful tasks. */
  stateKeys: number;
  stateBytes: number;
  /** "at-least-once" or "exactly-once". */
  guarantee: string;
  /** The Kafka client adapter in use. */
  kafkaClient: string;
  consumers: number;
  /** Owned input partitions; for a stateful stage's input, its live state size too. */
  partitions: Array<{
    topic: string;
    partition: number;
    offset?: number;
    lag?: number;
    stateKeys?: number;
    stateBytes?: number;
    /** Keys in the local state store, and the bytes it takes on disk. */
    storeKeys?: number;
    storeBytesOnDisk?: number;
    /**
     * State beyond memory (windows and lastN groups with the local store on): entities held in
     * memory now, and the share of lookups that found their entity there (the others read the
     * store); null before the first lookup.
     */
    cacheKeys?: number;
    cacheHitRate?: number | null;
    restoring?: boolean;
    /** While restoring: changelog records read of those to read, rate (records/s) and ETA (s). */
    restore?: { read: number; total: number; fromStore: number; rate: number; etaSeconds: number | null };
  }>;
  /**
   * Standby copies this process keeps of other members' task states (STREAM_STANDBY_REPLICAS):
   * the state topic's partition, the stage (1-based), the changelog offset the copy covers, and
   * how many changelog records it was behind at its last read.
   */
  standbyPartitions: Array<{ topic: string; partition: number; stage: number; offset: number; lag: number }>;
  recordsPerSecond: number;
  /** The restore rate so far: restoredRecords ÷ restoreMs, in changelog records per second (0 before any restore). */
  restoreRecordsPerSecond: number;
}

/**
 * The four questions the engine asks its host.
 *
 * @example
 * const host: ControlPlane = {
 *   topology: async () => ({ stages: [{ inputs: ["events"], output: "out", steps: [{ op: "filter", expression: "price > 100" }] }] }),
 *   resolveTopic: async (dataset) => ({ apiName: dataset, topic: dataset, brokers: "127.0.0.1:9092", policy: {}, source: "kafka", sink: "kafka" }),
 *   heartbeat: async () => BuildSignal.Continue,
 *   putRecord: async (_id, record) => console.log(record),
 * };
 */
export interface ControlPlane {
  topology(pipeline: string): Promise<Topology>;
  resolveTopic(dataset: string): Promise<TopicBinding>;
  heartbeat(buildId: string): Promise<BuildSignal>;
  putRecord(buildId: string, record: BuildRecord): Promise<void>;
}
