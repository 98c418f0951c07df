/**
 * The Prometheus text exposition format, version 0.0.4: the writer, nothing else.
 * https://prometheus.io/docs/instrumenting/exposition_formats/#text-based-format
 */
import type { MetricType } from "./catalogue.ts";

/** The content type a scrape of `writeExposition` output is served with. */
export const PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

export type Labels = Readonly<Record<string, string>>;

export interface ValueSample {
  labels: Labels;
  value: number;
}

/** One histogram series: `counts[i]` observations fell in bucket i (not cumulative); the last entry is `+Inf`. */
export interface HistogramSample {
  labels: Labels;
  counts: number[];
  sum: number;
  count: number;
}

export type MetricFamily =
  | { name: string; help: string; type: "counter" | "gauge"; samples: ValueSample[] }
  | { name: string; help: string; type: "histogram"; buckets: readonly number[]; samples: HistogramSample[] };

const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;

const escapeHelp = (text: string) => text.replace(/\\/g, "\\\\").replace(/\n/g, "\\n");
const escapeLabel = (text: string) => text.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, '\\"');

/** A sample value as Prometheus reads it: `+Inf`, `-Inf`, `NaN`, or a Go-parsable float. */
export function formatValue(value: number): string {
  if (Number.isNaN(value)) return "NaN";
  if (value === Infinity) return "+Inf";
  if (value === -Infinity) return "-Inf";
  return String(value);
}

function labelText(labels: Labels, extra?: [string, string]): string {
  const parts: string[] = [];
  for (const [name, value] of Object.entries(labels)) {
    if (!LABEL_NAME.test(name)) throw new Error(`invalid Prometheus label name ${JSON.stringify(name)}`);
    parts.push(`${name}="${escapeLabel(value)}"`);
  }
  if (extra) parts.push(`${extra[0]}="${escapeLabel(extra[1])}"`);
  return parts.length ? `{${parts.join(",")}}` : "";
}

/**
 * Writes metric families as Prometheus text. A family with no samples still gets its HELP and
 * TYPE lines, so a dashboard finds every name from the first scrape on.
 *
 * @example
 * writeExposition([{ name: "fv_rebalances_total", help: "Rebalances.", type: "counter", samples: [{ labels: {}, value: 2 }] }]);
 * // "# HELP fv_rebalances_total Rebalances.\n# TYPE fv_rebalances_total counter\nfv_rebalances_total 2\n"
 */
export function writeExposition(families: readonly MetricFamily[]): string {
  let out = "";
  for (const family of families) {
    if (!METRIC_NAME.test(family.name)) throw new Error(`invalid Prometheus metric name ${JSON.stringify(family.name)}`);
    out += `# HELP ${family.name} ${escapeHelp(family.help)}\n# TYPE ${family.name} ${family.type satisfies MetricType}\n`;
    if (family.type === "histogram") {
      for (const sample of family.samples) {
        let cumulative = 0;
        family.buckets.forEach((bound, i) => {
          cumulative += sample.counts[i] ?? 0;
          out += `${family.name}_bucket${labelText(sample.labels, ["le", formatValue(bound)])} ${cumulative}\n`;
        });
        out += `${family.name}_bucket${labelText(sample.labels, ["le", "+Inf"])} ${sample.count}\n`;
        out += `${family.name}_sum${labelText(sample.labels)} ${formatValue(sample.sum)}\n`;
        out += `${family.name}_count${labelText(sample.labels)} ${sample.count}\n`;
      }
    } else {
      for (const sample of family.samples) out += `${family.name}${labelText(sample.labels)} ${formatValue(sample.value)}\n`;
    }
  }
  return out;
}
