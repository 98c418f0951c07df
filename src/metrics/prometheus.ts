/**
 * Everything fv-streams knows, as one Prometheus scrape: the build record's counters, the
 * recorder's events and the per-partition status, in catalogue order.
 */
import type { BuildRecord } from "../control/types.ts";
import { type MetricDef, metricCatalogue } from "./catalogue.ts";
import { metricsFromBuildRecord } from "./build-record.ts";
import { type MetricFamily, writeExposition } from "./exposition.ts";
import type { MetricsSnapshot } from "./recorder.ts";

/** One owned partition as `/status` shows it; the fields a loop does not know yet are left out. */
export interface PartitionStatus {
  topic: string;
  partition: number;
  /** Next offset to read: the committed position. */
  offset?: number;
  /** Records between `offset` and the partition's end. */
  lag?: number;
  /** Bytes of operator state held for this partition. */
  stateBytes?: number;
  /** Where the partition is: restoring state, or running. */
  state?: "restoring" | "running";
  /** Live state keys, and the local state store's keys and bytes on disk. */
  stateKeys?: number;
  storeKeys?: number;
  storeBytesOnDisk?: number;
  /** Spilling operators: entities in memory, and the share of lookups that found theirs there. */
  cacheKeys?: number;
  cacheHitRate?: number | null;
  /** While restoring: changelog records read of those to read, entries from the local store, rate (records/s), ETA (s). */
  restore?: { read: number; total: number; fromStore: number; rate: number; etaSeconds: number | null };
}

export interface ScrapeSources {
  /** The live build record; its counters win over the events' (they are the ones the platform sees). */
  record?: BuildRecord;
  /** Counts from `MetricsRecorder`s (merged across Workers). */
  snapshot?: MetricsSnapshot;
  partitions?: readonly PartitionStatus[];
}

/** Families for the defs the snapshot holds; an empty family when it holds none, so every name shows. */
function fromSnapshot(def: MetricDef, snapshot: MetricsSnapshot | undefined): MetricFamily {
  if (def.type === "histogram") {
    return { name: def.name, help: def.help, type: "histogram", buckets: def.buckets!, samples: snapshot?.histograms[def.name] ?? [] };
  }
  return { name: def.name, help: def.help, type: def.type, samples: snapshot?.counters[def.name] ?? [] };
}

function fromPartitions(def: MetricDef, partitions: readonly PartitionStatus[], field: "offset" | "lag" | "stateBytes"): MetricFamily {
  const samples = partitions
    .filter((p) => typeof p[field] === "number")
    .map((p) => ({ labels: { topic: p.topic, partition: String(p.partition) }, value: p[field]! }));
  return { name: def.name, help: def.help, type: "gauge", samples };
}

const partitionField: Record<string, "offset" | "lag" | "stateBytes"> = {
  [metricCatalogue.partitionOffset.name]: "offset",
  [metricCatalogue.partitionLag.name]: "lag",
  [metricCatalogue.partitionStateBytes.name]: "stateBytes",
};

/** All families of one scrape, in catalogue order. */
export function scrapeFamilies(sources: ScrapeSources): MetricFamily[] {
  const fromRecord = new Map((sources.record ? metricsFromBuildRecord(sources.record) : []).map((f) => [f.name, f]));
  const partitions = sources.partitions ?? [];
  const families: MetricFamily[] = [];
  for (const def of Object.values(metricCatalogue) as MetricDef[]) {
    if (def.source === "record") {
      const recorded = fromRecord.get(def.name);
      if (recorded) families.push(recorded);
      // No record (or no counters yet): the recorder counts the same things.
      else if (def.type === "counter") families.push(fromSnapshot(def, sources.snapshot));
    } else if (def.source === "events") {
      families.push(fromSnapshot(def, sources.snapshot));
    } else {
      families.push(fromPartitions(def, partitions, partitionField[def.name]!));
    }
  }
  return families;
}

/**
 * The Prometheus text (format 0.0.4) of one scrape.
 *
 * @example
 * const text = prometheusText({ record: current, snapshot: mergeSnapshots(...workerSnapshots), partitions });
 * return new Response(text, { headers: { "content-type": PROMETHEUS_CONTENT_TYPE } });
 */
export function prometheusText(sources: ScrapeSources): string {
  return writeExposition(scrapeFamilies(sources));
}
