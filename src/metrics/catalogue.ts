/**
 * Every metric family fv-streams exposes, in one list: name, type, help text, labels and where
 * its value comes from. Names follow the Prometheus conventions (`fv_` prefix, base units,
 * `_total` on counters, `_seconds` on durations).
 *
 * Where a value comes from:
 * - `record`: read from the build record at scrape time, so `/metrics` and the record agree
 *   exactly (consumed, emitted, dropped, poison by reason, dead-lettered, commits, …). When
 *   there is no build record (a library run), the same counters come from the events.
 * - `events`: counted from `Metrics` events by a `MetricsRecorder`.
 * - `status`: read from the admin status (per-partition offset, lag, state size) at scrape time.
 */
export type MetricType = "counter" | "gauge" | "histogram";
export type MetricSource = "record" | "events" | "status";

export interface MetricDef {
  name: string;
  type: MetricType;
  help: string;
  labels: readonly string[];
  source: MetricSource;
  /** Upper bounds of a histogram's buckets, in seconds, ascending (`+Inf` is implied). */
  buckets?: readonly number[];
}

/** Per-step latency: a compiled step takes microseconds per row, a batch up to a second. */
const STEP_BUCKETS = [0.000005, 0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1];
/** A checkpoint commit is one round trip to the group coordinator: milliseconds, seconds when Kafka struggles. */
const COMMIT_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/** An http step's call: a local service answers in milliseconds, a slow one in seconds (timeouts up to minutes). */
const HTTP_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

const def = (name: string, type: MetricType, source: MetricSource, help: string, labels: readonly string[] = [], buckets?: readonly number[]): MetricDef =>
  Object.freeze({ name, type, help, labels, source, ...(buckets ? { buckets } : {}) });

/** The metric families, by name. */
export const metricCatalogue = Object.freeze({
  recordsConsumed: def("fv_records_consumed_total", "counter", "record", "Records read from the input topics."),
  recordsEmitted: def("fv_records_emitted_total", "counter", "record", "Records written to output topics."),
  recordsDropped: def("fv_records_dropped_total", "counter", "record", "Rows a filter removed."),
  poisonRecords: def("fv_poison_records_total", "counter", "record", "Rows that could not be processed, by reason.", ["reason"]),
  recordsDeadLettered: def("fv_records_dead_lettered_total", "counter", "record", "Poison rows written to a dead-letter topic."),
  checkpointCommits: def("fv_checkpoint_commits_total", "counter", "record", "Checkpoints (offset commits) done."),
  checkpointFailures: def("fv_checkpoint_failures_total", "counter", "record", "Checkpoints that failed: kind=timeout ran past the deadline, kind=error threw.", ["kind"]),
  checkpointTimeouts: def("fv_checkpoint_timeouts_total", "counter", "record", "Checkpoints that ran past STREAM_CHECKPOINT_DEADLINE_MS (also in fv_checkpoint_failures_total{kind=\"timeout\"})."),
  recordsRepartitioned: def("fv_records_repartitioned_total", "counter", "record", "Rows written, re-keyed, to repartition topics fv-repartition-<name>-<stage>."),
  transactions: def("fv_transactions_total", "counter", "record", "Transactions ended (exactly-once), by result: commit or abort.", ["result"]),
  loopRestarts: def("fv_loop_restarts_total", "counter", "record", "Times a consumer loop rejoined the group after a recoverable failure."),
  consumers: def("fv_consumers", "gauge", "record", "Consumers this process runs in the group."),
  assignedPartitions: def("fv_assigned_partitions", "gauge", "record", "Input partitions this process owns now."),
  recordsPerSecond: def("fv_records_per_second", "gauge", "record", "Records consumed per second, as the build record last measured it."),
  buildInfo: def("fv_build_info", "gauge", "record", "Always 1; labels name the pipeline, the build, the delivery guarantee and the Kafka client.", ["pipeline", "build", "guarantee", "kafka_client"]),
  buildStatus: def("fv_build_status", "gauge", "record", "1 for the build's current status, 0 for the others.", ["status"]),
  buildStartTime: def("fv_build_start_time_seconds", "gauge", "record", "When the build started, in Unix seconds."),

  stepLatency: def("fv_step_latency_seconds", "histogram", "events", "Time one step took, by stage, step and op.", ["stage", "step", "op"], STEP_BUCKETS),
  timerFires: def("fv_timer_fires_total", "counter", "events", "Event-time timers that fired, by stage.", ["stage"]),
  checkpointDuration: def("fv_checkpoint_commit_duration_seconds", "histogram", "events", "Time one checkpoint commit took.", [], COMMIT_BUCKETS),
  lateRecordsDropped: def("fv_late_records_dropped_total", "counter", "events", "Records behind the watermark that were dropped, by stage.", ["stage"]),
  rebalances: def("fv_rebalances_total", "counter", "events", "Consumer group rebalances this process took part in."),
  httpCalls: def("fv_http_calls_total", "counter", "events", "Calls an http step made (retries included), by stage, step and status: the HTTP status code, or timeout / error when no answer came.", ["stage", "step", "status"]),
  httpRetries: def("fv_http_retries_total", "counter", "events", "Calls an http step retried (timeouts, connection errors, 5xx, 429), by stage and step.", ["stage", "step"]),
  httpCallDuration: def("fv_http_call_duration_seconds", "histogram", "events", "Time one http step call took, by stage and step.", ["stage", "step"], HTTP_BUCKETS),
  httpInFlight: def("fv_http_in_flight", "gauge", "record", "http step calls in flight now, across this process's consumers."),
  httpBreakersOpen: def("fv_http_breakers_open", "gauge", "record", "http step circuit breakers open now (refusing calls until their cool-down ends), across this process's consumers."),
  sinkWritten: def("fv_sink_rows_written_total", "counter", "record", "Rows written into sinks (postgres: upserted; http: delivered)."),
  sinkDuplicates: def("fv_sink_rows_duplicate_total", "counter", "record", "Rows an http sink skipped because their id was delivered before (its Deduplicator)."),
  sinksWaiting: def("fv_sinks_waiting", "gauge", "record", "Sinks that cannot be reached now: the stream waits and retries."),

  partitionOffset: def("fv_partition_offset", "gauge", "status", "Next offset to read (the committed position) of an owned partition.", ["topic", "partition"]),
  partitionLag: def("fv_partition_lag", "gauge", "status", "Records between the committed position and the end of an owned partition.", ["topic", "partition"]),
  partitionStateBytes: def("fv_partition_state_bytes", "gauge", "status", "Bytes of operator state held for an owned partition.", ["topic", "partition"]),
} satisfies Record<string, MetricDef>);

export type MetricKey = keyof typeof metricCatalogue;
