/** What a transactional id's last transaction may have left open, and how it must end (src/kafka/leftovers.ts). */
import { describe, expect, test } from "bun:test";
import { TransactionLeftovers } from "../../src/kafka/leftovers.ts";

/** One transaction as the adapter drives it: hold what is carried, then write, then end. */
function transaction(l: TransactionLeftovers, writes: Array<[string, number]>, group: string | undefined, end: "commit" | "abort"): void {
  if (!l.empty) l.holding();
  expect(l.held()).toBe("clean");
  for (const [topic, partition] of writes) l.addPartition(topic, partition);
  if (group) l.addGroup(group);
  l.ending(end);
}

describe("transaction leftovers", () => {
  test("a transaction carries what the last one wrote and the groups it committed offsets for, and forgets them once the broker answered with no connection closed", () => {
    const l = new TransactionLeftovers();
    expect(l.empty).toBe(true);
    transaction(l, [["out", 0], ["out", 0], ["out", 2], ["changelog", 1]], "g", "commit");
    expect(l.carried()).toEqual({ partitions: [{ topic: "out", partition: 0 }, { topic: "out", partition: 2 }, { topic: "changelog", partition: 1 }], groups: ["g"] });
    // The next one holds them, and they are clean: only its own writes are carried on.
    l.holding();
    expect(l.held()).toBe("clean");
    expect(l.empty).toBe(true);
    l.addPartition("out", 1);
    l.ending("commit");
    expect(l.carried()).toEqual({ partitions: [{ topic: "out", partition: 1 }], groups: [] });
  });

  test("a connection that closed after a commit went out: the pieces are ended by a commit that holds only them, then forgotten", () => {
    const l = new TransactionLeftovers();
    transaction(l, [["out", 0], ["out", 2]], "g", "commit");
    // The broker's controlled shutdown (it may skip the commit's markers), then it is back.
    l.disconnected();
    l.holding();
    expect(l.held()).toBe("commit");
    l.ending("commit");
    // The settling transaction's answer came with no connection closed: done.
    l.holding();
    expect(l.held()).toBe("clean");
    expect(l.empty).toBe(true);
  });

  test("an abort's pieces are ended by an abort; one that ended before it held every piece owes an abort of them all, even when its commit was asked", () => {
    const aborted = new TransactionLeftovers();
    transaction(aborted, [["out", 0]], "g", "abort");
    aborted.disconnected();
    aborted.holding();
    expect(aborted.held()).toBe("abort");

    // Soak seed 95, as it now goes: T1 commits, the broker skips its markers and restarts; T2
    // asks for T1's group but fails before it holds T1's partitions, and is aborted. Its abort
    // marker reaches the group only (T1's offsets dropped), so T1's outputs must be aborted too.
    const l = new TransactionLeftovers();
    transaction(l, [["out", 0], ["out", 2], ["out", 4]], "g", "commit");
    l.disconnected();
    l.holding();
    l.ending("abort");
    l.holding();
    expect(l.held()).toBe("abort");
    // Even with no connection closed since: that abort did not hold every piece.
    l.ending("abort");
    l.holding();
    expect(l.held()).toBe("clean");
  });

  test("a settling transaction whose own end may have been skipped is settled again, the same way", () => {
    const l = new TransactionLeftovers();
    transaction(l, [["out", 3]], "g", "abort");
    l.disconnected();
    l.holding();
    expect(l.held()).toBe("abort");
    l.ending("abort");
    l.disconnected();
    l.holding();
    expect(l.held()).toBe("abort");
    expect(l.carried()).toEqual({ partitions: [{ topic: "out", partition: 3 }], groups: ["g"] });
  });

  test("a transaction dropped without an EndTxn answered owes an abort, and is never taken as clean by the count alone", () => {
    const l = new TransactionLeftovers();
    transaction(l, [["out", 1]], "g", "commit");
    l.holding();
    expect(l.held()).toBe("clean");
    l.addPartition("out", 5);
    l.ending("commit");
    // The EndTxn failed: the coordinator may have committed it or will abort it.
    l.dropped();
    l.holding();
    expect(l.held()).toBe("abort");
    l.ending("abort");
    l.holding();
    expect(l.held()).toBe("clean");
  });

  test("nothing carried: every transaction is clean whatever closed", () => {
    const l = new TransactionLeftovers();
    l.disconnected();
    expect(l.held()).toBe("clean");
    l.ending("abort");
    l.dropped();
    expect(l.held()).toBe("clean");
  });
});
