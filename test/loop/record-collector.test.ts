import { expect, test } from "bun:test";
import { FvError } from "../../src/errors.ts";
import type { Producer } from "../../src/kafka/port.ts";
import { RecordCollector } from "../../src/loop/record-collector.ts";

test("at-least-once: a send failing on a closed client (its session ended) is not retried in place; a broker hiccup is", async () => {
  let calls = 0;
  const failing = (error: FvError): Producer => ({ send: async () => (calls++, Promise.reject(error)), close: async () => {} }) as unknown as Producer;
  const warnings: string[] = [];
  const closed = new RecordCollector({ producer: failing(new FvError("KAFKA_RETRYABLE", "producing failed: Client is closed.", { context: { clientClosed: true } })) }, (_l, m) => void warnings.push(m), { retries: 5, retryPauseMs: 1 });
  await expect(closed.send([{ topic: "t", key: null, value: "x" }])).rejects.toThrow("Client is closed");
  expect(calls).toBe(1);
  expect(warnings).toEqual([]);

  calls = 0;
  const down = new RecordCollector({ producer: failing(new FvError("KAFKA_RETRYABLE", "producing failed: Connection refused")) }, () => {}, { retries: 5, retryPauseMs: 1 });
  await expect(down.send([{ topic: "t", key: null, value: "x" }])).rejects.toThrow("Connection refused");
  expect(calls).toBe(5);
});
