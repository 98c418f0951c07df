/**
 * The consumer loop on the in-memory Kafka (test/kafka/memory-kafka.ts), driven only through its
 * public API (constructor, run, stop, state, error, counters): poison rows, the checkpoint
 * order, aborts, revocations and fencing under exactly-once, the restart backoff, and
 * watermarks across a repartition hop. Each test reads what the loop left in Kafka (outputs,
 * dead letters, committed offsets, the journal) and its counters, exactly.
 */
import { afterAll, afterEach, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { compileTopology } from "../../src/topology/compile-topology.ts";
import { planKeying } from "../../src/topology/keying.ts";
import { parseSettings } from "../../src/control/settings.ts";
import type { TopicBinding, Topology } from "../../src/control/types.ts";
import { FvError } from "../../src/errors.ts";
import { ConsumerLoop, type LoopState } from "../../src/loop/consumer-loop.ts";
import type { HopPlan, LoopPlan } from "../../src/loop/plan.ts";
import type { LoopTimings } from "../../src/loop/timings.ts";
import type { KafkaClient } from "../../src/kafka/port.ts";
import { crashable, MemoryKafka, type JournalEntry } from "../kafka/memory-kafka.ts";

const PIPELINE = "p";
const GROUP = "fv-stream-p";
const STATE_TOPIC = "fv-state-p";
const decoder = new TextDecoder();

const binding = (topic: string, policy: Record<string, string> = {}): TopicBinding =>
  ({ apiName: topic, topic, brokers: "memory:1", policy, source: "kafka", sink: "kafka" }) as unknown as TopicBinding;

/**
 * Each plan's local state stores in a directory of their own: the default, `.fv-state/p` under
 * the working directory, outlived the test (and the run), and a later test restored from a store
 * that covered another in-memory cluster's changelog (the checkpoint-order test failed about one
 * run in three).
 */
const stateDirs: string[] = [];
afterAll(() => {
  for (const dir of stateDirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function planOf(topology: Topology, env: Record<string, string>, options: { deadLetter?: string; hops?: Record<number, HopPlan> } = {}): LoopPlan {
  const stateDir = mkdtempSync(join(tmpdir(), "fv-loop-state-"));
  stateDirs.push(stateDir);
  return {
    pipeline: PIPELINE,
    groupId: GROUP,
    topology,
    bindings: { in: binding("in", options.deadLetter ? { deadLetter: options.deadLetter } : {}), out: binding("out") },
    settings: parseSettings({ STREAM_POLL_TIMEOUT_MS: "10", STREAM_CHECKPOINT_INTERVAL_MS: "50", STREAM_STATE_DIR: stateDir, ...env }),
    kafkaClient: "memory",
    consumerIndex: 0,
    instanceId: "t",
    ...(options.hops ? { hops: options.hops } : {}),
  };
}

const windowedCount = (windowMs: number, groupBy: string): Topology => ({
  stages: [{ inputs: ["in"], output: "out", steps: [{ op: "windowedAggregate", timeColumn: "ts", windowMs, groupBy: [groupBy], aggs: [{ op: "count", alias: "n" }] }] }],
} as unknown as Topology);

const selectId: Topology = { stages: [{ inputs: ["in"], output: "out", steps: [{ op: "select", columns: ["id"] }] }] } as unknown as Topology;

/** Loops started by a test, stopped after it whatever happened. */
const started: Array<{ loop: ConsumerLoop; done: Promise<LoopState> }> = [];
afterEach(async () => {
  for (const { loop, done } of started.splice(0)) {
    loop.stop();
    await done;
  }
});

/** Runs a loop on the cluster; `log` keeps what it logged. */
function start(kafka: MemoryKafka, plan: LoopPlan, options: { client?: KafkaClient; debug?: boolean; timings?: Partial<LoopTimings> } = {}) {
  const log: string[] = [];
  const loop = new ConsumerLoop(plan, options.client ?? kafka.client(), (level, message) => void log.push(`${level}: ${message}`), { debug: options.debug ?? false, ...(options.timings ? { timings: options.timings } : {}) });
  const done = loop.run();
  started.push({ loop, done });
  const stop = async () => {
    loop.stop();
    return await done;
  };
  return { loop, log, stop };
}

async function waitFor(what: string, condition: () => boolean, timeoutMs = 5000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > until) throw new Error(`timed out after ${timeoutMs} ms waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

const values = (kafka: MemoryKafka, topic: string) => kafka.readText(topic).map(([, v]) => v!).sort();
const json = (row: unknown) => JSON.stringify(row);

describe("poison rows", () => {
  test("are isolated: each goes to the dead-letter topic with its reason and source, is counted by reason, and the rest flows and commits", async () => {
    const kafka = new MemoryKafka();
    kafka.createTopic("in", 1);
    kafka.createTopic("out", 1);
    kafka.createTopic("in-dlq", 1);
    const topology = {
      stages: [{ inputs: ["in"], output: "out", steps: [{ op: "applyExpression", column: "q", expression: "100 / d" }, { op: "select", columns: ["id", "q"] }] }],
    } as unknown as Topology;
    kafka.produce("in", [
      { key: "k0", value: json({ id: 0, d: 4 }) },
      { key: "k1", value: "not json" },
      { key: "k2", value: "[1, 2]" },
      { key: "k3", value: json({ id: 3, d: 0 }), headers: [["trace", "t3"]] },
      { key: "k4", value: '{"id": 4, "d": 1e400}' },
      { key: "k5", value: json({ id: 5, d: 10 }) },
    ]);
    const { loop, stop } = start(kafka, planOf(topology, {}, { deadLetter: "in-dlq" }));
    await waitFor("offset 6 of in:0 is committed", () => kafka.committed(GROUP)["in:0"] === 6n);
    expect(await stop()).toBe("STOPPED");

    expect(kafka.readText("out")).toEqual([["k0", json({ id: 0, q: 25 })], ["k5", json({ id: 5, q: 10 })]]);
    const dead = kafka.read("in-dlq").map((r) => ({
      key: decoder.decode(r.key!),
      value: decoder.decode(r.value!),
      headers: Object.fromEntries(r.headers.map(([k, v]) => [k, decoder.decode(v)]).filter(([k]) => k !== "fv.error.message")),
    }));
    const deadLetter = (key: string, value: string, reason: string, offset: number, headers: Record<string, string> = {}) => ({
      key,
      value,
      headers: { ...headers, "fv.error.reason": reason, "fv.error.stage": "stage 1 (in → out)", "fv.source.topic": "in", "fv.source.partition": "0", "fv.source.offset": String(offset) },
    });
    expect(dead).toEqual([
      deadLetter("k1", "not json", "invalid_json", 1),
      deadLetter("k2", "[1, 2]", "not_object", 2),
      deadLetter("k3", json({ id: 3, d: 0 }), "division_by_zero", 3, { trace: "t3" }),
      deadLetter("k4", '{"id": 4, "d": 1e400}', "number_out_of_range", 4),
    ]);
    // The message says what was wrong with the row.
    const message = (offset: number) => decoder.decode(kafka.read("in-dlq").find((r) => r.headers.some(([k, v]) => k === "fv.source.offset" && decoder.decode(v) === String(offset)))!.headers.find(([k]) => k === "fv.error.message")![1]);
    expect(message(3)).toContain("division by zero");
    expect(message(4)).toContain('"d"');

    const { consumed, emitted, dropped, poison, deadLettered, poisonByReason, restarts } = loop.counters;
    expect({ consumed, emitted, dropped, poison, deadLettered, poisonByReason, restarts }).toEqual({
      consumed: 6,
      emitted: 2,
      dropped: 0,
      poison: 4,
      deadLettered: 4,
      poisonByReason: { invalid_json: 1, not_object: 1, division_by_zero: 1, number_out_of_range: 1 },
      restarts: 0,
    });
    expect(kafka.committed(GROUP)).toEqual({ "in:0": 6n });
  });
});

describe("a checkpoint", () => {
  // Kafka Streams' order: a committed offset must never be ahead of the state that covers it, or a
  // crash between the two loses the rows in between from the state.
  test("at-least-once writes the state, and only then commits the offsets it covers", async () => {
    const kafka = new MemoryKafka();
    kafka.createTopic("in", 2);
    kafka.createTopic("out", 2);
    kafka.createTopic(STATE_TOPIC, 2);
    const { stop } = start(kafka, planOf(windowedCount(60_000, "id"), {}));
    // Three waves, so that several checkpoints run.
    for (let wave = 0; wave < 3; wave++) {
      kafka.produce("in", Array.from({ length: 4 }, (_, i) => ({ key: null, value: json({ id: `k${i % 2}`, ts: 1000 * wave + i }), partition: i % 2 })));
      await waitFor(`wave ${wave} is committed`, () => kafka.committed(GROUP)["in:0"] === BigInt(2 * (wave + 1)) && kafka.committed(GROUP)["in:1"] === BigInt(2 * (wave + 1)));
    }
    expect(await stop()).toBe("STOPPED");

    // Replays the journal: the input offsets the state covers, per partition, as each state
    // record was written; every offset commit must be covered at the time it is made.
    const covered = new Map<number, bigint>();
    const commits: string[] = [];
    for (const entry of kafka.journal) {
      if (entry.kind === "send" && entry.topic === STATE_TOPIC && entry.key === "0/\u0000offsets") {
        const record = kafka.read(STATE_TOPIC, entry.partition).find((r) => r.offset === entry.offset)!;
        covered.set(entry.partition, BigInt(JSON.parse(decoder.decode(record.value!)).in));
      }
      if (entry.kind === "commit-offsets") {
        for (const o of entry.offsets) {
          commits.push(`${o.partition}@${o.offset}`);
          expect({ partition: o.partition, offset: o.offset, stateCovers: covered.get(o.partition) }).toEqual({ partition: o.partition, offset: o.offset, stateCovers: o.offset });
        }
      }
    }
    expect(commits.filter((c) => c.startsWith("0@"))).toEqual(["0@2", "0@4", "0@6"]);
    expect(commits.filter((c) => c.startsWith("1@"))).toEqual(["1@2", "1@4", "1@6"]);
  });
});

describe("a process frozen past its session (SIGSTOP, a suspended VM)", () => {
  // Fault soak, Node + librdkafka, at-least-once: a member frozen for 20 s was dropped, another
  // processed its partitions, then the group handed them back unchanged (static member): the
  // woken member fired windows from its old state (8 and 357 rows for 400).
  const frozen = async (env: Record<string, string>) => {
    const kafka = new MemoryKafka();
    kafka.createTopic("in", 1);
    kafka.createTopic("out", 1);
    kafka.createTopic(STATE_TOPIC, 1);
    const { loop, log, stop } = start(kafka, planOf(windowedCount(60_000, "id"), { STREAM_SESSION_TIMEOUT_MS: "3000", ...env }), { timings: { pauseMs: 200 } });
    kafka.produce("in", [{ key: null, value: json({ id: "a", ts: 1 }), partition: 0 }]);
    await waitFor("the row committed", () => kafka.committed(GROUP)["in:0"] === 1n);
    const until = Date.now() + 3300;
    while (Date.now() < until) {
      // frozen: no timer runs
    }
    kafka.produce("in", [{ key: null, value: json({ id: "a", ts: 2 }), partition: 0 }]);
    await waitFor("the second row committed", () => kafka.committed(GROUP)["in:0"] === 2n, 10_000);
    const restarts = loop.counters.restarts;
    expect(await stop()).toBe("STOPPED");
    return { log, restarts };
  };

  test("at-least-once with state: it starts over, its state read again, before it processes what it polled", async () => {
    const { log, restarts } = await frozen({});
    expect(log.filter((l) => l.includes("this process was frozen for 3 s, past its session (3000 ms)"))).toHaveLength(1);
    expect(restarts).toBe(1);
  }, 20_000);

  test("exactly-once: fencing deals with it, no restart", async () => {
    const { log, restarts } = await frozen({ STREAM_EXACTLY_ONCE: "true" });
    expect(log.filter((l) => l.includes("frozen"))).toHaveLength(0);
    expect(restarts).toBe(0);
  }, 20_000);
});

describe("exactly-once", () => {
  test("a transaction that fails to commit is aborted: its outputs and state vanish, and the work is done again from the last committed offsets and state", async () => {
    const kafka = new MemoryKafka();
    kafka.createTopic("in", 1);
    kafka.createTopic("out", 1);
    kafka.createTopic(STATE_TOPIC, 1);
    const { loop, stop } = start(kafka, planOf(windowedCount(1000, "id"), { STREAM_EXACTLY_ONCE: "true" }));
    kafka.produce("in", [{ key: null, value: json({ id: "a", ts: 100 }) }, { key: null, value: json({ id: "a", ts: 150 }) }, { key: null, value: json({ id: "b", ts: 200 }) }]);
    await waitFor("the first three rows are committed", () => kafka.committed(GROUP)["in:0"] === 3n);
    // The next transaction holds one more "a", and a row whose time closes the window [0, 1000).
    kafka.failNext("commit-transaction", new FvError("KAFKA_RETRYABLE", "the coordinator moved"));
    kafka.produce("in", [{ key: null, value: json({ id: "a", ts: 300 }) }, { key: null, value: json({ id: "c", ts: 5000 }) }]);
    await waitFor("the rows are committed after the abort", () => kafka.committed(GROUP)["in:0"] === 5n);
    expect(await stop()).toBe("STOPPED");

    // The aborted transaction had fired the window too; only the redone one is visible, once,
    // and it counted "a" three times, not four: the state went back to the last checkpoint.
    expect(values(kafka, "out")).toEqual([json({ windowStart: 0, windowEnd: 1000, id: "a", n: 3 }), json({ windowStart: 0, windowEnd: 1000, id: "b", n: 1 })].sort());
    expect(kafka.journal.filter((e) => e.kind === "transaction").map((e) => (e as Extract<JournalEntry, { kind: "transaction" }>).outcome)).toEqual(["commit", "abort", "commit"]);
    const { consumed, emitted, transactionsAborted, restarts } = loop.counters;
    // Counted once committed: the aborted attempt's rows and outputs are not in the totals.
    expect({ consumed, emitted, transactionsAborted, restarts }).toEqual({ consumed: 5, emitted: 2, transactionsAborted: 1, restarts: 1 });
    expect(kafka.committed(GROUP)).toEqual({ "in:0": 5n });
    expect(kafka.uncommittedRecords()).toBe(0);
  });

  // Both adapters rejoin without the loop's checkpoint once its rebalance hook has waited 20 s (a
  // batch stuck on a slow broker): the new assignment then lands in the middle of the batch, and
  // the member is in the new generation, so only the loop can keep the revoked work from committing.
  test("a partition revoked while its records are in the open transaction aborts it: none of its work commits, and its next owner does it once", async () => {
    const kafka = new MemoryKafka({ rebalanceHookTimeoutMs: 50 });
    kafka.createTopic("in", 2);
    kafka.createTopic("out", 2);
    const { loop, stop } = start(kafka, planOf(selectId, { STREAM_EXACTLY_ONCE: "true", STREAM_CHECKPOINT_INTERVAL_MS: "60000" }));
    kafka.produce("in", [0, 1].map((id) => ({ key: null, value: json({ id }), partition: id % 2 })));
    await waitFor("the first batch is in the open transaction", () => kafka.uncommittedRecords() === 2);
    // The next batch's send hangs; meanwhile a second member joins and takes in:1.
    kafka.slowNext("send", 400);
    kafka.produce("in", [2, 3].map((id) => ({ key: null, value: json({ id }), partition: id % 2 })));
    await waitFor("the send hangs", () => kafka.journal.some((e) => e.kind === "slow"));
    const other = kafka.client().consumer({ groupId: GROUP, clientId: "other", topics: ["in"], offsetReset: "earliest", stableOffsets: true });
    await other.start();
    expect(other.owned()).toEqual([{ topic: "in", partition: 1 }]);
    await waitFor("the loop restarted", () => loop.counters.restarts === 1, 3000);
    await waitFor("the new session has in:0's outputs in its transaction", () => kafka.uncommittedRecords() === 2);
    // Nothing of the aborted transaction is visible, and no offset of in:1 was committed.
    expect(kafka.readText("out")).toEqual([]);
    expect(kafka.committed(GROUP)).toEqual({});
    // The other member leaves without reading: the loop commits in:0's work at the rebalance,
    // and in:1 comes back to it.
    await other.close();
    await waitFor("in:0 is committed and in:1's outputs are in the next transaction", () => kafka.committed(GROUP)["in:0"] === 2n && kafka.uncommittedRecords() === 2);
    expect(await stop()).toBe("STOPPED");

    expect(values(kafka, "out")).toEqual([0, 1, 2, 3].map((id) => json({ id })).sort());
    expect(kafka.committed(GROUP)).toEqual({ "in:0": 2n, "in:1": 2n });
    const { consumed, emitted, transactionsCommitted, transactionsAborted, restarts } = loop.counters;
    expect({ consumed, emitted, transactionsCommitted, transactionsAborted, restarts }).toEqual({ consumed: 4, emitted: 4, transactionsCommitted: 2, transactionsAborted: 1, restarts: 1 });
  });

  test("an idle member whose group takes a while to rebalance commits its next transaction in the new generation: its empty batches meanwhile tie no transaction to the old one", async () => {
    const kafka = new MemoryKafka();
    kafka.createTopic("in", 2);
    kafka.createTopic("out", 2);
    kafka.createTopic(STATE_TOPIC, 2);
    // A stateful stage: with no input the loop runs empty batches (timers advance) every 20 ms.
    const { loop, stop } = start(kafka, planOf(windowedCount(60_000, "id"), { STREAM_EXACTLY_ONCE: "true", STREAM_CHECKPOINT_INTERVAL_MS: "50" }), { timings: { idleAdvanceMs: 20 } });
    kafka.produce("in", [{ key: null, value: json({ id: 0, ts: 1000 }), partition: 0 }]);
    await waitFor("the first row is committed", () => kafka.committed(GROUP)["in:0"] === 1n);
    // A second member joins whose rebalance hook takes 300 ms: the group's new generation waits for it.
    const other = kafka.client().consumer({
      groupId: GROUP, clientId: "other", topics: ["in"], offsetReset: "earliest", stableOffsets: true,
      listener: { onRebalance: () => new Promise((r) => setTimeout(r, 300)) },
    });
    await other.start();
    expect(other.owned()).toEqual([{ topic: "in", partition: 1 }]);
    kafka.produce("in", [{ key: null, value: json({ id: 1, ts: 2000 }), partition: 0 }]);
    await waitFor("the row of the new generation is committed", () => kafka.committed(GROUP)["in:0"] === 2n, 3000);
    expect(loop.counters.restarts).toBe(0);
    await other.close();
    expect(await stop()).toBe("STOPPED");
  });

  test("a member the group forgot (its session expired) aborts its open transaction and does the work again as a new member", async () => {
    const kafka = new MemoryKafka();
    kafka.createTopic("in", 2);
    kafka.createTopic("out", 2);
    // A long checkpoint interval: the transaction stays open until the stop.
    const { loop, stop } = start(kafka, planOf(selectId, { STREAM_EXACTLY_ONCE: "true", STREAM_CHECKPOINT_INTERVAL_MS: "60000" }));
    kafka.produce("in", [0, 1, 2].map((id) => ({ key: null, value: json({ id, x: 1 }), partition: id % 2 })));
    await waitFor("the outputs are in the open transaction", () => kafka.uncommittedRecords() === 3);
    // The group forgets the member (a pause past its session, a broker that lost the group): it
    // rejoins as a new member, and all its partitions are revoked and assigned again.
    kafka.expire(GROUP);
    await waitFor("the loop restarted", () => loop.counters.restarts === 1, 3000);
    await waitFor("the new session has the outputs in its transaction", () => kafka.uncommittedRecords() === 3);
    expect(await stop()).toBe("STOPPED");

    expect(values(kafka, "out")).toEqual([json({ id: 0 }), json({ id: 1 }), json({ id: 2 })]);
    expect(kafka.committed(GROUP)).toEqual({ "in:0": 2n, "in:1": 1n });
    const { consumed, emitted, transactionsCommitted, transactionsAborted, restarts } = loop.counters;
    expect({ consumed, emitted, transactionsCommitted, transactionsAborted, restarts }).toEqual({ consumed: 3, emitted: 3, transactionsCommitted: 1, transactionsAborted: 1, restarts: 1 });
  });

  test("a producer fenced by another with its transactional id ends the session: the next one fences that one back and commits each row once", async () => {
    const kafka = new MemoryKafka();
    kafka.createTopic("in", 1);
    kafka.createTopic("out", 1);
    const { loop, stop } = start(kafka, planOf(selectId, { STREAM_EXACTLY_ONCE: "true", STREAM_CHECKPOINT_INTERVAL_MS: "60000" }));
    kafka.produce("in", [0, 1].map((id) => ({ key: null, value: json({ id }) })));
    await waitFor("the outputs are in the open transaction", () => kafka.uncommittedRecords() === 2);
    // A zombie of the same instance (same transactional id) starts: it fences the loop's producer
    // and aborts the loop's open transaction.
    // Two producers take turns (STREAM_TRANSACTION_PRODUCERS=2): the first holds the open transaction.
    expect(kafka.transactionalIds()).toEqual([`fv-${PIPELINE}-t-0`, `fv-${PIPELINE}-t-0.2`]);
    const zombie = kafka.client().transactionalProducer({ clientId: "zombie", transactionalId: kafka.transactionalIds()[0]! });
    await zombie.ready();
    expect(kafka.uncommittedRecords()).toBe(0);
    // The loop finds out at its next send.
    kafka.produce("in", [{ key: null, value: json({ id: 2 }) }]);
    await waitFor("the loop restarted", () => loop.counters.restarts === 1);
    await waitFor("the new session has the outputs in its transaction", () => kafka.uncommittedRecords() === 3);
    expect(await stop()).toBe("STOPPED");
    expect(loop.error).toBeUndefined();

    expect(values(kafka, "out")).toEqual([json({ id: 0 }), json({ id: 1 }), json({ id: 2 })]);
    expect(kafka.committed(GROUP)).toEqual({ "in:0": 3n });
    // The zombie is fenced in turn.
    await expect(zombie.send([{ topic: "out", key: null, value: "late" }])).rejects.toMatchObject({ code: "KAFKA_FENCED" });
    const { consumed, transactionsCommitted, transactionsAborted, restarts } = loop.counters;
    expect({ consumed, transactionsCommitted, transactionsAborted, restarts }).toEqual({ consumed: 3, transactionsCommitted: 1, transactionsAborted: 1, restarts: 1 });
  });
});

describe("at-least-once with a send in flight", () => {
  test("the next batch is read and transformed while the last one's send is acknowledged; no offset of a batch is committed before its send is", async () => {
    const kafka = new MemoryKafka();
    kafka.createTopic("in", 1);
    kafka.createTopic("out", 1);
    // No checkpoint comes due on its own here (it would wait for the send in flight): only the stop's.
    const { log, stop } = start(kafka, planOf(selectId, { STREAM_CHECKPOINT_INTERVAL_MS: "60000" }), { debug: true });
    kafka.slowNext("send", 400, { topic: "out" });
    const batches = () => log.filter((l) => l.startsWith("debug: batch: sending")).length;
    kafka.produce("in", [0, 1].map((id) => ({ key: null, value: json({ id }) })));
    await waitFor("the first batch's send is in flight", () => kafka.journal.some((e) => e.kind === "slow"));
    kafka.produce("in", [2, 3].map((id) => ({ key: null, value: json({ id }) })));
    // The second batch is transformed while the first send waits (before, the loop waited for the ack first) …
    await waitFor("the second batch is transformed", () => batches() === 2, 300);
    // … but it is sent only after the first send, and nothing is written or committed meanwhile.
    expect(kafka.readText("out")).toEqual([]);
    expect(kafka.committed(GROUP)["in:0"]).toBeUndefined();
    await waitFor("both batches are written", () => kafka.readText("out").length === 4);
    expect(kafka.readText("out").map(([, v]) => v)).toEqual([0, 1, 2, 3].map((id) => json({ id })));
    expect(await stop()).toBe("STOPPED");
    expect(kafka.committed(GROUP)["in:0"]).toBe(4n);
  });

  test("a send that fails for good is never acknowledged: the batches after it are not committed, and the next session does them again", async () => {
    const kafka = new MemoryKafka();
    kafka.createTopic("in", 1);
    kafka.createTopic("out", 1);
    const { loop, stop } = start(kafka, planOf(selectId, { STREAM_CHECKPOINT_INTERVAL_MS: "20" }), { timings: { sendRetries: 2, sendRetryPauseMs: 10, restartBackoff: { firstMs: 10, maxMs: 10 } } });
    kafka.produce("in", [0].map((id) => ({ key: null, value: json({ id }) })));
    await waitFor("the first batch is committed", () => kafka.committed(GROUP)["in:0"] === 1n);
    kafka.failNext("send", new FvError("KAFKA_RETRYABLE", "injected: the broker is away"), { topic: "out", times: 2 });
    kafka.produce("in", [1, 2].map((id) => ({ key: null, value: json({ id }) })));
    await waitFor("the session restarted and did them again", () => kafka.committed(GROUP)["in:0"] === 3n);
    expect(loop.counters.restarts).toBe(1);
    expect(values(kafka, "out")).toEqual([0, 1, 2].map((id) => json({ id })).sort());
    expect(await stop()).toBe("STOPPED");
  });
});

describe("exactly-once with the commit overlapping the next batches", () => {
  const transactions = (kafka: MemoryKafka) =>
    kafka.journal.filter((e): e is Extract<JournalEntry, { kind: "transaction" }> => e.kind === "transaction").map((e) => ({ outcome: e.outcome, offsets: e.offsets.map((o) => `${o.topic}:${o.partition}@${o.offset}`) }));

  test("at-least-once: one checkpoint is written while the loop goes on; when the next is due and the last is still being written, the loop waits for it", async () => {
    const kafka = new MemoryKafka();
    kafka.createTopic("in", 1);
    kafka.createTopic("out", 1);
    const { log, stop } = start(kafka, planOf(selectId, { STREAM_CHECKPOINT_INTERVAL_MS: "20" }), { debug: true });
    kafka.slowNext("commit-offsets", 500);
    const batches = () => log.filter((l) => l.startsWith("debug: batch: sending")).length;
    kafka.produce("in", [0, 1].map((id) => ({ key: null, value: json({ id }) })));
    await waitFor("the first checkpoint is slow", () => kafka.journal.some((e) => e.kind === "slow"));
    // One more batch goes while it is written …
    kafka.produce("in", [2, 3].map((id) => ({ key: null, value: json({ id }) })));
    await waitFor("the second batch", () => batches() === 2);
    // … but at the next checkpoint (due 20 ms on) the loop waits for the slow one: the third batch waits too.
    await new Promise((r) => setTimeout(r, 60));
    kafka.produce("in", [4].map((id) => ({ key: null, value: json({ id }) })));
    await new Promise((r) => setTimeout(r, 200));
    expect(kafka.journal.some((e) => e.kind === "commit-offsets")).toBe(false);
    expect(batches()).toBe(2);
    await waitFor("everything is committed", () => kafka.committed(GROUP)["in:0"] === 5n);
    expect(batches()).toBe(3);
    expect(await stop()).toBe("STOPPED");
    expect(values(kafka, "out")).toEqual([0, 1, 2, 3, 4].map((id) => json({ id })).sort());
  });

    test("a slow commit holds no batch up: the batches read meanwhile fill the next transaction, which grows, and commits once the first is done", async () => {
    const kafka = new MemoryKafka();
    kafka.createTopic("in", 1);
    kafka.createTopic("out", 1);
    const { loop, log, stop } = start(kafka, planOf(selectId, { STREAM_EXACTLY_ONCE: "true", STREAM_CHECKPOINT_INTERVAL_MS: "20" }), { debug: true });
    kafka.slowNext("commit-transaction", 400);
    kafka.produce("in", [0, 1].map((id) => ({ key: null, value: json({ id }) })));
    await waitFor("the first commit is slow", () => kafka.journal.some((e) => e.kind === "slow"));
    // Three more batches while it runs: each is processed at once, its records wait in the queue.
    const batches = () => log.filter((l) => l.startsWith("debug: batch: sending")).length;
    for (const ids of [[2, 3], [4], [5, 6, 7]]) {
      const before = batches();
      kafka.produce("in", ids.map((id) => ({ key: null, value: json({ id }) })));
      await waitFor(`batch ${ids} processed`, () => batches() === before + 1);
    }
    await waitFor("everything is committed", () => kafka.committed(GROUP)["in:0"] === 8n);
    expect(await stop()).toBe("STOPPED");

    // Every batch was processed before the slow commit was done …
    const done = log.indexOf("debug: commit transaction: done");
    expect(log.slice(0, done).filter((l) => l.startsWith("debug: batch: sending"))).toHaveLength(4);
    // … and the three went into one transaction, not three.
    expect(transactions(kafka)).toEqual([{ outcome: "commit", offsets: ["in:0@2"] }, { outcome: "commit", offsets: ["in:0@8"] }]);
    expect(values(kafka, "out")).toEqual([0, 1, 2, 3, 4, 5, 6, 7].map((id) => json({ id })).sort());
    const { consumed, emitted, transactionsCommitted } = loop.counters;
    expect({ consumed, emitted, transactionsCommitted }).toEqual({ consumed: 8, emitted: 8, transactionsCommitted: 2 });
  });

  /**
   * Killed right after a commit whose transaction ran while the next batch was processed: that
   * batch's records were still queued for the next transaction. `unsafe` commits that batch's
   * offsets in the first transaction, as a broken overlap would.
   */
  async function killDuringOverlap(unsafe: boolean) {
    const kafka = new MemoryKafka();
    kafka.createTopic("in", 1);
    kafka.createTopic("out", 1);
    const victim = crashable(kafka.client());
    const plan = { ...planOf(selectId, { STREAM_EXACTLY_ONCE: "true", STREAM_CHECKPOINT_INTERVAL_MS: "20" }), ...(unsafe ? { unsafeCommitAhead: true } : {}) };
    const first = start(kafka, plan, { client: victim.client, debug: true });
    // The first batch's send is slow: its commit is queued behind it, and the second batch behind that.
    kafka.slowNext("send", 300, { topic: "out" });
    kafka.produce("in", [0, 1, 2].map((id) => ({ key: null, value: json({ id }) })));
    await waitFor("the first batch's send is under way", () => kafka.journal.some((e) => e.kind === "slow"));
    await waitFor("its commit is queued", () => first.log.some((l) => l.startsWith("debug: commit transaction: queued (3 records")));
    victim.crashAfter("commit");
    kafka.produce("in", [3, 4, 5].map((id) => ({ key: null, value: json({ id }) })));
    await waitFor("the second batch is processed", () => first.log.filter((l) => l.startsWith("debug: batch: sending 3")).length === 2);
    await waitFor("the process is killed right after the first commit", () => victim.crashed, 3000);
    // Two producers take turns: the second batch went out in the other producer's transaction
    // while the first committed, and the kill left that one open. The broker aborts it (at its
    // timeout; the next owner's fencing of departed owners does it at once on a real broker,
    // which this in-memory one does not model).
    for (const transactionalId of kafka.transactionalIds()) await kafka.client().transactionalProducer({ clientId: "broker", transactionalId }).ready();
    // Its member is gone once its session expires; another instance takes the partition over.
    kafka.expire(GROUP, `${GROUP}-t-`);
    const second = start(kafka, { ...planOf(selectId, { STREAM_EXACTLY_ONCE: "true" }), instanceId: "u" });
    await waitFor("the partition is committed to its end", () => kafka.committed(GROUP)["in:0"] === 6n && kafka.uncommittedRecords() === 0);
    // Time for the new instance to redo whatever the offsets say is not done.
    await new Promise((r) => setTimeout(r, 300));
    expect(await second.stop()).toBe("STOPPED");
    victim.release();
    await first.stop();
    return { kafka, transactions: transactions(kafka) };
  }

  test("kill -9 right after a commit that overlapped the next batch: the next owner does that batch, every row once", async () => {
    const { kafka, transactions: committed } = await killDuringOverlap(false);
    expect(values(kafka, "out")).toEqual([0, 1, 2, 3, 4, 5].map((id) => json({ id })).sort());
    // The killed process's commit held only its first batch; the second batch, sent meanwhile by
    // its other producer, was aborted with that producer's transaction, and redone.
    expect(committed).toEqual([{ outcome: "commit", offsets: ["in:0@3"] }, { outcome: "abort", offsets: [] }, { outcome: "commit", offsets: ["in:0@6"] }]);
    expect(kafka.committed(GROUP)).toEqual({ "in:0": 6n });
  });

  test("the same kill with the overlap made unsafe on purpose (the next batch's offsets in the committing transaction) loses that batch: the test above would fail", async () => {
    const { kafka, transactions: committed } = await killDuringOverlap(true);
    expect(committed[0]).toEqual({ outcome: "commit", offsets: ["in:0@6"] });
    expect(kafka.committed(GROUP)).toEqual({ "in:0": 6n });
    // Rows 3, 4 and 5 are nowhere: the killed process never sent them, and the offsets say done.
    expect(values(kafka, "out")).toEqual([0, 1, 2].map((id) => json({ id })).sort());
  });
});

describe("restarts", () => {
  test("back off 0.2 s, doubling while sessions fail without progress, and start again from 0.2 s after a session that made progress", async () => {
    const kafka = new MemoryKafka();
    kafka.createTopic("in", 1);
    kafka.createTopic("out", 1);
    kafka.produce("in", [0, 1].map((id) => ({ key: null, value: json({ id }) })));
    kafka.failNext("poll", new FvError("KAFKA_RETRYABLE", "the broker is away"), { times: 3 });
    const { loop, stop } = start(kafka, planOf(selectId, {}));
    await waitFor("the rows are committed", () => kafka.committed(GROUP)["in:0"] === 2n, 10_000);
    expect(loop.counters.restarts).toBe(3);
    kafka.failNext("poll", new FvError("KAFKA_RETRYABLE", "the broker is away again"));
    await waitFor("the loop rejoined after the fourth failure", () => kafka.journal.filter((e) => e.kind === "join").length === 5, 10_000);
    expect(await stop()).toBe("STOPPED");

    // The pause from each failure to the next join of the group.
    const pauses: number[] = [];
    let failedAt: number | undefined;
    for (const entry of kafka.journal) {
      if (entry.kind === "fault") failedAt = entry.at;
      if (entry.kind === "join" && failedAt !== undefined) {
        pauses.push(entry.at - failedAt);
        failedAt = undefined;
      }
    }
    const expected = [200, 400, 800, 200];
    expect(pauses.length).toBe(4);
    // Each at least its backoff, and well short of the next one (doubling from where it was).
    expect(pauses.map((ms, i) => ms >= expected[i]! && ms < expected[i]! * 1.75)).toEqual([true, true, true, true]);
    expect(loop.counters.restarts).toBe(4);
    expect(values(kafka, "out")).toEqual([json({ id: 0 }), json({ id: 1 })]);
  }, 20_000);
});

describe("a static member fenced by a consumer with its group.instance.id", () => {
  const fenced = () => new FvError("KAFKA_FENCED", "fetching failed: Local: Fatal error (librdkafka -150): the static member pod-7-0 was fenced", { context: { instanceFenced: true } });

  test("takes the id back with a fresh consumer (a rejoin across a broker restart) and loses nothing", async () => {
    const kafka = new MemoryKafka();
    kafka.createTopic("in", 1);
    kafka.createTopic("out", 1);
    kafka.produce("in", [0, 1, 2].map((id) => ({ key: null, value: json({ id }) })));
    kafka.failNext("poll", fenced(), { times: 2 });
    const { loop, log, stop } = start(kafka, planOf(selectId, { STREAM_INSTANCE_ID: "pod-7" }));
    await waitFor("the rows are committed", () => kafka.committed(GROUP)["in:0"] === 3n, 10_000);
    expect(loop.counters.restarts).toBe(2);
    expect(log.filter((line) => line.startsWith("warn: fenced: fetching failed: Local: Fatal error"))).toHaveLength(2);
    expect(await stop()).toBe("STOPPED");
    expect(values(kafka, "out")).toEqual([0, 1, 2].map((id) => json({ id })));
  });

  test("fenced 3 times within a minute, another process has the same STREAM_INSTANCE_ID: the loop ends with that setting's error", async () => {
    const kafka = new MemoryKafka();
    kafka.createTopic("in", 1);
    kafka.createTopic("out", 1);
    kafka.failNext("poll", fenced(), { times: 3 });
    const { loop } = start(kafka, planOf(selectId, { STREAM_INSTANCE_ID: "pod-7" }));
    await waitFor("the loop ends", () => loop.state === "FAILED", 10_000);
    expect(loop.error?.code).toBe("INVALID_SETTINGS");
    expect(loop.error?.message).toStartWith("this consumer was fenced 3 times within 60 s by another consumer with its group.instance.id: another process runs with STREAM_INSTANCE_ID=pod-7. Give each process its own STREAM_INSTANCE_ID");
    expect(loop.counters.restarts).toBe(2);
  });

  /** Two rows, polls failing with `faults` in turn: the loop must rejoin after each and commit both rows once. */
  async function rejoinsEachTime(faults: Array<{ error: FvError; times: number }>, instanceFencings: { times: number; withinMs: number }) {
    const kafka = new MemoryKafka();
    kafka.createTopic("in", 1);
    kafka.createTopic("out", 1);
    kafka.produce("in", [0, 1].map((id) => ({ key: null, value: json({ id }) })));
    for (const { error, times } of faults) kafka.failNext("poll", error, { times });
    const { loop, stop } = start(kafka, planOf(selectId, { STREAM_INSTANCE_ID: "pod-7" }), { timings: { instanceFencings } });
    await waitFor("the rows are committed", () => kafka.committed(GROUP)["in:0"] === 2n, 10_000);
    expect(loop.counters.restarts).toBe(3);
    expect(await stop()).toBe("STOPPED");
    expect(values(kafka, "out")).toEqual([0, 1].map((id) => json({ id })));
  }

  test("fencings further apart than the window are rejoins each time", async () => {
    // The backoff (0.2, 0.4 s) keeps each fencing more than 150 ms after the one before.
    await rejoinsEachTime([{ error: fenced(), times: 3 }], { times: 2, withinMs: 150 });
  }, 20_000);

  test("other failures in between do not count as fencings of the static member", async () => {
    await rejoinsEachTime([{ error: fenced(), times: 1 }, { error: new FvError("KAFKA_FENCED", "the group moved on"), times: 2 }], { times: 2, withinMs: 60_000 });
  }, 20_000);
});

describe("a repartition hop", () => {
  test("holds a window until every upstream partition's watermark has passed it, then fires it once with the rows of both", async () => {
    const kafka = new MemoryKafka();
    const topology = windowedCount(1000, "g");
    const keying = planKeying(compileTopology(topology), PIPELINE);
    const hop = keying[0]!.hop!;
    const hops: Record<number, HopPlan> = { 0: { topic: hop.topic, partitions: 2, keyColumns: hop.keyColumns.map((c) => [...c]), upstream: ["in:0", "in:1"] } };
    for (const topic of ["in", "out", hop.topic, STATE_TOPIC]) kafka.createTopic(topic, 2);
    // Idle partitions never stop holding the watermark back here.
    const { loop, stop } = start(kafka, planOf(topology, { STREAM_IDLE_PARTITION_MS: "60000" }, { hops }));
    kafka.produce("in", [
      { key: null, partition: 0, value: json({ g: "a", ts: 100 }) },
      { key: null, partition: 0, value: json({ g: "b", ts: 200 }) },
      { key: null, partition: 0, value: json({ g: "c", ts: 5000 }) },
      { key: null, partition: 1, value: json({ g: "a", ts: 150 }) },
    ]);
    // Every partition of the hop hears both upstream partitions: in:0 is at 5000, in:1 at 150.
    const heard = () => {
      const out = new Set<string>();
      for (const r of kafka.read(hop.topic)) {
        if (!r.headers.some(([k]) => k === "fv.watermark")) continue;
        const { source, watermark, idle } = JSON.parse(decoder.decode(r.value!));
        out.add(`${r.partition} ${source} ${watermark} ${idle}`);
      }
      return out;
    };
    const both = ["0 in:0 5000 false", "0 in:1 150 false", "1 in:0 5000 false", "1 in:1 150 false"];
    await waitFor("both hop partitions heard both upstream watermarks", () => both.every((w) => heard().has(w)));
    await waitFor("the four rows are committed", () => kafka.committed(GROUP)["in:0"] === 3n && kafka.committed(GROUP)["in:1"] === 1n);
    // Held by in:1 at 150: nothing fires, however long.
    await new Promise((r) => setTimeout(r, 300));
    expect(kafka.readText("out")).toEqual([]);

    kafka.produce("in", [{ key: null, partition: 1, value: json({ g: "d", ts: 6000 }) }]);
    await waitFor("the window fired", () => kafka.read("out").length === 2);
    await new Promise((r) => setTimeout(r, 100));
    expect(await stop()).toBe("STOPPED");
    expect(values(kafka, "out")).toEqual([json({ windowStart: 0, windowEnd: 1000, g: "a", n: 2 }), json({ windowStart: 0, windowEnd: 1000, g: "b", n: 1 })].sort());
    // Keyed by the group column, as the stage's output is.
    expect(kafka.readText("out").map(([k]) => k).sort()).toEqual(["a", "b"]);
    expect({ consumed: loop.counters.consumed, repartitioned: loop.counters.repartitioned, emitted: loop.counters.emitted }).toEqual({ consumed: 5, repartitioned: 5, emitted: 2 });
  });
});
