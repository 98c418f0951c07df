/**
 * How the pure-JS adapter sorts @platformatic/kafka's errors: by the library's own properties
 * (`needsRejoin`, `apiId`, `canRetry`, nested `code`s), never by their message text.
 */
import { findErrorBy } from "@platformatic/kafka";
import { FvError } from "../../errors.ts";

/** Broker errors (by the library's `apiId`) that mean this member or producer was fenced. */
const FENCED_API_IDS = ["ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID", "FENCED_INSTANCE_ID", "INVALID_PRODUCER_EPOCH", "PRODUCER_FENCED", "REBALANCE_IN_PROGRESS"];
/**
 * Transaction and coordinator states that an abort and a fresh start get past. With them the
 * broker's UNKNOWN_SERVER_ERROR: the fault soak met it once, from EndTxn a second after a broker
 * restart, and the process failed. A fresh start (new clients; a new transactional producer
 * fences the old one, and the coordinator ends its transaction one way, atomically) gets past a
 * broker that is still settling; one that answers so for good fails the loop after its
 * consecutive restarts.
 */
const ABORTABLE_API_IDS = ["INVALID_TXN_STATE", "CONCURRENT_TRANSACTIONS", "COORDINATOR_LOAD_IN_PROGRESS", "NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE", "UNSTABLE_OFFSET_COMMIT", "UNKNOWN_SERVER_ERROR"];

/**
 * Sorts a library error by the recovery it needs, from the library's own properties
 * (`needsRejoin`, `apiId`, `canRetry`, `code`), searched through nested errors:
 *   - fenced: the group moved on (needs a rejoin) or the producer was fenced;
 *   - retryable: a network failure or timeout anywhere in the chain (a broker restarting), a
 *     transaction or coordinator state that passes, or retries the library gave up on although
 *     each attempt was retriable (`fetch failed 4 times.` while the broker was down);
 *   - fatal: the rest (a non-retriable broker answer, a misuse of the library).
 */
export function classify(error: unknown, what: string): FvError {
  if (error instanceof FvError) return error;
  const text = error instanceof Error ? error.message : String(error);
  const has = (property: string, value: unknown) => findErrorBy(error as Error, property, value) !== null;
  const fenced = has("needsRejoin", true) || has("fencedInstanceId", true) || FENCED_API_IDS.some((id) => has("apiId", id));
  const transient = has("code", "PLT_KFK_NETWORK") || has("code", "PLT_KFK_TIMEOUT") || ABORTABLE_API_IDS.some((id) => has("apiId", id));
  const retriedOut = has("code", "PLT_KFK_MULTIPLE") && !has("canRetry", false);
  const code = fenced ? "KAFKA_FENCED" : transient || retriedOut || has("canRetry", true) ? "KAFKA_RETRYABLE" : "KAFKA_FATAL";
  // deno-lint-ignore no-explicit-any
  const nested = (error as any)?.errors as unknown[] | undefined;
  const detail = Array.isArray(nested) && nested.length ? ` (${[...new Set(nested.map((e) => (e as Error)?.message ?? String(e)))].slice(0, 3).join("; ")})` : "";
  // No broker answered at all: say so where the stream starts (run-stream.ts), not "metadata failed 4 times".
  // The library's NetworkError holds the socket's error (ECONNREFUSED, ETIMEDOUT …) as its cause.
  const network = findErrorBy(error as Error, "code", "PLT_KFK_NETWORK");
  const socketCode = (network?.cause as { code?: unknown } | undefined)?.code;
  const unreachable = socketCode === "ECONNREFUSED"
    ? "connection refused"
    : socketCode === "ETIMEDOUT" || has("code", "PLT_KFK_TIMEOUT")
    ? "a timeout"
    : network
    ? `no connection${typeof socketCode === "string" ? `: ${socketCode}` : ""}`
    : undefined;
  // A client this process closed (its session ended): the session restarts with new clients,
  // but a retry on this one can never succeed.
  const clientClosed = has("closed", true);
  // A newer consumer took this static member's group.instance.id (see consumer-loop.ts, `instanceFenced`).
  const instanceFenced = has("fencedInstanceId", true);
  const context = {
    ...(unreachable && !clientClosed ? { unreachable } : {}),
    ...(clientClosed ? { clientClosed: true } : {}),
    ...(instanceFenced ? { instanceFenced: true } : {}),
  };
  return new FvError(code, `${what} failed: ${text}${detail}`, { cause: error, ...(Object.keys(context).length ? { context } : {}) });
}

/**
 * The library's "Unknown topic <name>." (a UserError it makes of the broker's
 * UNKNOWN_TOPIC_OR_PARTITION in a Metadata answer, dropping the broker's code, so this is the one
 * error told by its text). Joining the group, it is retryable (consumer.ts): run-stream.ts checks
 * at start that the inputs exist, so an input unknown at a rejoin is a broker that restarted and
 * has not loaded its metadata yet (a loop failed for good on it). A join counts towards the loop's
 * consecutive restarts, so an input deleted while the stream runs still ends it. Elsewhere (a
 * send to a deleted output) it stays fatal: a session that processed batches resets that count.
 */
export function unknownTopic(error: unknown): boolean {
  const user = findErrorBy(error as Error, "code", "PLT_KFK_USER");
  return user !== null && /^Unknown topic .*\.$/.test(user.message);
}

/** The broker's TOPIC_ALREADY_EXISTS (error code 36) anywhere in the chain: another process created the topic first. */
export function topicAlreadyExists(error: unknown): boolean {
  return findErrorBy(error as Error, "apiId", "TOPIC_ALREADY_EXISTS") !== null || findErrorBy(error as Error, "apiCode", 36) !== null;
}

/** UNSTABLE_OFFSET_COMMIT anywhere in the chain: a transaction that commits these offsets is still pending. */
export function unstableOffsetCommit(error: unknown): boolean {
  return findErrorBy(error as Error, "apiId", "UNSTABLE_OFFSET_COMMIT") !== null;
}

/** The library's pause before it retries a failed request (its default for every error). */
const LIBRARY_RETRY_DELAY_MS = 1000;

/**
 * The pause before the library retries a request. CONCURRENT_TRANSACTIONS is what the broker
 * answers the first request of the next transaction while it still writes the last one's
 * markers, a few milliseconds: the library's flat 1 s made every transaction after the first
 * wait a second (Kafka's Java producer retries it after 20 ms). Everything else keeps the
 * library's pause, which the fault soak was tuned with.
 */
export function retryDelay(_client: unknown, _operation: string, attempt: number, _retries: number, error: unknown): number {
  if (findErrorBy(error as Error, "apiId", "CONCURRENT_TRANSACTIONS") !== null) return Math.min(5 * 2 ** attempt, 200);
  return LIBRARY_RETRY_DELAY_MS;
}
