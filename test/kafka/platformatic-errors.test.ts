/**
 * How the pure-JS adapter sorts the library's errors, from the library's own error classes and
 * properties (not their messages).
 */
import { describe, expect, test } from "bun:test";
import { Buffer } from "node:buffer";
import { MultipleErrors, NetworkError, ProtocolError, ResponseError, TimeoutError, UserError } from "@platformatic/kafka";
import type { FvError } from "../../src/errors.ts";
import { classify, retryDelay, topicAlreadyExists, unknownTopic, unstableOffsetCommit } from "../../src/kafka/platformatic/errors.ts";
import { murmur2, partitionOfKey } from "../../src/kafka/murmur2.ts";
import { partitioner } from "../../src/kafka/platformatic/records.ts";
import { checkWritten } from "../../src/kafka/platformatic/producer.ts";
import { PlatformaticTransactionalProducer } from "../../src/kafka/platformatic/transactions.ts";
import { GroupMembers } from "../../src/kafka/shared.ts";
import type { Consumer as PltConsumer } from "@platformatic/kafka";

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

  // After a broker restart its Metadata answers may still say UNKNOWN_TOPIC_OR_PARTITION for the
  // input, which the library turns into a UserError of its own; a soak process's loop failed for
  // good on it while joining the group ("joining group … failed: Unknown topic …").
  // (The consumer's join takes it as retryable, counted towards the loop's consecutive restarts;
  // elsewhere, e.g. a send to a deleted output, it stays fatal.)
  test("the library's 'Unknown topic' (a broker still loading after a restart) is told apart from other misuse", () => {
    expect(unknownTopic(new UserError("Unknown topic orders-in."))).toBe(true);
    expect(unknownTopic(new MultipleErrors("Producing messages failed.", [new UserError("Unknown topic out.")]))).toBe(true);
    expect(classify(new UserError("Unknown topic out."), "producing").code).toBe("KAFKA_FATAL");
    expect(unknownTopic(new UserError("Cannot commit an already completed transaction."))).toBe(false);
    expect(unknownTopic(new UserError("Unknown topics given"))).toBe(false);
    expect(unknownTopic(new NetworkError("Unknown topic x."))).toBe(false);
  });

  test("a timeout or a network error nested anywhere is retryable", () => {
    expect(classify(new MultipleErrors("metadata failed 2 times.", [new TimeoutError("Request timed out.")]), "x").code).toBe("KAFKA_RETRYABLE");
    expect(classify(new NetworkError("Connection refused"), "x").code).toBe("KAFKA_RETRYABLE");
  });

  test("a client this process closed is marked: its session restarts, but a retry on it never succeeds", () => {
    const closed = classify(new MultipleErrors("Producing messages failed.", [new NetworkError("Client is closed.", { canRetry: false, closed: true })]), "producing");
    expect(closed.code).toBe("KAFKA_RETRYABLE");
    expect(closed.context).toEqual({ clientClosed: true });
    expect(classify(new NetworkError("Connection refused"), "x").context.clientClosed).toBeUndefined();
  });

    test("the group moving on, or a fenced producer, is fenced", () => {
    expect(classify(new ProtocolError("ILLEGAL_GENERATION"), "x").code).toBe("KAFKA_FENCED");
    expect(classify(new MultipleErrors("commit failed 1 times.", [new ProtocolError("UNKNOWN_MEMBER_ID")]), "x").code).toBe("KAFKA_FENCED");
    expect(classify(new ProtocolError("PRODUCER_FENCED"), "x").code).toBe("KAFKA_FENCED");
  });

  test("a static member fenced by a consumer with its group.instance.id says so, for the loop's count of them", () => {
    const fenced = classify(new MultipleErrors("heartbeat failed 1 times.", [new ProtocolError("FENCED_INSTANCE_ID")]), "x");
    expect(fenced.code).toBe("KAFKA_FENCED");
    expect(fenced.context).toEqual({ instanceFenced: true });
    expect(classify(new ProtocolError("ILLEGAL_GENERATION"), "x").context).toEqual({});
  });

  // The first request of each transaction meets CONCURRENT_TRANSACTIONS while the broker still
  // writes the last one's markers. With the library's flat 1 s pause every exactly-once
  // checkpoint after the first waited a second: 0.16 of at-least-once at a 100 ms interval.
  test("the next transaction's first request is retried within milliseconds; other errors keep the library's second", () => {
    const concurrent = new ResponseError(24, 0, { "/results/0/partitions/0": [51, "ongoing"] }, {});
    expect([1, 2, 3, 6, 30].map((attempt) => retryDelay(undefined, "addPartitionsToTransaction", attempt, 3, concurrent))).toEqual([10, 20, 40, 200, 200]);
    expect(retryDelay(undefined, "fetch", 1, 3, new NetworkError("Connection closed"))).toBe(1000);
    expect(retryDelay(undefined, "produce", 1, 3, new ProtocolError("NOT_LEADER_OR_FOLLOWER"))).toBe(1000);
  });

  test("a transaction state that passes is retryable; a non-retriable answer or a misuse is fatal", () => {
    expect(classify(new ProtocolError("CONCURRENT_TRANSACTIONS"), "x").code).toBe("KAFKA_RETRYABLE");
    expect(classify(new ProtocolError("TOPIC_AUTHORIZATION_FAILED"), "x").code).toBe("KAFKA_FATAL");
    expect(classify(new MultipleErrors("produce failed 1 times.", [new ProtocolError("INVALID_CONFIG")]), "x").code).toBe("KAFKA_FATAL");
    expect(classify(new UserError("Cannot produce to an already completed transaction."), "x").code).toBe("KAFKA_FATAL");
  });

  // Fault soak, seed 119 (Bun): a second after a broker restart, EndTxn answered
  // UNKNOWN_SERVER_ERROR (-1, which the library marks not retriable); taken as fatal, the process
  // failed. The session starting over gets past it (its loop still gives up after 30 in a row).
  test("the broker's unexpected error (UNKNOWN_SERVER_ERROR), as EndTxn answered it after a restart, is retryable", () => {
    const endTxn = new ResponseError(26, 4, { "": [-1, null] }, {});
    expect(endTxn.message).toBe("Received response with error while executing API EndTxn(v4)");
    const sorted = classify(endTxn, "ending the records and offset commits an earlier transaction may have left open");
    expect(sorted.code).toBe("KAFKA_RETRYABLE");
    expect(classify(new ProtocolError("UNKNOWN_SERVER_ERROR"), "x").code).toBe("KAFKA_RETRYABLE");
  });

  // Two processes of a pipeline create its topics at once: the one that loses the race must go on.
  test("a topic that already exists is known by the broker's error code, wherever the library nests it, not by its text", () => {
    const answer = new ResponseError(19, 7, { "/topics/0": [36, "Topic 'out' already exists."] }, {});
    expect(topicAlreadyExists(answer)).toBe(true);
    expect(topicAlreadyExists(new MultipleErrors("createTopics failed 1 times.", [answer]))).toBe(true);
    expect(topicAlreadyExists(new ProtocolError(36))).toBe(true);
    expect(topicAlreadyExists(new UserError("Topic already exists somewhere, says the text"))).toBe(false);
    expect(topicAlreadyExists(new Error("already exists"))).toBe(false);
    expect(topicAlreadyExists(new ProtocolError("INVALID_PARTITIONS"))).toBe(false);
  });

  test("a pending transactional commit (UNSTABLE_OFFSET_COMMIT) is known by its apiId, and is retryable", () => {
    const answer = new MultipleErrors("listConsumerGroupOffsets failed 1 times.", [new ProtocolError("UNSTABLE_OFFSET_COMMIT")]);
    expect(unstableOffsetCommit(answer)).toBe(true);
    expect(unstableOffsetCommit(new ProtocolError("NOT_COORDINATOR"))).toBe(false);
    expect(classify(answer, "x").code).toBe("KAFKA_RETRYABLE");
  });
});

describe("a send the library acknowledged must have written to every partition it had records for", () => {
  const producer = { currentMetadata: { topics: new Map([["out", { partitionsCount: 8 }]]) } } as never;
  const keyed = (key: string) => ({ topic: "out", key: Buffer.from(key), value: Buffer.from("v"), partition: undefined, headers: undefined });
  const partitionOf = (key: string) => partitionOfKey(Buffer.from(key), 8);

  test("every partition named in the results: fine", () => {
    const messages = [keyed("a"), keyed("b"), { ...keyed("c"), partition: 11 }];
    const offsets = [...new Set([partitionOf("a"), partitionOf("b"), 3])].map((partition) => ({ topic: "out", partition, offset: 0n }));
    expect(() => checkWritten(producer, messages, { offsets })).not.toThrow();
  });

  test("a partition missing from the results is a retryable failure that names it", () => {
    // Two keys that the default partitioner puts in different partitions.
    const other = ["k1", "k2", "k3", "k4", "k5"].find((k) => partitionOf(k) !== partitionOf("a"))!;
    const messages = [keyed("a"), keyed(other)];
    const offsets = [{ topic: "out", partition: partitionOf("a"), offset: 0n }];
    let thrown: unknown;
    try {
      checkWritten(producer, messages, { offsets });
    } catch (error) {
      thrown = error;
    }
    expect((thrown as FvError).code).toBe("KAFKA_RETRYABLE");
    expect((thrown as FvError).message).toContain(`wrote nothing to out[${partitionOf(other)}]`);
  });

  test("a record the partitioner hashed is checked against the partition of that hash, with no second hash", () => {
    const a = keyed("a");
    expect(partitioner(a, a.key)).toBe(murmur2(Buffer.from("a")) & 0x7fffffff);
    expect((a as { hash?: number }).hash! % 8).toBe(partitionOf("a"));
    const written = (partition: number) => ({ offsets: [{ topic: "out", partition, offset: 0n }] });
    expect(() => checkWritten(producer, [a], written(partitionOf("a")))).not.toThrow();
    // The noted hash is what counts: one that names another partition fails there.
    const moved = { ...keyed("a"), hash: partitionOf("a") + 1 };
    expect(() => checkWritten(producer, [moved], written(partitionOf("a")))).toThrow(`wrote nothing to out[${partitionOf("a") + 1}]`);
  });

  test("a topic with every partition written checks no record; a partition count the client does not know checks none either", () => {
    const all = { offsets: Array.from({ length: 8 }, (_, partition) => ({ topic: "out", partition, offset: 0n })) };
    // A record whose hash and key count their reads: none, every partition was written.
    let reads = 0;
    const counted = (topic: string) => ({ topic, value: "v", partition: undefined, headers: undefined, get hash() { reads++; return 3; }, get key() { reads++; return "a"; } });
    expect(() => checkWritten(producer, [counted("out")], all)).not.toThrow();
    expect(() => checkWritten(producer, [counted("unknown")], { offsets: [] })).not.toThrow();
    expect(reads).toBe(0);
    // The same record in a send that missed its partition is looked at, and fails.
    expect(() => checkWritten(producer, [counted("out")], { offsets: [{ topic: "out", partition: 0, offset: 0n }] })).toThrow("wrote nothing to out[3]");
    expect(reads).toBeGreaterThan(0);
  });
});

// After a broker restart the library's consumer forgets its coordinator (null); the TxnOffsetCommit
// of the transaction then went to node -1 and the library retried it without end: the loop waited
// out the checkpoint deadline (10 s) and the abort's wait for requests in flight (60 s).
test("offsets into a transaction while the consumer knows no coordinator fail at once, retryable, with nothing sent", async () => {
  const members = new GroupMembers<PltConsumer>("platformatic");
  const consumer = { groupId: "g", coordinatorId: null } as unknown as PltConsumer;
  const group = members.issue({ groupId: "g", generationId: 3, memberId: "m" }, consumer);
  // No broker on this port: anything sent would fail differently, and only after retries.
  const producer = new PlatformaticTransactionalProducer(["127.0.0.1:1"], "t", "fv-t-0", members);
  // (Before, it began the transaction first: FindCoordinator on a port with no broker, retried without end.)
  const error = await producer.sendOffsets(group, [{ topic: "in", partition: 0, offset: 5n }]).then(() => undefined, (e: FvError) => e);
  expect({ code: error?.code, message: error?.message }).toEqual({ code: "KAFKA_RETRYABLE", message: "the consumer of group g does not know its coordinator now (a broker restart?): the transaction is aborted and the member rejoins" });
  expect(producer.inTransaction).toBe(false);
  await producer.close();
});
