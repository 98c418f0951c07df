/**
 * A strict parser of the Prometheus text format 0.0.4, for tests: it throws on any line a
 * Prometheus server would refuse, so "parses" means "Prometheus would scrape it".
 */
export interface ParsedSample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface ParsedFamily {
  name: string;
  type?: string;
  help?: string;
  samples: ParsedSample[];
}

const NAME = "[a-zA-Z_:][a-zA-Z0-9_:]*";
const SAMPLE = new RegExp(`^(${NAME})(?:\\{(.*)\\})?[ \\t]+(\\S+)(?:[ \\t]+-?\\d+)?$`);
const TYPES = new Set(["counter", "gauge", "histogram", "summary", "untyped"]);

function parseLabels(text: string, line: string): Record<string, string> {
  const labels: Record<string, string> = {};
  let i = 0;
  while (i < text.length) {
    const name = /^[a-zA-Z_][a-zA-Z0-9_]*/.exec(text.slice(i))?.[0];
    if (!name || text[i + name.length] !== "=" || text[i + name.length + 1] !== '"') throw new Error(`bad label in: ${line}`);
    i += name.length + 2;
    let value = "";
    for (;;) {
      const ch = text[i++];
      if (ch === undefined) throw new Error(`unterminated label value in: ${line}`);
      if (ch === '"') break;
      if (ch === "\\") {
        const next = text[i++];
        if (next === "n") value += "\n";
        else if (next === "\\" || next === '"') value += next;
        else throw new Error(`bad escape in: ${line}`);
      } else value += ch;
    }
    if (name in labels) throw new Error(`label ${name} twice in: ${line}`);
    labels[name] = value;
    if (text[i] === ",") i++;
    else if (i < text.length) throw new Error(`expected , between labels in: ${line}`);
  }
  return labels;
}

/** As Prometheus reads a value (Go's strconv.ParseFloat): NaN and Inf in any case. */
function parseValue(text: string, line: string): number {
  const special = /^([+-]?)(inf|infinity|nan)$/i.exec(text);
  if (special) return special[2]!.toLowerCase() === "nan" ? NaN : special[1] === "-" ? -Infinity : Infinity;
  const value = Number(text);
  if (text.trim() === "" || Number.isNaN(value)) throw new Error(`bad value in: ${line}`);
  return value;
}

/** The family a sample belongs to: histogram series carry `_bucket`, `_sum` and `_count` suffixes. */
function familyOf(sample: string, families: Map<string, ParsedFamily>): ParsedFamily | undefined {
  const direct = families.get(sample);
  if (direct) return direct;
  const base = sample.replace(/_(bucket|sum|count)$/, "");
  const family = families.get(base);
  return family && (family.type === "histogram" || family.type === "summary") ? family : undefined;
}

export function parsePrometheusText(text: string): Map<string, ParsedFamily> {
  if (text.length > 0 && !text.endsWith("\n")) throw new Error("the exposition must end with a newline");
  const families = new Map<string, ParsedFamily>();
  const seen = new Set<string>();
  for (const line of text.split("\n")) {
    if (line === "") continue;
    const meta = /^#\s+(HELP|TYPE)\s+(\S+)(?:\s+(.*))?$/.exec(line);
    if (meta) {
      const [, kind, name, rest = ""] = meta;
      if (!new RegExp(`^${NAME}$`).test(name!)) throw new Error(`bad metric name in: ${line}`);
      const family = families.get(name!) ?? families.set(name!, { name: name!, samples: [] }).get(name!)!;
      if (kind === "TYPE") {
        if (family.type) throw new Error(`second TYPE for ${name}`);
        if (family.samples.length) throw new Error(`TYPE for ${name} after its samples`);
        if (!TYPES.has(rest)) throw new Error(`unknown type in: ${line}`);
        family.type = rest;
      } else {
        family.help = rest.replace(/\\n/g, "\n").replace(/\\\\/g, "\\");
      }
      continue;
    }
    if (line.startsWith("#")) continue;
    const match = SAMPLE.exec(line);
    if (!match) throw new Error(`not a sample line: ${line}`);
    const [, name, labelText, valueText] = match;
    const sample = { name: name!, labels: labelText ? parseLabels(labelText, line) : {}, value: parseValue(valueText!, line) };
    const series = `${sample.name}${JSON.stringify(Object.entries(sample.labels).sort())}`;
    if (seen.has(series)) throw new Error(`series twice: ${line}`);
    seen.add(series);
    const family = familyOf(sample.name, families) ?? families.set(sample.name, { name: sample.name, samples: [] }).get(sample.name)!;
    family.samples.push(sample);
  }
  for (const family of families.values()) {
    if (family.type !== "histogram") continue;
    const series = new Map<string, number[]>();
    for (const s of family.samples.filter((s) => s.name.endsWith("_bucket"))) {
      const { le, ...rest } = s.labels;
      if (le === undefined) throw new Error(`${family.name}_bucket without le`);
      const key = JSON.stringify(Object.entries(rest).sort());
      series.set(key, [...(series.get(key) ?? []), s.value]);
    }
    for (const counts of series.values()) {
      counts.reduce((prev, n) => {
        if (n < prev) throw new Error(`${family.name} buckets are not cumulative`);
        return n;
      }, 0);
    }
  }
  return families;
}

/** The value of one series, or undefined. */
export function sampleValue(families: Map<string, ParsedFamily>, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const family of families.values()) {
    for (const s of family.samples) {
      if (s.name !== name) continue;
      const keys = Object.keys(labels);
      if (keys.length === Object.keys(s.labels).length && keys.every((k) => s.labels[k] === labels[k])) return s.value;
    }
  }
  return undefined;
}
