/**
 * Metrics: the `Metrics` event interface (no-op by default), an in-memory recorder whose
 * snapshots cross Worker boundaries, and the Prometheus text of a scrape.
 *
 * @example
 * import { MetricsRecorder, prometheusText } from "./metrics/index.ts";
 * const recorder = new MetricsRecorder();
 * recorder.rebalanced();
 * prometheusText({ record, snapshot: recorder.snapshot() });
 */
export { type Metrics, noopMetrics } from "./metrics.ts";
export { type MetricDef, type MetricKey, type MetricSource, type MetricType, metricCatalogue } from "./catalogue.ts";
export { emptySnapshot, mergeSnapshots, MetricsRecorder, type MetricsSnapshot } from "./recorder.ts";
export { metricsFromBuildRecord } from "./build-record.ts";
export {
  formatValue,
  type HistogramSample,
  type Labels,
  type MetricFamily,
  PROMETHEUS_CONTENT_TYPE,
  type ValueSample,
  writeExposition,
} from "./exposition.ts";
export { type PartitionStatus, prometheusText, type ScrapeSources, scrapeFamilies } from "./prometheus.ts";
