import { FvError } from "../errors.ts";
import type { KafkaClientFactory } from "./port.ts";

/** The Kafka adapters, and `auto`: the pure-JS client on every runtime (librdkafka only when asked for). */
export const KAFKA_CLIENTS = ["auto", "platformatic", "confluent"] as const;
export type KafkaClientName = (typeof KAFKA_CLIENTS)[number];

/** An adapter chosen for a run, with why (for the startup log line). */
export interface ResolvedKafkaClient {
  name: "platformatic" | "confluent";
  factory: KafkaClientFactory;
  /** e.g. "librdkafka 2.15.1 on Node 24.21.0", or that auto chose the pure-JS client. */
  detail: string;
}

/** Node itself, not Bun or Deno (both also answer `process.versions.node`). */
function runningOnNode(): boolean {
  const g = globalThis as { Bun?: unknown; Deno?: unknown; process?: { versions?: { node?: string } } };
  return g.Bun === undefined && g.Deno === undefined && typeof g.process?.versions?.node === "string";
}

function nodeVersion(): string {
  return (globalThis as { process?: { versions?: { node?: string } } }).process?.versions?.node ?? "?";
}

async function importConfluent(): Promise<{ factory: KafkaClientFactory; version: string }> {
  const mod = await import("./confluent/index.ts");
  const lib = mod.loadLibrary();
  return { factory: mod.confluentClient, version: lib.librdkafkaVersion };
}

/**
 * Picks the adapter for a run. `auto` takes the pure-JS client on every runtime: on Node it ran
 * 1.5 to 1.9 times librdkafka's rate in every benchmark workload (docs/benchmarks.md), and only
 * it can run standbys. `confluent` (librdkafka, Node only) fails with a clear error when the
 * addon does not load.
 * @example
 * const { name, factory } = await resolveKafkaClient("auto");
 */
export async function resolveKafkaClient(name: string): Promise<ResolvedKafkaClient> {
  switch (name) {
    case "platformatic":
      return { name, factory: (await import("./platformatic/index.ts")).platformaticClient, detail: "@platformatic/kafka (pure JS)" };
    case "confluent": {
      try {
        const { factory, version } = await importConfluent();
        return { name, factory, detail: `@confluentinc/kafka-javascript, librdkafka ${version} on Node ${nodeVersion()}` };
      } catch (error) {
        const where = runningOnNode() ? `Node ${nodeVersion()}` : "this runtime (it loads on Node only)";
        throw new FvError(
          "INVALID_SETTINGS",
          `STREAM_KAFKA_CLIENT=confluent: the librdkafka addon @confluentinc/kafka-javascript does not load on ${where}: ${(error as Error).message.split("\n")[0]}`,
          { cause: error },
        );
      }
    }
    case "auto": {
      const chosen = await resolveKafkaClient("platformatic");
      return { ...chosen, detail: `${chosen.detail}; auto (STREAM_KAFKA_CLIENT=confluent for librdkafka${runningOnNode() ? "" : ", on Node only"})` };
    }
    default:
      throw new FvError("INVALID_SETTINGS", `unknown Kafka client "${name}": use ${KAFKA_CLIENTS.join(", ")}`);
  }
}

/** Loads a Kafka adapter by name. Dynamic, so an adapter's library loads only when chosen. */
export async function loadKafkaClient(name: string): Promise<KafkaClientFactory> {
  return (await resolveKafkaClient(name)).factory;
}
