/**
 * What the librdkafka consumer knows of a group's committed offsets across its consumers, and how
 * long it refuses a "never committed" answer against it (src/kafka/confluent/consumer.ts). Pure
 * bookkeeping: no addon, no broker (the port suite shows it on the real broker).
 */
import { describe, expect, test } from "bun:test";
import { KnownOffsets } from "../../src/kafka/confluent/consumer.ts";

const tp = { topic: "in", partition: 0 };

describe("KnownOffsets", () => {
  test("keeps the highest offset seen, and whether it was only this client's own (queued) commit", () => {
    const known = new KnownOffsets();
    known.note("g", tp, 10n);
    expect(known.get("g", tp)).toEqual({ offset: 10n, ownCommit: false });
    known.note("g", tp, 12n, true);
    expect(known.get("g", tp)).toEqual({ offset: 12n, ownCommit: true });
    // A lower read changes nothing; the group answering the same offset confirms it.
    known.note("g", tp, 11n);
    expect(known.get("g", tp)).toEqual({ offset: 12n, ownCommit: true });
    known.note("g", tp, 12n);
    expect(known.get("g", tp)).toEqual({ offset: 12n, ownCommit: false });
    expect(known.get("other", tp)).toBeUndefined();
  });

  test("a refusal lasts across answers close together; a gap of over 20 s, an offset noted, or a start at the known offset begins it again", () => {
    const known = new KnownOffsets();
    expect(known.disbelieve("g", tp, 1000)).toBe(0);
    expect(known.disbelieve("g", tp, 16_000)).toBe(15_000);
    expect(known.disbelieve("g", tp, 31_000)).toBe(30_000);
    // The partition went elsewhere for a while: a later answer is a new refusal.
    expect(known.disbelieve("g", tp, 52_000)).toBe(0);
    expect(known.disbelieve("g", tp, 60_000)).toBe(8000);
    known.note("g", tp, 5n);
    expect(known.disbelieve("g", tp, 61_000)).toBe(0);
    known.believe("g", tp);
    expect(known.disbelieve("g", tp, 62_000)).toBe(0);
  });
});
