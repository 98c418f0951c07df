import * as v from "valibot";
import { FvError } from "../errors.ts";

/**
 * Engine settings, from STREAM_* environment variables. Each has a default; a bad value stops
 * the start with a message naming the variable and what it accepts.
 */
export interface Settings {
  /** Bootstrap brokers, comma-separated host:port. */
  brokers: string;
  /** Consumers in the group from this process; more than one run in Workers. */
  consumers: number;
  /** Most records one loop iteration processes. */
  batchSize: number;
  /** How often offsets (and state) are committed. */
  checkpointIntervalMs: number;
  /** Where a partition with no committed offset starts. */
  offsetReset: "earliest" | "latest";
  /** Stop after no record has arrived for this long; 0 runs until stopped. */
  idleTimeoutMs: number;
  /** How often the host is asked whether to continue. */
  heartbeatIntervalMs: number;
  /** How often the build record is sent to the host. */
  recordIntervalMs: number;
  /** How long a poll waits for records before the loop checks commits and signals. */
  pollTimeoutMs: number;
  /** Outputs, checkpoints and offsets in one Kafka transaction per checkpoint interval. */
  exactlyOnce: boolean;
  /** Exactly-once: transactional producers per loop, taking turns (2: one commits while the other takes the next batches). */
  transactionProducers: 1 | 2;
  /** Stable name of this process in the group (e.g. a pod name); part of transactional ids. */
  instanceId: string | undefined;
  /** Most time one checkpoint step may take. */
  checkpointDeadlineMs: number;
  /** Failed checkpoints in a row before the stream fails. */
  checkpointMaxFailures: number;
  /** A member silent this long leaves the group and its partitions move. */
  sessionTimeoutMs: number;
  /** An input partition without rows for this long stops holding a stateful stage's watermark back. */
  idlePartitionMs: number;
  /** Most live state keys one stateful task (stage × partition) may hold (on disk and in memory). */
  stateMaxKeys: number;
  /** Entities a task keeps in memory while its state lives in the local store (0: all of them). */
  stateCacheKeys: number;
  /**
   * Where the local state stores live: a directory, "off" (state only in memory and the
   * changelog), or undefined for the default `.fv-state/<pipeline>` under the working directory.
   */
  stateDir?: string;
  /** Standby copies of each stateful partition's state kept by other members (0: none). */
  standbyReplicas: number;
  /** What happens to rows that arrive after their window closed: dropped, or dead-lettered. */
  lateRows: "drop" | "deadLetter";
  /** Partitions of each repartition topic; 0: as many as the stage's widest input. */
  repartitionPartitions: number;
  /** The Kafka adapter: the pure-JS client (auto), or one named (confluent: librdkafka, Node only). */
  kafkaClient: "auto" | "platformatic" | "confluent";
}

const int = (name: string, min: number) =>
  v.pipe(
    v.string(),
    v.regex(/^\d+$/, `${name} must be a whole number`),
    v.transform(Number),
    v.minValue(min, `${name} must be at least ${min}`),
  );

const schema = v.object({
  STREAM_BROKERS: v.optional(
    v.pipe(v.string(), v.regex(/^[^\s,:]+:\d+(,[^\s,:]+:\d+)*$/, "STREAM_BROKERS must be host:port[,host:port...]")),
  ),
  STREAM_CONSUMERS: v.optional(v.pipe(int("STREAM_CONSUMERS", 1), v.maxValue(64, "STREAM_CONSUMERS must be at most 64")), "1"),
  STREAM_BATCH_SIZE: v.optional(int("STREAM_BATCH_SIZE", 1), "1000"),
  STREAM_CHECKPOINT_INTERVAL_MS: v.optional(int("STREAM_CHECKPOINT_INTERVAL_MS", 10), "200"),
  STREAM_OFFSET_RESET: v.optional(v.picklist(["earliest", "latest"], "STREAM_OFFSET_RESET must be earliest or latest"), "earliest"),
  STREAM_IDLE_TIMEOUT_MS: v.optional(int("STREAM_IDLE_TIMEOUT_MS", 0), "0"),
  STREAM_HEARTBEAT_INTERVAL_MS: v.optional(int("STREAM_HEARTBEAT_INTERVAL_MS", 100), "5000"),
  STREAM_RECORD_INTERVAL_MS: v.optional(int("STREAM_RECORD_INTERVAL_MS", 100), "5000"),
  STREAM_POLL_TIMEOUT_MS: v.optional(int("STREAM_POLL_TIMEOUT_MS", 10), "200"),
  STREAM_EXACTLY_ONCE: v.optional(v.picklist(["true", "false"], "STREAM_EXACTLY_ONCE must be true or false"), "false"),
  STREAM_TRANSACTION_PRODUCERS: v.optional(v.picklist(["1", "2"], "STREAM_TRANSACTION_PRODUCERS must be 1 or 2"), "2"),
  STREAM_INSTANCE_ID: v.optional(v.pipe(v.string(), v.regex(/^[A-Za-z0-9._-]{1,64}$/, "STREAM_INSTANCE_ID may hold letters, digits, '.', '_' and '-' (at most 64)"))),
  STREAM_CHECKPOINT_DEADLINE_MS: v.optional(int("STREAM_CHECKPOINT_DEADLINE_MS", 100), "10000"),
  STREAM_CHECKPOINT_MAX_FAILURES: v.optional(int("STREAM_CHECKPOINT_MAX_FAILURES", 1), "5"),
  STREAM_SESSION_TIMEOUT_MS: v.optional(int("STREAM_SESSION_TIMEOUT_MS", 3000), "10000"),
  STREAM_IDLE_PARTITION_MS: v.optional(int("STREAM_IDLE_PARTITION_MS", 100), "10000"),
  STREAM_STATE_MAX_KEYS: v.optional(int("STREAM_STATE_MAX_KEYS", 1), "1000000"),
  STREAM_STATE_CACHE_KEYS: v.optional(int("STREAM_STATE_CACHE_KEYS", 0), "100000"),
  STREAM_STANDBY_REPLICAS: v.optional(v.pipe(int("STREAM_STANDBY_REPLICAS", 0), v.maxValue(8, "STREAM_STANDBY_REPLICAS must be at most 8")), "0"),
  STREAM_STATE_DIR: v.optional(v.pipe(v.string(), v.minLength(1, "STREAM_STATE_DIR must be a directory or off"))),
  STREAM_LATE_ROWS: v.optional(v.picklist(["drop", "deadLetter"], "STREAM_LATE_ROWS must be drop or deadLetter"), "drop"),
  STREAM_REPARTITION_PARTITIONS: v.optional(int("STREAM_REPARTITION_PARTITIONS", 0), "0"),
  STREAM_KAFKA_CLIENT: v.optional(
    v.picklist(["auto", "platformatic", "confluent"], "STREAM_KAFKA_CLIENT must be auto, platformatic (pure JS) or confluent (librdkafka, Node only)"),
    "auto",
  ),
});

/** Every setting with its meaning and default, for the README and `--help`. */
export const settingsTable: Array<[name: string, meaning: string, fallback: string]> = [
  ["STREAM_BROKERS", "bootstrap brokers, host:port[,host:port]", "the pipeline file's [brokers] default, else 127.0.0.1:9092"],
  ["STREAM_CONSUMERS", "consumers this process runs in the group (more than 1 run in Workers)", "1"],
  ["STREAM_BATCH_SIZE", "most records processed per loop iteration", "1000"],
  ["STREAM_CHECKPOINT_INTERVAL_MS", "how often offsets are committed", "200"],
  ["STREAM_OFFSET_RESET", "earliest | latest: where a partition without a committed offset starts", "earliest"],
  ["STREAM_IDLE_TIMEOUT_MS", "stop (STOPPED) after no input for this long; 0 = never", "0"],
  ["STREAM_HEARTBEAT_INTERVAL_MS", "how often the host's heartbeat is asked", "5000"],
  ["STREAM_RECORD_INTERVAL_MS", "how often the build record is sent", "5000"],
  ["STREAM_POLL_TIMEOUT_MS", "how long one poll waits for records", "200"],
  ["STREAM_EXACTLY_ONCE", "true: outputs, dead letters and offsets in one Kafka transaction per checkpoint interval", "false"],
  ["STREAM_TRANSACTION_PRODUCERS", "exactly-once: 2 transactional producers per consumer take turns (one commits while the other sends the next batches), or 1", "2"],
  ["STREAM_INSTANCE_ID", "stable name of this process (e.g. the pod name), part of transactional ids: a restart fences its predecessor at once. Give each live process its own: two with one id take the membership from each other, and 3 times within a minute ends the stream: INVALID_SETTINGS", "random per start"],
  ["STREAM_CHECKPOINT_DEADLINE_MS", "most time one checkpoint step (state, offsets, transaction) may take", "10000"],
  ["STREAM_CHECKPOINT_MAX_FAILURES", "failed checkpoints in a row before the stream fails (circuit breaker)", "5"],
  ["STREAM_SESSION_TIMEOUT_MS", "a member silent this long (crashed, paused) leaves the group and its partitions move", "10000"],
  ["STREAM_IDLE_PARTITION_MS", "an input partition without rows this long stops holding a stateful stage's watermark back", "10000"],
  ["STREAM_STATE_MAX_KEYS", "most live state keys per stateful stage and partition, on disk and in memory; more fails the stream with a clear error", "1000000"],
  ["STREAM_STATE_CACHE_KEYS", "with the local store on: state entities (windows, lastN groups) each stateful stage and partition keeps in memory; the rest stays on disk and is read when a row needs it; 0 = all in memory", "100000"],
  ["STREAM_STANDBY_REPLICAS", "copies of each stateful partition's state other members keep up to date (in their STREAM_STATE_DIR), for a failover that reads only a tail; pure-JS client only", "0"],
  ["STREAM_STATE_DIR", "where the local state stores live (LMDB, one per stateful stage and partition): a restart reads only the changelog's tail; off = memory and changelog only", ".fv-state/<pipeline> under the working directory"],
  ["STREAM_LATE_ROWS", "drop | deadLetter: rows older than their window's close are counted, then dropped or dead-lettered", "drop"],
  ["STREAM_REPARTITION_PARTITIONS", "partitions of each repartition topic fv-repartition-<name>-<stage>; 0: as many as the stage's widest input", "0"],
  ["STREAM_KAFKA_CLIENT", "auto | platformatic | confluent: the Kafka client; auto = the pure-JS client on every runtime; confluent = librdkafka, Node only, when its addon loads", "auto"],
];

/**
 * Reads settings from an environment map (e.g. `process.env`).
 * @example
 * const settings = parseSettings({ STREAM_CONSUMERS: "2" }, "127.0.0.1:9092");
 */
export function parseSettings(env: Record<string, string | undefined>, defaultBrokers = "127.0.0.1:9092"): Settings {
  const picked: Record<string, string> = {};
  for (const key of Object.keys(schema.entries)) {
    const value = env[key];
    if (value !== undefined && value !== "") picked[key] = value.trim();
  }
  const result = v.safeParse(schema, picked);
  if (!result.success) {
    const issue = result.issues[0]!;
    const name = v.getDotPath(issue) ?? "setting";
    throw new FvError(
      "INVALID_SETTINGS",
      `invalid setting ${name}=${JSON.stringify(picked[name] ?? "")}: ${issue.message}`,
      { context: { field: name } },
    );
  }
  const s = result.output;
  return {
    brokers: s.STREAM_BROKERS ?? defaultBrokers,
    consumers: s.STREAM_CONSUMERS,
    batchSize: s.STREAM_BATCH_SIZE,
    checkpointIntervalMs: s.STREAM_CHECKPOINT_INTERVAL_MS,
    offsetReset: s.STREAM_OFFSET_RESET,
    idleTimeoutMs: s.STREAM_IDLE_TIMEOUT_MS,
    heartbeatIntervalMs: s.STREAM_HEARTBEAT_INTERVAL_MS,
    recordIntervalMs: s.STREAM_RECORD_INTERVAL_MS,
    pollTimeoutMs: s.STREAM_POLL_TIMEOUT_MS,
    exactlyOnce: s.STREAM_EXACTLY_ONCE === "true",
    transactionProducers: s.STREAM_TRANSACTION_PRODUCERS === "1" ? 1 : 2,
    instanceId: s.STREAM_INSTANCE_ID,
    checkpointDeadlineMs: s.STREAM_CHECKPOINT_DEADLINE_MS,
    checkpointMaxFailures: s.STREAM_CHECKPOINT_MAX_FAILURES,
    sessionTimeoutMs: s.STREAM_SESSION_TIMEOUT_MS,
    idlePartitionMs: s.STREAM_IDLE_PARTITION_MS,
    stateMaxKeys: s.STREAM_STATE_MAX_KEYS,
    stateCacheKeys: s.STREAM_STATE_CACHE_KEYS,
    ...(s.STREAM_STATE_DIR ? { stateDir: s.STREAM_STATE_DIR } : {}),
    standbyReplicas: s.STREAM_STANDBY_REPLICAS,
    lateRows: s.STREAM_LATE_ROWS,
    repartitionPartitions: s.STREAM_REPARTITION_PARTITIONS,
    kafkaClient: s.STREAM_KAFKA_CLIENT,
  };
}
