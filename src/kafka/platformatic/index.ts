/**
 * The Kafka port on @platformatic/kafka (pure JS: runs on Bun, Deno and Node). One file per part:
 * `consumer.ts` (the group member), `producer.ts`, `transactions.ts`, `admin.ts`, and `errors.ts`
 * (how the library's errors are sorted); `assigner.ts` and `records.ts` serve them.
 */
import type { Consumer as PltConsumer } from "@platformatic/kafka";
import type { KafkaClient } from "../port.ts";
import { GroupMembers } from "../shared.ts";
import { leftoversById } from "../leftovers.ts";
import { PlatformaticAdmin } from "./admin.ts";
import { PlatformaticConsumer } from "./consumer.ts";
import { PlatformaticProducer } from "./producer.ts";
import { PlatformaticTransactionalProducer } from "./transactions.ts";

/** The pure-JS client. Its transactions take the GroupMetadata of its own consumers. */
export function platformaticClient(brokers: string[]): KafkaClient {
  const members = new GroupMembers<PltConsumer>("platformatic");
  // Per transactional id, for the life of the client: a session's new producer settles what the last one's may have left open.
  const leftoversOf = leftoversById();
  return {
    name: "platformatic",
    consumer: (options) => new PlatformaticConsumer(brokers, options, members),
    producer: ({ clientId }) => new PlatformaticProducer(brokers, clientId),
    transactionalProducer: ({ clientId, transactionalId, log }) => new PlatformaticTransactionalProducer(brokers, clientId, transactionalId, members, leftoversOf(transactionalId), log),
    admin: ({ clientId }) => new PlatformaticAdmin(brokers, clientId),
  };
}
