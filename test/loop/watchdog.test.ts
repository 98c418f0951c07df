/** Watchdog: the stall decision around partitions held for a stable committed offset. */
import { describe, expect, test } from "bun:test";
import { PartitionMap } from "../../src/kafka/topic-partition.ts";
import { emptyCounters, type LoopCounters } from "../../src/loop/counters.ts";
import type { Session } from "../../src/loop/session.ts";
import { defaultTimings } from "../../src/loop/timings.ts";
import { Watchdog } from "../../src/loop/watchdog.ts";

const tp = { topic: "in", partition: 0 };

/** A session owning `in:0` at position 40 of 100, held while `held()` says so. */
function sessionWith(held: () => Array<typeof tp>): Session {
  const positions = new PartitionMap<bigint>();
  positions.set(tp, 40n);
  return {
    consumer: { owned: () => [tp], held, endOffsets: async () => [{ ...tp, offset: 100n }] },
    positions,
    startOffsets: new PartitionMap<bigint>(),
    admin: { committedOffsets: async () => [] },
    sending: false,
  } as unknown as Session;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A watchdog on a 1 s stall period whose end offsets are read at every check, over a session
 * whose held partitions `held()` gives; stopped after `body`.
 */
async function watching(held: () => Array<typeof tp>, body: (watchdog: Watchdog, session: Session, counters: LoopCounters, warnings: string[]) => Promise<void>): Promise<void> {
  const counters = emptyCounters();
  const warnings: string[] = [];
  const timings = { ...defaultTimings, stallRestartMs: 1000, endOffsetsIntervalMs: 0 };
  const watchdog = new Watchdog({ timings, groupId: "g", counters, log: (_level, message) => void warnings.push(message) });
  watchdog.opened();
  watchdog.start();
  try {
    await body(watchdog, sessionWith(held), counters, warnings);
  } finally {
    watchdog.stop();
  }
}

/** The end offsets read (the consumer answers), then the stall check. */
async function check(watchdog: Watchdog, session: Session): Promise<void> {
  watchdog.refreshEnds(session, Date.now());
  await sleep(5);
  watchdog.checkStall(session, Date.now());
}

describe("Watchdog", () => {
  // Fault soak (Node + librdkafka, seed 102, 2026-12-07 04:06): a partition held 34 s for a
  // stable offset was revoked with the rest in a rebalance; the first empty poll after that
  // counted the whole hold as the consumer's silence and restarted it (three times in the run).
  test("a partition that stops being held gets a whole stall period before the consumer counts as stalled", async () => {
    let held = [tp];
    await watching(() => held, async (watchdog, session, counters, warnings) => {
      // Held past the period: waiting, not stalled.
      await sleep(1100);
      await check(watchdog, session);
      expect(watchdog.lagging(session)).toBe("in:0");
      expect(warnings).toEqual(["in:0 wait for a stable committed offset: a transaction that commits offsets for them is still pending"]);
      // No longer held: the partition has a whole period to bring records.
      held = [];
      await check(watchdog, session);
      await sleep(400);
      await check(watchdog, session);
      expect(counters.stallRestarts).toBe(0);
      // Still nothing a period later: stalled.
      await sleep(700);
      await expect(check(watchdog, session)).rejects.toThrow(/^no records for \d+ s while in:0 has records to read: starting a fresh consumer$/);
      expect(counters.stallRestarts).toBe(1);
    });
  });

  test("an owned partition behind its end with nothing held is a stall once the period has passed", async () => {
    await watching(() => [], async (watchdog, session, counters) => {
      await check(watchdog, session);
      expect(counters.stallRestarts).toBe(0);
      await sleep(1100);
      await expect(check(watchdog, session)).rejects.toThrow(/^no records for \d+ s while in:0 has records to read: starting a fresh consumer$/);
      expect(counters.stallRestarts).toBe(1);
    });
  });
});
