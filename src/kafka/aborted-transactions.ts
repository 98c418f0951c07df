/**
 * Read-committed filtering of aborted transactions, done right for @platformatic/kafka 1.x.
 *
 * The library filters a fetch response with one range per producer id: the last aborted
 * transaction listed for that producer, and only when its abort marker is in the same response.
 * A transactional id keeps its producer id across restarts, so a pipeline that was killed or
 * fenced twice has two aborted transactions of one producer in a partition: the library let the
 * earlier one's records through to read_committed readers (duplicates in the output, and aborted
 * changelog entries in restored state). It also let through an aborted transaction whose marker
 * fell beyond the response's size limit.
 *
 * This applies the rule of Kafka's own consumer instead of the library's filter: walk the batches
 * in offset order; a producer enters the aborted set when a listed aborted transaction of it
 * starts at or before the batch, and leaves it at its abort marker; a transactional data batch of
 * a producer in the set is aborted. An aborted batch keeps its offsets but loses its records, so
 * the stream still advances past it.
 */
import { wrapApi } from "./platformatic/api-hook.ts";

/** The shape of a record batch in the library's fetch response, as far as this filter reads it. */
export interface FetchedBatch {
  firstOffset: bigint;
  lastOffsetDelta: number;
  attributes: number;
  producerId: bigint;
  records: Array<{ key?: Uint8Array | null }>;
}

export interface FetchedPartition {
  abortedTransactions?: Array<{ producerId: bigint; firstOffset: bigint }> | null;
  records?: FetchedBatch[] | null;
}

export interface FetchResponse {
  responses: Array<{ partitions: FetchedPartition[] }>;
}

const IS_TRANSACTIONAL = 1 << 4;
const IS_CONTROL = 1 << 5;
/** Control record key: int16 version, int16 type; type 0 is ABORT, 1 is COMMIT. */
const isAbortMarker = (batch: FetchedBatch) => {
  const key = batch.records[0]?.key;
  return key != null && key.length >= 4 && ((key[2]! << 8) | key[3]!) === 0;
};

/** Empties the records of every batch that belongs to an aborted transaction. Returns how many records it removed. */
export function dropAbortedRecords(response: FetchResponse): number {
  let removed = 0;
  for (const topic of response.responses) {
    for (const partition of topic.partitions) {
      const aborted = [...(partition.abortedTransactions ?? [])].sort((a, b) => (a.firstOffset < b.firstOffset ? -1 : a.firstOffset > b.firstOffset ? 1 : 0));
      if (aborted.length === 0 || !partition.records) continue;
      const abortedProducers = new Set<bigint>();
      let next = 0;
      for (const batch of partition.records) {
        const lastOffset = batch.firstOffset + BigInt(batch.lastOffsetDelta);
        while (next < aborted.length && aborted[next]!.firstOffset <= lastOffset) abortedProducers.add(aborted[next++]!.producerId);
        if (batch.attributes & IS_CONTROL) {
          if (isAbortMarker(batch)) abortedProducers.delete(batch.producerId);
          continue;
        }
        if (batch.attributes & IS_TRANSACTIONAL && abortedProducers.has(batch.producerId) && batch.records.length) {
          removed += batch.records.length;
          batch.records = [];
        }
      }
    }
  }
  return removed;
}

/**
 * Makes one library consumer read committed data correctly: every Fetch response is filtered
 * here, by the rule above, before the library sees it, and its aborted-transaction list is then
 * emptied, so the library's own filter (which also throws on an abort marker of a transaction
 * that started before the fetched range) never runs. `fetchApi`, when given, replaces the
 * library's Fetch API first (a leaner parser of its own).
 */
// deno-lint-ignore no-explicit-any
export function filterAbortedTransactions(consumer: any, fetchApi?: (api: any) => any): void {
  wrapApi(consumer, "Fetch", (api) => {
    if (fetchApi) api = fetchApi(api);
    return (...args: unknown[]) => {
      const done = args.pop() as (error: unknown, response?: FetchResponse) => void;
      return api(...args, (fetchError: unknown, response?: FetchResponse) => {
        if (!fetchError && response) {
          dropAbortedRecords(response);
          for (const topic of response.responses) for (const partition of topic.partitions) partition.abortedTransactions = [];
        }
        done(fetchError, response);
      });
    };
  }, "the read_committed fix in src/kafka/aborted-transactions.ts");
}
