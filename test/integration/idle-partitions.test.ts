/**
 * Windows close on the wall clock once input stops: a stateful pipeline whose partitions all go
 * quiet (one of them never had a row; no repartition hop, whose watermark records would wake it) still fires every window its watermark has passed, with no
 * new record to carry it there. Found by the stateful exactly-once kill test: a restarted run whose
 * backlog took less than STREAM_IDLE_PARTITION_MS never fired its last windows.
 */
import { describe, expect, test } from "bun:test";
import type { OutboundRecord } from "../../src/kafka/port.ts";
import { lastRecord } from "../helpers/cli.ts";
import { createTopic, json, produce, uniqueName } from "../helpers/kafka.ts";
import { MINUTE, transformFile } from "../helpers/pipelines.ts";
import { runUntilOutput } from "../helpers/streams.ts";

const T0 = Date.UTC(2026, 0, 1);
const KEYS = ["a", "b", "c"];

describe("idle partitions", () => {
  test("every row in partition 0, none in partition 1, then no more input: the windows before the last minute fire exactly once (exactly-once)", async () => {
    const name = uniqueName("idle-windows");
    const input = `${name}-in`;
    const output = `${name}-out`;
    await createTopic(input, 2);
    const rows: OutboundRecord[] = [];
    const expected = new Map<string, number>();
    for (let m = 0; m < 6; m++) {
      for (let i = 0; i < 90; i++) {
        const key = KEYS[i % KEYS.length]!;
        rows.push({ topic: input, partition: 0, key, value: JSON.stringify({ key, ts: T0 + m * MINUTE + i * 600 }) });
        if (m < 5) expected.set(`${key}@${T0 + m * MINUTE}`, (expected.get(`${key}@${T0 + m * MINUTE}`) ?? 0) + 1);
      }
    }
    await produce(rows);
    const file = transformFile(name, input, output, {
      op: "windowedAggregate", timeColumn: "ts", windowMs: MINUTE, groupBy: ["key"], aggs: [{ op: "count", alias: "n" }],
      repartition: false,
    });
    // settleMs: any late duplicate or window of the open last minute would show up by then.
    const { run, records } = await runUntilOutput(file, output, (got) => got.length >= expected.size, `${expected.size} windows`, {
      env: { STREAM_EXACTLY_ONCE: "true", STREAM_IDLE_PARTITION_MS: "1500", STREAM_CONSUMERS: "1" },
      timeoutMs: 30_000,
      settleMs: 2500,
    });
    const got: Array<[string, number]> = records.map(json).map((w): [string, number] => [`${w.key}@${w.windowStart}`, w.n]).sort();
    expect(got).toEqual([...expected].sort());
    expect(lastRecord(run.records)?.metrics?.consumed).toBe(rows.length);
  });
});
