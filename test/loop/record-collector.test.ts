import { expect, test } from "bun:test";
import { FvError } from "../../src/errors.ts";
import type { Producer, TransactionalProducer } from "../../src/kafka/port.ts";
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

/** A transactional producer whose requests finish when the test says: it records each send's values, and each commit. */
function gatedTx() {
  const calls: string[] = [];
  const gates: Array<() => void> = [];
  const gate = () => new Promise<void>((resolve) => gates.push(resolve));
  const tx = {
    inTransaction: true,
    ready: async () => {},
    send: async (records: Array<{ value: unknown }>) => {
      calls.push(`send ${records.map((r) => r.value).join(",")}`);
      await gate();
    },
    commit: async () => {
      calls.push("commit");
      await gate();
    },
  };
  const open = async () => {
    while (gates.length === 0) await Bun.sleep(1);
    gates.shift()!();
    await Bun.sleep(1);
  };
  return { tx: tx as unknown as TransactionalProducer, calls, open };
}

const rec = (value: string) => ({ topic: "t", key: null, value });

test("exactly-once: sends queued behind a running request go as one request, in order; none joins across a commit", async () => {
  const { tx, calls, open } = gatedTx();
  const collector = new RecordCollector({ txs: [tx] }, () => {}, { retries: 1, retryPauseMs: 1 });
  await collector.send([rec("a")]); // starts at once
  await collector.send([rec("b")]);
  await collector.send([rec("c"), rec("d")]);
  const committed = collector.commit(() => tx.commit());
  await collector.send([rec("e")]); // the next transaction's
  await collector.send([rec("f")]);
  await Bun.sleep(5);
  expect(calls).toEqual(["send a"]);
  await open(); // a done: b, c, d go as one
  expect(calls).toEqual(["send a", "send b,c,d"]);
  await collector.send([rec("g")]); // queued after the commit: joins e and f, not b, c, d
  await open(); // b,c,d done: the commit
  expect(calls).toEqual(["send a", "send b,c,d", "commit"]);
  await open(); // committed: e, f, g
  await committed;
  expect(calls).toEqual(["send a", "send b,c,d", "commit", "send e,f,g"]);
  await open();
  await collector.settled();
});

test("exactly-once: once a request fails, nothing queued after it is sent (not even sends that joined the failed one)", async () => {
  const calls: string[] = [];
  const failures: string[] = [];
  const tx = {
    send: async (records: Array<{ value: unknown }>) => {
      calls.push(records.map((r) => r.value).join(","));
      throw new FvError("KAFKA_RETRYABLE", "producing failed: boom");
    },
  } as unknown as TransactionalProducer;
  const collector = new RecordCollector({ txs: [tx] }, () => {}, { retries: 1, retryPauseMs: 1, onFailure: (f) => void failures.push(f.message) });
  await collector.send([rec("a")]);
  await collector.send([rec("b")]);
  await expect(collector.settled()).rejects.toThrow("boom");
  await collector.send([rec("c")]);
  await expect(collector.settled()).rejects.toThrow("boom");
  expect(calls).toEqual(["a"]);
  expect(failures).toEqual(["producing failed: boom"]);
});

test("exactly-once, two producers: the next transaction's sends go to the other producer while a commit runs; its commit waits for that one", async () => {
  const a = gatedTx();
  const b = gatedTx();
  const calls: string[] = [];
  const named = (name: string, t: ReturnType<typeof gatedTx>) =>
    ({
      send: async (records: Array<{ value: unknown }>) => {
        calls.push(`${name} send ${records.map((r) => r.value).join(",")}`);
        await t.tx.send(records as never);
      },
      commit: async () => {
        calls.push(`${name} commit`);
        await t.tx.commit();
      },
    }) as unknown as TransactionalProducer;
  const collector = new RecordCollector({ txs: [named("A", a), named("B", b)] }, () => {}, { retries: 1, retryPauseMs: 1 });
  await collector.send([rec("a")]);
  const first = collector.commit((tx) => tx.commit());
  await collector.send([rec("b")]); // transaction 2, on B
  await Bun.sleep(5);
  expect(calls).toEqual(["A send a"]);
  await a.open(); // a sent: A commits, and B sends b meanwhile
  expect(calls).toEqual(["A send a", "A commit", "B send b"]);
  await b.open(); // b sent while A's commit runs
  const second = collector.commit((tx) => tx.commit());
  expect(collector.committing).toBe(true);
  await collector.send([rec("c")]); // transaction 3, on A again: waits for A's commit
  await Bun.sleep(5);
  expect(calls).toEqual(["A send a", "A commit", "B send b"]); // B's commit waits for A's
  await a.open(); // A committed: B commits, and A sends c (its own commit is done)
  await first;
  expect(calls).toEqual(["A send a", "A commit", "B send b", "B commit", "A send c"]);
  await b.open();
  await second;
  await a.open();
  await collector.settled();
});

test("exactly-once, two producers: a failed commit stops the other producer's queue too (nothing of a later transaction is committed)", async () => {
  const calls: string[] = [];
  const failures: string[] = [];
  const producer = (name: string, failCommit: boolean) =>
    ({
      send: async (records: Array<{ value: unknown }>) => void calls.push(`${name} send ${records.map((r) => r.value).join(",")}`),
      commit: async () => {
        calls.push(`${name} commit`);
        await Bun.sleep(5);
        if (failCommit) throw new FvError("KAFKA_FENCED", "committing failed: fenced");
      },
    }) as unknown as TransactionalProducer;
  const collector = new RecordCollector({ txs: [producer("A", true), producer("B", false)] }, () => {}, { retries: 1, retryPauseMs: 1, onFailure: (f) => void failures.push(f.message) });
  await collector.send([rec("a")]);
  const first = collector.commit((tx) => tx.commit());
  await collector.send([rec("b")]);
  const second = collector.commit((tx) => tx.commit());
  await expect(first).rejects.toThrow("fenced");
  await expect(second).rejects.toThrow("fenced");
  await collector.send([rec("c")]);
  await expect(collector.settled()).rejects.toThrow("fenced");
  // b was sent during A's commit (its transaction is aborted with the session); B never commits, c is never sent.
  expect(calls).toEqual(["A send a", "A commit", "B send b"]);
  expect(failures).toEqual(["committing failed: fenced"]);
});
