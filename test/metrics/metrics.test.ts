import { describe, expect, test } from "bun:test";
import type { BuildRecord } from "../../src/control/types.ts";
import {
  mergeSnapshots,
  metricCatalogue,
  MetricsRecorder,
  metricsFromBuildRecord,
  noopMetrics,
  prometheusText,
  writeExposition,
} from "../../src/metrics/index.ts";
import { parsePrometheusText, sampleValue } from "./prom-text.ts";

const RECORD: BuildRecord = {
  id: "b1",
  pipeline: "demo",
  kind: "stream",
  status: "RUNNING",
  startedAt: "2026-01-02T03:04:05.000Z",
  metrics: {
    consumed: 1000,
    emitted: 480,
    dropped: 480,
    poison: 40,
    poisonByReason: { invalid_json: 25, division_by_zero: 15 },
    deadLettered: 40,
    commits: 12,
    transactionsCommitted: 11,
    transactionsAborted: 1,
    checkpointFailures: 3,
    checkpointTimeouts: 1,
    restarts: 1,
    stallRestarts: 0,
    late: 0,
    repartitioned: 0,
    restoredRecords: 0,
    restoreMs: 0,
    stateKeys: 0,
    stateBytes: 0,
    guarantee: "exactly-once",
    kafkaClient: "platformatic",
    consumers: 2,
    partitions: [{ topic: "trades", partition: 0 }, { topic: "trades", partition: 1 }],
    recordsPerSecond: 250,
    restoreRecordsPerSecond: 0,
    restoredFromStore: 0,
    standbyPartitions: [],
  },
};

describe("metrics", () => {
  test("noopMetrics takes every event and keeps nothing", () => {
    noopMetrics.recordsConsumed(1);
    noopMetrics.stepLatency(0, 0, "filter", 1);
    noopMetrics.transaction("abort");
    expect(Object.isFrozen(noopMetrics)).toBe(true);
  });

  test("every family name follows the Prometheus conventions", () => {
    for (const def of Object.values(metricCatalogue)) {
      expect(def.name).toMatch(/^fv_[a-z_]+$/);
      if (def.type === "counter") expect(def.name).toEndWith("_total");
      if (def.type === "histogram") expect(def.name).toEndWith("_seconds");
      if (def.type !== "counter") expect(def.name).not.toEndWith("_total");
    }
  });

  test("a scrape with nothing recorded still names every family once, and parses", () => {
    const families = parsePrometheusText(prometheusText({}));
    for (const def of Object.values(metricCatalogue)) {
      if (def.source === "record" && def.type === "gauge") continue; // gauges of a record need a record
      expect(families.get(def.name)?.type).toBe(def.type);
    }
  });

  test("counters read from the build record equal the record exactly", () => {
    const families = parsePrometheusText(prometheusText({ record: RECORD }));
    const m = RECORD.metrics!;
    expect(sampleValue(families, "fv_records_consumed_total")).toBe(m.consumed);
    expect(sampleValue(families, "fv_records_emitted_total")).toBe(m.emitted);
    expect(sampleValue(families, "fv_records_dropped_total")).toBe(m.dropped);
    expect(sampleValue(families, "fv_records_dead_lettered_total")).toBe(m.deadLettered);
    expect(sampleValue(families, "fv_checkpoint_commits_total")).toBe(m.commits);
    expect(sampleValue(families, "fv_poison_records_total", { reason: "invalid_json" })).toBe(25);
    expect(sampleValue(families, "fv_poison_records_total", { reason: "division_by_zero" })).toBe(15);
    expect(sampleValue(families, "fv_consumers")).toBe(2);
    expect(sampleValue(families, "fv_assigned_partitions")).toBe(2);
    expect(sampleValue(families, "fv_records_per_second")).toBe(250);
    expect(sampleValue(families, "fv_transactions_total", { result: "commit" })).toBe(11);
    expect(sampleValue(families, "fv_transactions_total", { result: "abort" })).toBe(1);
    expect(sampleValue(families, "fv_checkpoint_failures_total", { kind: "error" })).toBe(2);
    expect(sampleValue(families, "fv_checkpoint_failures_total", { kind: "timeout" })).toBe(1);
    expect(sampleValue(families, "fv_loop_restarts_total")).toBe(1);
    expect(sampleValue(families, "fv_build_info", { pipeline: "demo", build: "b1", guarantee: "exactly-once", kafka_client: "platformatic" })).toBe(1);
    expect(sampleValue(families, "fv_build_status", { status: "RUNNING" })).toBe(1);
    expect(sampleValue(families, "fv_build_status", { status: "STOPPED" })).toBe(0);
    expect(sampleValue(families, "fv_build_start_time_seconds")).toBe(Date.parse(RECORD.startedAt!) / 1000);
  });

  test("the record's counters win over the events', so the two never disagree on one scrape", () => {
    const recorder = new MetricsRecorder();
    recorder.recordsConsumed(7);
    recorder.rebalanced();
    const families = parsePrometheusText(prometheusText({ record: RECORD, snapshot: recorder.snapshot() }));
    expect(families.get("fv_records_consumed_total")!.samples).toEqual([{ name: "fv_records_consumed_total", labels: {}, value: 1000 }]);
    expect(sampleValue(families, "fv_rebalances_total")).toBe(1);
  });

  test("a STARTING record without counters leaves the counters to the events", () => {
    const recorder = new MetricsRecorder();
    recorder.recordsConsumed(3);
    recorder.recordsConsumed(4);
    recorder.poisonRecords(1, "not_object", 2);
    const families = parsePrometheusText(prometheusText({ record: { id: "b", pipeline: "p", kind: "stream", status: "STARTING" }, snapshot: recorder.snapshot() }));
    expect(sampleValue(families, "fv_records_consumed_total")).toBe(7);
    expect(sampleValue(families, "fv_poison_records_total", { reason: "not_object" })).toBe(2);
    expect(sampleValue(families, "fv_build_status", { status: "STARTING" })).toBe(1);
  });

  test("the recorder counts every event by its labels", () => {
    const r = new MetricsRecorder();
    r.timersFired(1, 3);
    r.timersFired(1, 2);
    r.lateRecordsDropped(0, 4);
    r.checkpointFailed("error");
    r.checkpointFailed("error");
    r.checkpointFailed("timeout");
    r.loopRestarted();
    r.transaction("commit");
    r.transaction("commit");
    r.transaction("abort");
    r.rebalanced();
    r.recordsEmitted(5);
    r.recordsDropped(6);
    r.recordsDeadLettered(1);
    r.recordsConsumed(-3); // counters only go up: ignored
    r.recordsConsumed(Number.NaN);
    const f = parsePrometheusText(prometheusText({ snapshot: r.snapshot() }));
    expect(sampleValue(f, "fv_timer_fires_total", { stage: "1" })).toBe(5);
    expect(sampleValue(f, "fv_late_records_dropped_total", { stage: "0" })).toBe(4);
    expect(sampleValue(f, "fv_checkpoint_failures_total", { kind: "error" })).toBe(2);
    expect(sampleValue(f, "fv_checkpoint_failures_total", { kind: "timeout" })).toBe(1);
    expect(sampleValue(f, "fv_loop_restarts_total")).toBe(1);
    expect(sampleValue(f, "fv_transactions_total", { result: "commit" })).toBe(2);
    expect(sampleValue(f, "fv_transactions_total", { result: "abort" })).toBe(1);
    expect(sampleValue(f, "fv_rebalances_total")).toBe(1);
    expect(sampleValue(f, "fv_records_emitted_total")).toBe(5);
    expect(sampleValue(f, "fv_records_dropped_total")).toBe(6);
    expect(sampleValue(f, "fv_records_dead_lettered_total")).toBe(1);
    expect(sampleValue(f, "fv_records_consumed_total")).toBeUndefined();
  });

  test("latencies land in cumulative buckets, in seconds", () => {
    const r = new MetricsRecorder();
    r.stepLatency(0, 1, "filter", 0.003); // 3 µs
    r.stepLatency(0, 1, "filter", 0.2); // 200 µs
    r.stepLatency(0, 1, "filter", 5000); // 5 s: only +Inf
    r.checkpointCommitted(12);
    const f = parsePrometheusText(prometheusText({ snapshot: r.snapshot() }));
    const labels = { stage: "0", step: "1", op: "filter" };
    expect(sampleValue(f, "fv_step_latency_seconds_bucket", { ...labels, le: "0.000005" })).toBe(1);
    expect(sampleValue(f, "fv_step_latency_seconds_bucket", { ...labels, le: "0.00025" })).toBe(2);
    expect(sampleValue(f, "fv_step_latency_seconds_bucket", { ...labels, le: "1" })).toBe(2);
    expect(sampleValue(f, "fv_step_latency_seconds_bucket", { ...labels, le: "+Inf" })).toBe(3);
    expect(sampleValue(f, "fv_step_latency_seconds_count", labels)).toBe(3);
    expect(sampleValue(f, "fv_step_latency_seconds_sum", labels)).toBeCloseTo(5.000203, 9);
    expect(sampleValue(f, "fv_checkpoint_commit_duration_seconds_bucket", { le: "0.025" })).toBe(1);
    expect(sampleValue(f, "fv_checkpoint_commit_duration_seconds_bucket", { le: "0.01" })).toBe(0);
    expect(sampleValue(f, "fv_checkpoint_commits_total")).toBe(1);
  });

  test("snapshots cross a structured clone and the Workers' snapshots add up", () => {
    const a = new MetricsRecorder();
    const b = new MetricsRecorder();
    a.recordsConsumed(10);
    b.recordsConsumed(5);
    a.poisonRecords(0, "type_error", 1);
    b.poisonRecords(0, "type_error", 2);
    b.poisonRecords(0, "invalid_json", 1);
    a.stepLatency(0, 0, "select", 0.01);
    b.stepLatency(0, 0, "select", 0.01);
    b.stepLatency(1, 0, "filter", 0.01);
    const merged = mergeSnapshots(structuredClone(a.snapshot()), structuredClone(b.snapshot()));
    const f = parsePrometheusText(prometheusText({ snapshot: merged }));
    expect(sampleValue(f, "fv_records_consumed_total")).toBe(15);
    expect(sampleValue(f, "fv_poison_records_total", { reason: "type_error" })).toBe(3);
    expect(sampleValue(f, "fv_poison_records_total", { reason: "invalid_json" })).toBe(1);
    expect(sampleValue(f, "fv_step_latency_seconds_count", { stage: "0", step: "0", op: "select" })).toBe(2);
    expect(sampleValue(f, "fv_step_latency_seconds_count", { stage: "1", step: "0", op: "filter" })).toBe(1);
    // Merging copies: the recorders' own counts stay theirs.
    expect(a.snapshot().counters["fv_records_consumed_total"]![0]!.value).toBe(10);
  });

  test("per-partition offset, lag and state size become gauges; unknown fields are left out", () => {
    const f = parsePrometheusText(
      prometheusText({ partitions: [{ topic: "trades", partition: 0, offset: 120, lag: 5, stateBytes: 4096 }, { topic: "trades", partition: 1, offset: 7 }] }),
    );
    expect(sampleValue(f, "fv_partition_offset", { topic: "trades", partition: "0" })).toBe(120);
    expect(sampleValue(f, "fv_partition_lag", { topic: "trades", partition: "0" })).toBe(5);
    expect(sampleValue(f, "fv_partition_state_bytes", { topic: "trades", partition: "0" })).toBe(4096);
    expect(sampleValue(f, "fv_partition_offset", { topic: "trades", partition: "1" })).toBe(7);
    expect(sampleValue(f, "fv_partition_lag", { topic: "trades", partition: "1" })).toBeUndefined();
  });

  test("label values and help text are escaped", () => {
    const text = writeExposition([
      { name: "fv_x_total", help: 'a \\ b\nc', type: "counter", samples: [{ labels: { reason: 'say "hi"\\\n' }, value: 1 }] },
      { name: "fv_y", help: "y", type: "gauge", samples: [{ labels: {}, value: Infinity }, { labels: { a: "1" }, value: Number.NaN }] },
    ]);
    expect(text).toContain('fv_x_total{reason="say \\"hi\\"\\\\\\n"} 1');
    expect(text).toContain("# HELP fv_x_total a \\\\ b\\nc");
    const f = parsePrometheusText(text);
    expect(sampleValue(f, "fv_x_total", { reason: 'say "hi"\\\n' })).toBe(1);
    expect(sampleValue(f, "fv_y")).toBe(Infinity);
    expect(() => writeExposition([{ name: "bad name", help: "", type: "gauge", samples: [] }])).toThrow(/invalid Prometheus metric name/);
  });

  test("a counter an older record does not carry is left to the events, not reported as 0", () => {
    const { transactionsCommitted: _c, transactionsAborted: _a, ...older } = RECORD.metrics!;
    const recorder = new MetricsRecorder();
    recorder.transaction("abort");
    const f = parsePrometheusText(prometheusText({ record: { ...RECORD, metrics: older as never }, snapshot: recorder.snapshot() }));
    expect(sampleValue(f, "fv_transactions_total", { result: "abort" })).toBe(1);
    expect(sampleValue(f, "fv_transactions_total", { result: "commit" })).toBeUndefined();
    expect(sampleValue(f, "fv_records_consumed_total")).toBe(1000);
  });

  test("a record without counters gives only its info and status", () => {
    const names = metricsFromBuildRecord({ id: "b", pipeline: "p", kind: "stream", status: "FAILED" }).map((f) => f.name);
    expect(names).toEqual(["fv_build_info", "fv_build_status"]);
  });
});
