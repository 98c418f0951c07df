import { describe, expect, test } from "bun:test";
import { FvError } from "../../src/errors.ts";
import { Checkpointer } from "../../src/state/checkpointer.ts";

const ok = (log: string[], name: string) => ({ name, run: async () => void log.push(name) });
const failing = (name: string, code: "KAFKA_RETRYABLE" | "KAFKA_FENCED" = "KAFKA_RETRYABLE") => ({
  name,
  run: async () => {
    throw new FvError(code, `${name} broke`);
  },
});

describe("Checkpointer", () => {
  test("runs the steps in order and counts a commit", async () => {
    const log: string[] = [];
    const cp = new Checkpointer({ deadlineMs: 1000, maxConsecutiveFailures: 3 });
    await cp.commit([ok(log, "state"), ok(log, "offsets")]);
    expect(log).toEqual(["state", "offsets"]);
    expect(cp.counters).toEqual({ commits: 1, failures: 0, timeouts: 0 });
  });

  test("a failed state step stops the offsets from being committed", async () => {
    const log: string[] = [];
    const cp = new Checkpointer({ deadlineMs: 1000, maxConsecutiveFailures: 3 });
    await expect(cp.commit([failing("state"), ok(log, "offsets")])).rejects.toThrow("state broke");
    expect(log).toEqual([]);
    expect(cp.counters).toEqual({ commits: 0, failures: 1, timeouts: 0 });
  });

  test("a step past its deadline fails as a timeout", async () => {
    const cp = new Checkpointer({ deadlineMs: 20, maxConsecutiveFailures: 3 });
    const slow = { name: "offsets", run: () => new Promise<void>((r) => setTimeout(r, 200)) };
    await expect(cp.commit([slow])).rejects.toThrow('checkpoint step "offsets" took longer than 20 ms');
    expect(cp.counters).toEqual({ commits: 0, failures: 1, timeouts: 1 });
  });

  test("the circuit opens after N consecutive failures, and a success resets the count", async () => {
    const log: string[] = [];
    const cp = new Checkpointer({ deadlineMs: 1000, maxConsecutiveFailures: 3 });
    await expect(cp.commit([failing("a")])).rejects.toThrow("a broke");
    await expect(cp.commit([failing("a")])).rejects.toThrow("a broke");
    await cp.commit([ok(log, "b")]);
    await expect(cp.commit([failing("a")])).rejects.toThrow("a broke");
    await expect(cp.commit([failing("a")])).rejects.toThrow("a broke");
    const error = await cp.commit([failing("a")]).catch((e) => e);
    expect(error).toBeInstanceOf(FvError);
    expect(error.code).toBe("CHECKPOINT_CIRCUIT_OPEN");
    expect(error.message).toContain("circuit open");
  });
});
