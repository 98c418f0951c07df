/**
 * A `Metrics` that counts in memory and hands its counts out as plain data. A consumer Worker
 * records into its own recorder and posts `snapshot()` (cumulative, so a lost message costs
 * nothing); the main thread keeps the latest snapshot of each Worker and merges them with
 * `mergeSnapshots` when `/metrics` is scraped.
 */
import { type MetricDef, metricCatalogue } from "./catalogue.ts";
import type { HistogramSample, Labels, ValueSample } from "./exposition.ts";
import type { Metrics } from "./metrics.ts";

/** Counts by family name, one entry per label set. Structured-clone safe (posts to and from Workers). */
export interface MetricsSnapshot {
  counters: Record<string, ValueSample[]>;
  histograms: Record<string, HistogramSample[]>;
}

export const emptySnapshot = (): MetricsSnapshot => ({ counters: {}, histograms: {} });

type CounterCell = { labels: Labels; value: number };
type HistogramCell = { labels: Labels; counts: number[]; sum: number; count: number };

const labelKey = (labels: Labels): string => JSON.stringify(Object.entries(labels));

/**
 * @example
 * const recorder = new MetricsRecorder();
 * recorder.rebalanced();
 * recorder.stepLatency(0, 0, "filter", 0.02);
 * postMessage({ type: "metrics", snapshot: recorder.snapshot() });
 */
export class MetricsRecorder implements Metrics {
  readonly #counters = new Map<string, Map<string, CounterCell>>();
  readonly #histograms = new Map<string, Map<string, HistogramCell>>();

  recordsConsumed(count: number): void {
    this.#add(metricCatalogue.recordsConsumed, "", {}, count);
  }
  recordsEmitted(count: number): void {
    this.#add(metricCatalogue.recordsEmitted, "", {}, count);
  }
  recordsDropped(count: number): void {
    this.#add(metricCatalogue.recordsDropped, "", {}, count);
  }
  poisonRecords(_stage: number, reason: string, count: number): void {
    // The build record counts poison by reason only; so does the family, so the two agree.
    this.#add(metricCatalogue.poisonRecords, reason, { reason }, count);
  }
  recordsDeadLettered(count: number): void {
    this.#add(metricCatalogue.recordsDeadLettered, "", {}, count);
  }
  stepLatency(stage: number, step: number, op: string, ms: number): void {
    this.#observe(metricCatalogue.stepLatency, `${stage}:${step}:${op}`, () => ({ stage: String(stage), step: String(step), op }), ms / 1000);
  }
  timersFired(stage: number, count: number): void {
    this.#add(metricCatalogue.timerFires, String(stage), { stage: String(stage) }, count);
  }
  checkpointCommitted(durationMs: number): void {
    this.#add(metricCatalogue.checkpointCommits, "", {}, 1);
    this.#observe(metricCatalogue.checkpointDuration, "", () => ({}), durationMs / 1000);
  }
  checkpointFailed(kind: "timeout" | "error"): void {
    this.#add(metricCatalogue.checkpointFailures, kind, { kind }, 1);
    if (kind === "timeout") this.#add(metricCatalogue.checkpointTimeouts, "", {}, 1);
  }
  lateRecordsDropped(stage: number, count: number): void {
    this.#add(metricCatalogue.lateRecordsDropped, String(stage), { stage: String(stage) }, count);
  }
  transaction(result: "commit" | "abort"): void {
    this.#add(metricCatalogue.transactions, result, { result }, 1);
  }
  rebalanced(): void {
    this.#add(metricCatalogue.rebalances, "", {}, 1);
  }
  loopRestarted(): void {
    this.#add(metricCatalogue.loopRestarts, "", {}, 1);
  }
  httpCall(stage: number, step: number, status: string, ms: number): void {
    const at = { stage: String(stage), step: String(step) };
    this.#add(metricCatalogue.httpCalls, `${stage}:${step}:${status}`, { ...at, status }, 1);
    this.#observe(metricCatalogue.httpCallDuration, `${stage}:${step}`, () => at, ms / 1000);
  }
  httpRetried(stage: number, step: number): void {
    this.#add(metricCatalogue.httpRetries, `${stage}:${step}`, { stage: String(stage), step: String(step) }, 1);
  }

  /** A copy of every count so far. */
  snapshot(): MetricsSnapshot {
    const out = emptySnapshot();
    for (const [name, cells] of this.#counters) out.counters[name] = [...cells.values()].map((c) => ({ labels: { ...c.labels }, value: c.value }));
    for (const [name, cells] of this.#histograms) {
      out.histograms[name] = [...cells.values()].map((c) => ({ labels: { ...c.labels }, counts: [...c.counts], sum: c.sum, count: c.count }));
    }
    return out;
  }

  #add(def: MetricDef, key: string, labels: Labels, n: number): void {
    // Counters only go up: a negative or non-finite count is a caller bug, not a reading.
    if (!(n > 0) || n === Infinity) return;
    let cells = this.#counters.get(def.name);
    if (!cells) this.#counters.set(def.name, (cells = new Map()));
    const cell = cells.get(key);
    if (cell) cell.value += n;
    else cells.set(key, { labels, value: n });
  }

  #observe(def: MetricDef, key: string, labels: () => Labels, seconds: number): void {
    if (!Number.isFinite(seconds) || seconds < 0) return;
    const bounds = def.buckets!;
    let cells = this.#histograms.get(def.name);
    if (!cells) this.#histograms.set(def.name, (cells = new Map()));
    let cell = cells.get(key);
    if (!cell) cells.set(key, (cell = { labels: labels(), counts: new Array<number>(bounds.length + 1).fill(0), sum: 0, count: 0 }));
    let i = 0;
    while (i < bounds.length && seconds > bounds[i]!) i++;
    cell.counts[i]!++;
    cell.sum += seconds;
    cell.count++;
  }
}

/**
 * Adds snapshots together (the Workers of one process). Histograms of one family share their
 * buckets (the catalogue's), so their counts add index by index.
 */
export function mergeSnapshots(...snapshots: MetricsSnapshot[]): MetricsSnapshot {
  const counters = new Map<string, Map<string, ValueSample>>();
  const histograms = new Map<string, Map<string, HistogramSample>>();
  for (const snapshot of snapshots) {
    for (const [name, samples] of Object.entries(snapshot.counters)) {
      const cells = counters.get(name) ?? counters.set(name, new Map()).get(name)!;
      for (const s of samples) {
        const key = labelKey(s.labels);
        const cell = cells.get(key);
        if (cell) cell.value += s.value;
        else cells.set(key, { labels: { ...s.labels }, value: s.value });
      }
    }
    for (const [name, samples] of Object.entries(snapshot.histograms)) {
      const cells = histograms.get(name) ?? histograms.set(name, new Map()).get(name)!;
      for (const s of samples) {
        const key = labelKey(s.labels);
        const cell = cells.get(key);
        if (!cell) {
          cells.set(key, { labels: { ...s.labels }, counts: [...s.counts], sum: s.sum, count: s.count });
          continue;
        }
        s.counts.forEach((n, i) => (cell.counts[i] = (cell.counts[i] ?? 0) + n));
        cell.sum += s.sum;
        cell.count += s.count;
      }
    }
  }
  const out = emptySnapshot();
  for (const [name, cells] of counters) out.counters[name] = [...cells.values()];
  for (const [name, cells] of histograms) out.histograms[name] = [...cells.values()];
  return out;
}
