/**
 * The Kafka port on @confluentinc/kafka-javascript (librdkafka). A nan addon: it loads on Node
 * only (Bun lacks the V8 symbols it needs, Deno refuses nan addons), so `loadKafkaClient` imports
 * this folder only when the client is chosen.
 *
 * The library's native (node-rdkafka style) API, not its KafkaJS-style one:
 *   - `consume(n)` pulls up to n records with a timeout, which is the port's `poll` as is; the
 *     KafkaJS API pushes records through `run({ eachBatch })` and would need a buffer and
 *     pause/resume between it and the loop (the platformatic adapter's main source of trouble);
 *   - `rebalance_cb` hands the adapter the revoke and the assign: librdkafka waits for the
 *     `unassign()` / `assign()` calls, so the adapter lets go of revoked partitions only at the
 *     loop's next poll, after its commits (the old generation still holds until then);
 *   - `sendOffsetsToTransaction` takes plain offsets (the next offset to read) and the consumer,
 *     nothing implicit about message offset + 1.
 *
 * One file per part: `consumer.ts`, `producer.ts`, `transactions.ts`, `admin.ts`, `errors.ts`, and
 * `library.ts` (loading the addon, and what every part uses of it).
 */
import type { KafkaClient } from "../port.ts";
import { GroupMembers } from "../shared.ts";
import { leftoversById } from "../leftovers.ts";
import { ConfluentAdmin } from "./admin.ts";
import { ConfluentConsumer, type ConfluentMember, KnownOffsets } from "./consumer.ts";
import { loadLibrary } from "./library.ts";
import { ConfluentProducer } from "./producer.ts";
import { ConfluentTransactionalProducer } from "./transactions.ts";

export { loadLibrary };

/** The librdkafka client (Node only). Throws a clear error when the addon does not load. Its transactions take the GroupMetadata of its own consumers. */
export function confluentClient(brokers: string[]): KafkaClient {
  const lib = loadLibrary();
  const known = new KnownOffsets();
  const members = new GroupMembers<ConfluentMember>("confluent");
  // Per transactional id, for the life of the client: a session's new producer has what the last one's may have left open ended first.
  const leftoversOf = leftoversById();
  return {
    name: "confluent",
    consumer: (options) => new ConfluentConsumer(lib, brokers, options, known, members),
    producer: ({ clientId }) => new ConfluentProducer(lib, brokers, clientId),
    transactionalProducer: ({ clientId, transactionalId, log }) => new ConfluentTransactionalProducer(lib, brokers, clientId, transactionalId, members, leftoversOf(transactionalId), log),
    admin: ({ clientId }) => new ConfluentAdmin(lib, brokers, clientId),
  };
}
