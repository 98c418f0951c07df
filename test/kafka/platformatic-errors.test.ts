/**
 * How the pure-JS adapter sorts the library's errors, from the library's own error classes and
 * properties (not their messages).
 */
import { describe, expect, test } from "bun:test";
import { MultipleErrors, NetworkError, ProtocolError, TimeoutError, UserError } from "@platformatic/kafka";
import { classify } from "../../src/kafka/platformatic.ts";

describe("the platformatic adapter sorts library errors by their properties", () => {
  // A broker restart of ~20 s: the library retries a fetch 3 times, 1 s apart, then gives up with
  // one error holding the four network failures. It was taken as fatal, and most processes of a
  // soak exited with "fetching failed: fetch failed 4 times." after every broker restart.
  test("retries the library gave up on, each of them retriable (a broker down), are retryable", () => {
    const error = new MultipleErrors("fetch failed 4 times.", [1, 2, 3, 4].map(() => new NetworkError("Connection closed")));
    const sorted = classify(error, "fetching");
    expect(sorted.code).toBe("KAFKA_RETRYABLE");
    expect(sorted.message).toBe("fetching failed: fetch failed 4 times. (Connection closed)");
  });

  test("a timeout or a network error nested anywhere is retryable", () => {
    expect(classify(new MultipleErrors("metadata failed 2 times.", [new TimeoutError("Request timed out.")]), "x").code).toBe("KAFKA_RETRYABLE");
    expect(classify(new NetworkError("Connection refused"), "x").code).toBe("KAFKA_RETRYABLE");
  });

  test("the group moving on, or a fenced producer, is fenced", () => {
    expect(classify(new ProtocolError("ILLEGAL_GENERATION"), "x").code).toBe("KAFKA_FENCED");
    expect(classify(new MultipleErrors("commit failed 1 times.", [new ProtocolError("UNKNOWN_MEMBER_ID")]), "x").code).toBe("KAFKA_FENCED");
    expect(classify(new ProtocolError("PRODUCER_FENCED"), "x").code).toBe("KAFKA_FENCED");
  });

  test("a transaction state that passes is retryable; a non-retriable answer or a misuse is fatal", () => {
    expect(classify(new ProtocolError("CONCURRENT_TRANSACTIONS"), "x").code).toBe("KAFKA_RETRYABLE");
    expect(classify(new ProtocolError("TOPIC_AUTHORIZATION_FAILED"), "x").code).toBe("KAFKA_FATAL");
    expect(classify(new MultipleErrors("produce failed 1 times.", [new ProtocolError("INVALID_CONFIG")]), "x").code).toBe("KAFKA_FATAL");
    expect(classify(new UserError("Cannot produce to an already completed transaction."), "x").code).toBe("KAFKA_FATAL");
  });
});
