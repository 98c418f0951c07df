/**
 * How the librdkafka adapter sorts the library's errors: by librdkafka's code and the binding's
 * `isRetriable` / `isFatal` / `isTxnRequiresAbort`, not by their message. The errors are built as
 * the binding builds them (LibrdKafkaError: message, code, and the three flags), so this runs
 * without the addon.
 */
import { describe, expect, test } from "bun:test";
import { classify, classifyConsumer, classifyTransactional, ERR, fatalEvent, topicAlreadyExists } from "../../src/kafka/confluent/errors.ts";

const librdkafkaError = (code: number, message: string, flags: { isFatal?: boolean; isRetriable?: boolean; isTxnRequiresAbort?: boolean } = {}) =>
  Object.assign(new Error(message), { code, errno: code, origin: code < 0 ? "local" : "kafka", ...flags });

describe("the confluent adapter sorts library errors by their code and flags", () => {
  test("every fencing code is fenced: a newer producer, the group moving on, a newer static member", () => {
    for (const code of [ERR.FENCED, ERR.PRODUCER_FENCED, ERR.INVALID_PRODUCER_EPOCH, ERR.FENCED_INSTANCE_ID, ERR.ILLEGAL_GENERATION, ERR.UNKNOWN_MEMBER_ID, ERR.REBALANCE_IN_PROGRESS, ERR.MAX_POLL_EXCEEDED]) {
      expect(classify(librdkafkaError(code, "Broker: something"), "x").code).toBe("KAFKA_FENCED");
    }
  });

  // librdkafka's transaction calls return a fenced producer's error as fatal, with -144 as its code.
  test("a fenced transactional producer's fatal error is fenced, not fatal", () => {
    const error = librdkafkaError(ERR.FENCED, "Producer fenced by newer instance: Failed to end transaction", { isFatal: true });
    const sorted = classify(error, "committing a transaction");
    expect(sorted.code).toBe("KAFKA_FENCED");
    expect(sorted.message).toBe("committing a transaction failed: Producer fenced by newer instance: Failed to end transaction (librdkafka -144)");
  });

  // A zombie woken after its id was fenced: its next produce fails with -150, not the cause behind it.
  test("a transactional producer's -150 (its handle hit a fatal error earlier) is fenced; elsewhere -150 stays fatal", () => {
    const error = librdkafkaError(ERR.FATAL, "Local: Fatal error");
    const sorted = classifyTransactional(error, "producing in a transaction");
    expect(sorted.code).toBe("KAFKA_FENCED");
    expect(sorted.message).toStartWith("producing in a transaction failed: Local: Fatal error (librdkafka -150): ");
    expect(sorted.cause).toBe(error);
    expect(classify(error, "consuming").code).toBe("KAFKA_FATAL");
    // Its other sorting is classify's.
    expect(classifyTransactional(librdkafkaError(-152, "Local: Purged in queue"), "x").code).toBe("KAFKA_RETRYABLE");
    expect(classifyTransactional(librdkafkaError(29, "Broker: Topic authorization failed"), "x").code).toBe("KAFKA_FATAL");
    expect(classifyTransactional(librdkafkaError(ERR.FENCED, "Producer fenced", { isFatal: true }), "x").code).toBe("KAFKA_FENCED");
  });

  // The binding's "event.error" is built from librdkafka's text alone (Nan::Error(err2str(...)))
  // and LibrdKafkaError.create turns "Local: Fatal error" into code -1, message "fatal error". The
  // batch consume can drop the fatal error itself (an error after records in one call), so this
  // copy is the one a fenced static member may get: ignored, it read nothing and heard nothing
  // until the stall watchdog restarted it 15 s later.
  test("the binding's event error for librdkafka's fatal error is known by its text, and sorts as the consume path's -150", () => {
    const event = Object.assign(new Error("fatal error"), { code: -1, errno: -1, origin: "local" });
    const fatal = fatalEvent(event)!;
    expect(fatal).toBeDefined();
    expect(fatal.cause).toBe(event);
    const sorted = classifyConsumer(fatal, "fetching", "pod-7-0");
    expect(sorted.code).toBe("KAFKA_FENCED");
    expect(sorted.message).toBe("fetching failed: Local: Fatal error (librdkafka -150): the static member pod-7-0 was fenced by another consumer that joined with the same group.instance.id; starting a fresh consumer");
    expect(sorted.context).toEqual({ instanceFenced: true });
    // Without an instance id it stays fatal, as on the consume path.
    expect(classifyConsumer(fatal, "fetching", undefined).code).toBe("KAFKA_FATAL");
    // Flagged or coded fatal errors are taken as they are; other event errors are not fatal.
    const flagged = librdkafkaError(ERR.FENCED_INSTANCE_ID, "Broker: Static consumer fenced by other consumer with same group.instance.id", { isFatal: true });
    expect(fatalEvent(flagged)).toBe(flagged);
    expect(fatalEvent(librdkafkaError(ERR.FATAL, "Local: Fatal error"))?.message).toBe("Local: Fatal error");
    for (const text of ["broker transport failure", "all broker connections are down", "Local: Broker transport failure", "not fatal error"]) {
      expect(fatalEvent(Object.assign(new Error(text), { code: -1, errno: -1, origin: "local" }))).toBeUndefined();
    }
    expect(fatalEvent(undefined)).toBeUndefined();
  });

  // Node + librdkafka soak, seed 101: a static member fenced 2 s after the broker came back ended FAILED.
  test("a consumer's -150 is its static membership taken by a consumer with the same group.instance.id: fenced, when it has one", () => {
    const error = librdkafkaError(ERR.FATAL, "Local: Fatal error");
    const sorted = classifyConsumer(error, "fetching", "pod-7-0");
    expect(sorted.code).toBe("KAFKA_FENCED");
    expect(sorted.message).toBe("fetching failed: Local: Fatal error (librdkafka -150): the static member pod-7-0 was fenced by another consumer that joined with the same group.instance.id; starting a fresh consumer");
    expect(sorted.context).toEqual({ instanceFenced: true });
    expect(sorted.cause).toBe(error);
    // A dynamic member has no such fatal error: -150 stays fatal, and the rest is classify's.
    expect(classifyConsumer(error, "fetching", undefined).code).toBe("KAFKA_FATAL");
    expect(classifyConsumer(librdkafkaError(29, "Broker: Topic authorization failed"), "fetching", "pod-7-0").code).toBe("KAFKA_FATAL");
    expect(classifyConsumer(librdkafkaError(ERR.UNKNOWN_MEMBER_ID, "Broker: Unknown member"), "fetching", "pod-7-0").context).toEqual({});
  });

  test("the word 'fenced' in a message does not make an error fenced: the code decides", () => {
    expect(classify(librdkafkaError(-150, "Fatal error: fenced by something", { isFatal: true }), "x").code).toBe("KAFKA_FATAL");
    expect(classify(new Error("fenced"), "x").code).toBe("KAFKA_FATAL");
  });

  test("a call librdkafka says may be retried, a transaction that needs an abort, or no broker in time is retryable", () => {
    expect(classify(librdkafkaError(-185, "Local: Timed out", { isRetriable: true }), "x").code).toBe("KAFKA_RETRYABLE");
    expect(classify(librdkafkaError(48, "Broker: Invalid transaction state", { isTxnRequiresAbort: true }), "x").code).toBe("KAFKA_RETRYABLE");
    expect(classify(librdkafkaError(ERR.MSG_TIMED_OUT, "Local: Message timed out"), "x").code).toBe("KAFKA_RETRYABLE");
    // A zombie woken after its transaction was aborted (Node soak, seed 41: it ended FAILED on this).
    expect(classify(librdkafkaError(-152, "Local: Purged in queue"), "producing in a transaction").code).toBe("KAFKA_RETRYABLE");
    expect(classify(librdkafkaError(-151, "Local: Purged in flight"), "producing in a transaction").code).toBe("KAFKA_RETRYABLE");
    const down = classify(librdkafkaError(ERR.ALL_BROKERS_DOWN, "Local: All broker connections are down"), "x");
    expect(down.code).toBe("KAFKA_RETRYABLE");
    expect(down.context).toEqual({ unreachable: "all brokers down" });
  });

  test("anything else is fatal", () => {
    expect(classify(librdkafkaError(29, "Broker: Topic authorization failed"), "x").code).toBe("KAFKA_FATAL");
    expect(classify("not even an error", "x").code).toBe("KAFKA_FATAL");
  });

  test("a topic that already exists is known by code 36 alone", () => {
    expect(topicAlreadyExists(librdkafkaError(36, "Broker: Topic already exists"))).toBe(true);
    expect(topicAlreadyExists(librdkafkaError(37, "Broker: Topic already exists (the text says)"))).toBe(false);
    expect(topicAlreadyExists(new Error("Topic already exists"))).toBe(false);
  });
});
