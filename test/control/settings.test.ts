import { describe, expect, test } from "bun:test";
import { FvError, parseSettings } from "../../src/index.ts";

describe("parseSettings", () => {
  test("gives the defaults for an empty environment", () => {
    expect(parseSettings({})).toEqual({
      brokers: "127.0.0.1:9092",
      consumers: 1,
      batchSize: 1000,
      checkpointIntervalMs: 200,
      offsetReset: "earliest",
      idleTimeoutMs: 0,
      heartbeatIntervalMs: 5000,
      recordIntervalMs: 5000,
      pollTimeoutMs: 200,
      exactlyOnce: false,
      transactionProducers: 2,
      instanceId: undefined,
      checkpointDeadlineMs: 10000,
      checkpointMaxFailures: 5,
      sessionTimeoutMs: 10000,
      idlePartitionMs: 10000,
      stateMaxKeys: 1000000,
      stateCacheKeys: 100000,
      standbyReplicas: 0,
      lateRows: "drop",
      repartitionPartitions: 0,
      kafkaClient: "auto",
    });
  });

  test("reads STREAM_* values and prefers STREAM_BROKERS over the file default", () => {
    const s = parseSettings({ STREAM_BROKERS: "k1:9092,k2:9092", STREAM_CONSUMERS: "3", STREAM_OFFSET_RESET: "latest" }, "file:9092");
    expect(s.brokers).toBe("k1:9092,k2:9092");
    expect(s.consumers).toBe(3);
    expect(s.offsetReset).toBe("latest");
    expect(parseSettings({}, "file:9092").brokers).toBe("file:9092");
  });

  test.each([
    ["STREAM_CONSUMERS", "two", "whole number"],
    ["STREAM_CONSUMERS", "0", "at least 1"],
    ["STREAM_BATCH_SIZE", "-5", "whole number"],
    ["STREAM_OFFSET_RESET", "beginning", "earliest or latest"],
    ["STREAM_KAFKA_CLIENT", "librdkafka", "auto, platformatic (pure JS) or confluent"],
    ["STREAM_BROKERS", "localhost", "host:port"],
    ["STREAM_EXACTLY_ONCE", "yes", "true or false"],
  ])("%s=%s is refused with a message saying what it accepts", (name, value, hint) => {
    try {
      parseSettings({ [name]: value });
      throw new Error("expected an error");
    } catch (error) {
      expect(error).toBeInstanceOf(FvError);
      expect((error as FvError).code).toBe("INVALID_SETTINGS");
      expect((error as Error).message).toContain(name);
      expect((error as Error).message).toContain(hint);
    }
  });
});
