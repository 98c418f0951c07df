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

  // Soak seed 106: a broker in its controlled shutdown skipped a marker and still answered.
  test("a carried partition seen still holding the last transaction open: the pieces are ended as it ended, though no connection closed", () => {
    const l = new TransactionLeftovers();
    transaction(l, [["out", 4]], "g", "commit");
    l.holding();
    expect(l.held(true)).toBe("commit");
    expect(l.carried()).toEqual({ partitions: [{ topic: "out", partition: 4 }], groups: ["g"] });
    l.ending("commit");
    l.holding();
    expect(l.held(false)).toBe("clean");
    expect(l.empty).toBe(true);
  });

  // librdkafka asks after the end instead (MarkerCheck): until the answer, the pieces are owed.
  test("a check under way leaves the pieces owed; the answer \"nowhere\" takes that back, unless a producer ended them meanwhile", () => {
    const l = new TransactionLeftovers();
    transaction(l, [["out", 4]], "g", "abort");
    const nowhere = l.checking();
    // A producer of the next session, come first, ends them as the transaction did.
    expect(l.held()).toBe("abort");
    nowhere();
    expect(l.held()).toBe("abort");
    l.ending("abort");
    expect(l.held()).toBe("clean");
    // With nothing in between, the answer "nowhere" makes them clean again.
    transaction(l, [["out", 5]], undefined, "commit");
    const answered = l.checking();
    answered();
    expect(l.held()).toBe("clean");
    expect(l.empty).toBe(true);
  });

  test("an abort's pieces are ended by an abort, a commit's by a commit", () => {
    const aborted = new TransactionLeftovers();
    transaction(aborted, [["out", 0]], "g", "abort");
    aborted.disconnected();
    aborted.holding();
    expect(aborted.owed).toBe("abort");
    expect(aborted.held()).toBe("abort");

    const committed = new TransactionLeftovers();
    transaction(committed, [["out", 0]], "g", "commit");
    committed.disconnected();
    committed.holding();
    expect(committed.owed).toBe("commit");
    expect(committed.held()).toBe("commit");
  });

  test("a transaction that ended before it held every piece (ended as they owe) leaves them to be ended again, even with no connection closed since", () => {
    // Soak seed 95, as it now goes: T1 commits, the broker skips its markers and restarts; T2
    // holds T1's group but its session fails before it holds T1's partitions. T2 holds nothing
    // of its own, so it ends as T1's pieces owe (a commit), and the partitions still owe that.
    const l = new TransactionLeftovers();
    transaction(l, [["out", 0], ["out", 2], ["out", 4]], "g", "commit");
    l.disconnected();
    l.holding();
    l.ending(l.owed);
    l.holding();
    expect(l.held()).toBe("commit");
    expect(l.carried().partitions.length).toBe(3);
    l.ending("commit");
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

  test("a transaction whose EndTxn was not answered is ended again as asked, and is never taken as clean by the count alone", () => {
    const l = new TransactionLeftovers();
    transaction(l, [["out", 1]], "g", "commit");
    l.holding();
    expect(l.held()).toBe("clean");
    l.addPartition("out", 5);
    l.ending("commit");
    // The EndTxn failed: the coordinator may have committed it (or will abort it, having never
    // seen it: then its markers end the pieces the same way, unless skipped again).
    l.dropped();
    l.holding();
    expect(l.held()).toBe("commit");
    l.ending("commit");
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
