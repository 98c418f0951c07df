import type { BuildRecord, BuildStatus } from "../control/types.ts";
import { metricCatalogue, type MetricDef } from "./catalogue.ts";
import type { Labels, MetricFamily, ValueSample } from "./exposition.ts";

const STATUSES: readonly BuildStatus[] = ["STARTING", "RUNNING", "STOPPED", "FAILED"];

const family = (def: MetricDef, samples: ValueSample[]): MetricFamily => ({
  name: def.name,
  help: def.help,
  type: def.type as "counter" | "gauge",
  samples,
});
const one = (value: number): ValueSample[] => [{ labels: {}, value }];
const isCount = (value: unknown): value is number => typeof value === "number" && Number.isFinite(value) && value >= 0;
const text = (value: unknown): string => (typeof value === "string" ? value : "");

/**
 * The metric families a build record carries, read from it as it is: a scrape shows the same
 * consumed / emitted / dropped / poison / commit / transaction numbers as the record sent at
 * the same moment. Counters are only present when the record has `metrics`.
 *
 * @example
 * metricsFromBuildRecord({ id: "b1", pipeline: "demo", kind: "stream", status: "RUNNING" });
 * // fv_build_info{pipeline="demo",build="b1",guarantee="",kafka_client=""} 1, fv_build_status{status="RUNNING"} 1, …
 */
export function metricsFromBuildRecord(record: BuildRecord): MetricFamily[] {
  const c = metricCatalogue;
  const m = record.metrics;
  const families: MetricFamily[] = [
    family(c.buildInfo, [{
      labels: { pipeline: record.pipeline, build: record.id, guarantee: text(m?.guarantee), kafka_client: text(m?.kafkaClient) },
      value: 1,
    }]),
    family(c.buildStatus, STATUSES.map((status) => ({ labels: { status }, value: status === record.status ? 1 : 0 }))),
  ];
  const started = record.startedAt ? Date.parse(record.startedAt) : NaN;
  if (Number.isFinite(started)) families.push(family(c.buildStartTime, one(started / 1000)));
  if (!m) return families;
  // A field the record does not carry (an older engine) is left out, not reported as 0.
  const add = (def: MetricDef, ...values: Array<[Labels, unknown]>) => {
    if (values.every(([, v]) => isCount(v))) families.push(family(def, values.map(([labels, value]) => ({ labels, value: value as number }))));
  };
  const byReason = Object.entries(m.poisonByReason ?? {}).sort(([a], [b]) => a.localeCompare(b));
  add(c.recordsConsumed, [{}, m.consumed]);
  add(c.recordsEmitted, [{}, m.emitted]);
  add(c.recordsDropped, [{}, m.dropped]);
  add(c.poisonRecords, ...byReason.map(([reason, n]): [Labels, unknown] => [{ reason }, n]));
  add(c.recordsDeadLettered, [{}, m.deadLettered]);
  add(c.checkpointCommits, [{}, m.commits]);
  if (isCount(m.checkpointFailures) && isCount(m.checkpointTimeouts)) {
    add(c.checkpointFailures, [{ kind: "error" }, m.checkpointFailures - m.checkpointTimeouts], [{ kind: "timeout" }, m.checkpointTimeouts]);
  }
  add(c.checkpointTimeouts, [{}, m.checkpointTimeouts]);
  add(c.recordsRepartitioned, [{}, m.repartitioned]);
  add(c.transactions, [{ result: "commit" }, m.transactionsCommitted], [{ result: "abort" }, m.transactionsAborted]);
  add(c.loopRestarts, [{}, m.restarts]);
  add(c.consumers, [{}, m.consumers]);
  add(c.assignedPartitions, [{}, Array.isArray(m.partitions) ? m.partitions.length : undefined]);
  add(c.recordsPerSecond, [{}, m.recordsPerSecond]);
  if (m.httpInFlight !== undefined) add(c.httpInFlight, [{}, m.httpInFlight]);
  if (m.httpBreakersOpen !== undefined) add(c.httpBreakersOpen, [{}, m.httpBreakersOpen]);
  if (m.sinkWritten !== undefined) add(c.sinkWritten, [{}, m.sinkWritten]);
  if (m.sinkDuplicates !== undefined) add(c.sinkDuplicates, [{}, m.sinkDuplicates]);
  if (m.sinksWaiting !== undefined) add(c.sinksWaiting, [{}, Object.keys(m.sinksWaiting).length]);
  return families;
}
