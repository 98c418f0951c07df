/**
 * How the librdkafka adapter sorts the library's errors: by librdkafka's own error `code` and the
 * binding's `isRetriable`, `isFatal` and `isTxnRequiresAbort`, never by their message text. No
 * runtime import of the addon: this module loads (and is tested) anywhere.
 */
import { FvError } from "../../errors.ts";

/** librdkafka error codes the adapter sorts by. */
export const ERR = {
  ASSIGN_PARTITIONS: -175,
  REVOKE_PARTITIONS: -174,
  QUEUE_FULL: -184,
  TIMED_OUT: -185,
  /** A record not delivered within message.timeout.ms (e.g. the broker was down that long). */
  MSG_TIMED_OUT: -192,
  /**
   * Records purged before delivery (still queued, or in flight): librdkafka purges the open
   * transaction's records when it is aborted, as when a fenced zombie wakes.
   */
  PURGE_QUEUE: -152,
  PURGE_INFLIGHT: -151,
  ALL_BROKERS_DOWN: -187,
  TRANSPORT: -195,
  /** A transactional producer fenced: librdkafka normalizes PRODUCER_FENCED and INVALID_PRODUCER_EPOCH to it in its transaction calls. */
  FENCED: -144,
  /**
   * The handle already hit a fatal error: librdkafka fails every later produce call with this,
   * not with the error behind it (which the binding cannot read: it has no `fatal_error()`).
   */
  FATAL: -150,
  MAX_POLL_EXCEEDED: -147,
  ILLEGAL_GENERATION: 22,
  UNKNOWN_MEMBER_ID: 25,
  REBALANCE_IN_PROGRESS: 27,
  TOPIC_ALREADY_EXISTS: 36,
  INVALID_PRODUCER_EPOCH: 47,
  FENCED_INSTANCE_ID: 82,
  PRODUCER_FENCED: 90,
} as const;

/**
 * The codes that carry fencing: a newer producer with the same transactional id (-144, and 47 / 90
 * as a delivery report of a produce request has them), the group moved on (22, 25, 27, and -147:
 * this member left it by polling too late), a newer static member with the same instance id (82).
 */
const FENCED_CODES = new Set<number>([
  ERR.FENCED, ERR.ILLEGAL_GENERATION, ERR.UNKNOWN_MEMBER_ID, ERR.REBALANCE_IN_PROGRESS,
  ERR.INVALID_PRODUCER_EPOCH, ERR.FENCED_INSTANCE_ID, ERR.PRODUCER_FENCED, ERR.MAX_POLL_EXCEEDED,
]);

/**
 * Sorts a library error by the recovery it needs:
 *   - fenced: a fencing code (FENCED_CODES);
 *   - retryable: librdkafka says the call may be retried (`isRetriable`), or the transaction needs
 *     an abort first (`isTxnRequiresAbort`), or no broker answered in time, or the records were
 *     purged undelivered (-151, -152: their transaction was aborted, so nothing of it commits);
 *   - fatal: the rest, `isFatal` ones included. A consumer's fatal error reaches the adapter as -150
 *     (_FATAL) with no way to read the code behind it (the binding has no `fatal_error()`); in a
 *     classic group its only cause is a newer static member with the same instance id, after which
 *     librdkafka asks the application to end.
 */
export function classify(error: unknown, what: string): FvError {
  if (error instanceof FvError) return error;
  // deno-lint-ignore no-explicit-any
  const e = error as any;
  const text = e?.message ?? String(error);
  const code: number | undefined = typeof e?.code === "number" ? e.code : undefined;
  const fenced = code !== undefined && FENCED_CODES.has(code);
  // Undelivered records were never acknowledged, so their offsets were not committed: a fresh
  // session (after aborting the transaction under exactly-once) reads them again.
  const retryable = e?.isRetriable || e?.isTxnRequiresAbort ||
    (code !== undefined && ([ERR.TIMED_OUT, ERR.MSG_TIMED_OUT, ERR.PURGE_QUEUE, ERR.PURGE_INFLIGHT, ERR.ALL_BROKERS_DOWN, ERR.TRANSPORT] as number[]).includes(code));
  const fvCode = fenced ? "KAFKA_FENCED" : retryable ? "KAFKA_RETRYABLE" : "KAFKA_FATAL";
  // No broker answered at all: run-stream.ts says so where the stream starts.
  const unreachable = code === ERR.ALL_BROKERS_DOWN ? "all brokers down" : code === ERR.TRANSPORT ? "no connection" : code === ERR.TIMED_OUT ? "a timeout" : undefined;
  return new FvError(fvCode, `${what} failed: ${text}${code !== undefined ? ` (librdkafka ${code})` : ""}`, {
    cause: error,
    ...(unreachable ? { context: { unreachable } } : {}),
  });
}

/**
 * `classify` for a transactional producer's calls. There, -150 (_FATAL) means the producer was
 * fenced before this call: librdkafka's fatal errors for a transactional producer are fencing by a
 * newer producer with the same transactional id, and the id or the brokers refusing transactions,
 * which the fresh producer's InitProducerId reports with their own codes. So it is fenced: the loop
 * starts a fresh session, and a cause other than fencing shows there as fatal. (The zombie test on
 * Node + librdkafka, CI of 2026-12-05: woken after the member that took its partitions had fenced
 * its id, the zombie's next produce failed with -150, and the process ended FAILED.)
 */
export function classifyTransactional(error: unknown, what: string): FvError {
  const sorted = classify(error, what);
  if (sorted.code !== "KAFKA_FATAL" || (error as { code?: unknown } | null | undefined)?.code !== ERR.FATAL) return sorted;
  return new FvError("KAFKA_FENCED", `${sorted.message}: the transactional producer hit a fatal error earlier, which for a transactional producer is fencing by a newer instance; starting a fresh producer`, { cause: error });
}

/**
 * `classify` for a consumer's calls. There, -150 (_FATAL) is a static member fenced by another
 * consumer that joined with the same `group.instance.id` (in a classic group librdkafka raises no
 * other fatal consumer error). That is a second process with the same STREAM_INSTANCE_ID, or this
 * very member: its rejoin across a broker restart, answered for a member id it never learnt, takes
 * the instance id from the member id it still holds (Node + librdkafka soak, seed 101: a stateless
 * process ended FAILED 2 s after the broker came back). So it is fenced: the loop starts a fresh
 * consumer, which takes the id back (the pure-JS library rejoins on FENCED_INSTANCE_ID by itself).
 * Two processes that keep fencing each other end with a clear error (consumer-loop.ts,
 * `#sharedInstanceId`).
 */
export function classifyConsumer(error: unknown, what: string, groupInstanceId: string | undefined): FvError {
  const sorted = classify(error, what);
  if (sorted.code !== "KAFKA_FATAL" || (error as { code?: unknown } | null | undefined)?.code !== ERR.FATAL || !groupInstanceId) return sorted;
  return new FvError("KAFKA_FENCED", `${sorted.message}: the static member ${groupInstanceId} was fenced by another consumer that joined with the same group.instance.id; starting a fresh consumer`, { cause: error, context: { instanceFenced: true } });
}

/** What librdkafka's err2str gives for -150 (ERR__FATAL), as the binding's LibrdKafkaError keeps it (the part after "Local: ", lower case). */
const FATAL_TEXT = "fatal error";

/**
 * The binding's "event.error" when it is librdkafka's fatal error, as an error with code -150 that
 * `classifyConsumer` sorts like the consume path's own; undefined for any other event error.
 *
 * A consumer's fatal error (a static member fenced by another consumer with the same instance id)
 * reaches the application once through the consumer's queue, and the binding's batch consume
 * (KafkaConsumerConsumeNum in its src/workers.cc) drops an error that comes after records in the
 * same call. Then the only word of it is the "event.error", which the binding builds from text
 * alone (`Nan::Error(err2str(event.err()))`, src/callbacks.cc): no code and no `isFatal`, and
 * LibrdKafkaError.create makes that code -1 with the message "fatal error". The member otherwise
 * got no record and no error until the stall watchdog restarted it after 15 s (Node + librdkafka,
 * the static member integration test, 1 run in about 100).
 */
export function fatalEvent(error: unknown): Error | undefined {
  // deno-lint-ignore no-explicit-any
  const e = error as any;
  if (e?.isFatal === true || e?.code === ERR.FATAL) return error as Error;
  const text = typeof e?.message === "string" ? e.message.toLowerCase() : "";
  if (text !== FATAL_TEXT && text !== `local: ${FATAL_TEXT}`) return undefined;
  return Object.assign(new Error("Local: Fatal error", { cause: error }), { code: ERR.FATAL, errno: ERR.FATAL, origin: "local", isFatal: true });
}

/** The broker's TOPIC_ALREADY_EXISTS (36): another process created the topic first. */
export const topicAlreadyExists = (error: unknown): boolean => (error as { code?: unknown } | null | undefined)?.code === ERR.TOPIC_ALREADY_EXISTS;
