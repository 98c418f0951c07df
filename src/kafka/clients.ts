import { FvError } from "../errors.ts";
import type { KafkaClientFactory } from "./port.ts";

/** Loads a Kafka adapter by name. Dynamic, so an adapter's library loads only when chosen. */
export async function loadKafkaClient(name: string): Promise<KafkaClientFactory> {
  switch (name) {
    case "platformatic":
      return (await import("./platformatic.ts")).platformaticClient;
    default:
      throw new FvError("INVALID_SETTINGS", `unknown Kafka client "${name}": use platformatic`);
  }
}
