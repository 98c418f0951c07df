import { compileTopology, type CompiledStage } from "../control/topology.ts";
import { FvError, recoveryOf } from "../errors.ts";
import type { CommitOffset, GroupConsumer, InboundRecord, KafkaClient, OutboundRecord, Producer, TopicPartition } from "../kafka/port.ts";
import { emptyCounters, type LoopCounters } from "./counters.ts";
import type { Logger } from "./logger.ts";
import type { LoopPlan } from "./plan.ts";
import { decodeRow } from "./record-codec.ts";

/** Lifecycle of a loop; every change is checked against `transitions`. */
export type LoopState = "CREATED" | "STARTING" | "RUNNING" | "STOPPING" | "STOPPED" | "FAILED";
const transitions: Record<LoopState, LoopState[]> = {
  CREATED: ["STARTING", "STOPPED"],
  STARTING: ["RUNNING", "STOPPING", "FAILED"],
  RUNNING: ["STOPPING", "FAILED"],
  STOPPING: ["STOPPED", "FAILED"],
  STOPPED: [],
  FAILED: [],
};

/** Where records of one input topic go: each stage that reads it. */
interface Route {
  stage: CompiledStage;
  outputTopic: string;
  deadLetterTopic: string | undefined;
  stageLabel: string;
}

/** Retries of a send that failed with a retryable error, and the pause between them. */
const SEND_RETRIES = 10;
const SEND_RETRY_PAUSE_MS = 500;

const tpKey = (topic: string, partition: number) => `${topic}\u0000${partition}`;

/**
 * One partition-owning consumer: consume → transform → emit → commit, on its own.
 *
 * Offsets are committed only for records whose outputs Kafka has acknowledged (at-least-once),
 * every `checkpointIntervalMs`, when a rebalance starts, and before the loop lets go.
 */
export class ConsumerLoop {
  readonly #plan: LoopPlan;
  readonly #client: KafkaClient;
  readonly #log: Logger;
  readonly #routes = new Map<string, Route[]>();
  readonly counters: LoopCounters = emptyCounters();
  #state: LoopState = "CREATED";
  #consumer: GroupConsumer | undefined;
  #producer: Producer | undefined;
  /** Next offset to commit per partition, for records already acknowledged downstream. */
  readonly #pending = new Map<string, CommitOffset>();
  /** Last committed offset per owned partition: a commit never moves an offset back. */
  readonly #committed = new Map<string, bigint>();
  #commitChain: Promise<void> = Promise.resolve();
  #stopRequested = false;
  #error: FvError | undefined;

  constructor(plan: LoopPlan, client: KafkaClient, log: Logger) {
    this.#plan = plan;
    this.#client = client;
    this.#log = log;
    const compiled = compileTopology(plan.topology);
    for (const stage of compiled.stages) {
      const output = plan.bindings[stage.def.output]!;
      for (const input of stage.def.inputs) {
        const binding = plan.bindings[input]!;
        const routes = this.#routes.get(binding.topic) ?? [];
        routes.push({
          stage,
          outputTopic: output.topic,
          deadLetterTopic: binding.policy.deadLetter,
          stageLabel: `stage ${stage.index + 1} (${stage.def.inputs.join(", ")} → ${stage.def.output})`,
        });
        this.#routes.set(binding.topic, routes);
      }
    }
  }

  get state(): LoopState {
    return this.#state;
  }

  get error(): FvError | undefined {
    return this.#error;
  }

  /** Partitions this loop owns now. */
  owned(): TopicPartition[] {
    return this.#consumer?.owned() ?? [];
  }

  #to(next: LoopState): void {
    if (!transitions[this.#state].includes(next)) {
      throw new FvError("KAFKA_FATAL", `consumer loop cannot go from ${this.#state} to ${next}`);
    }
    this.#state = next;
  }

  /** A background failure (a commit) that the loop raises at its next turn. */
  #fail(error: unknown): void {
    this.#error ??= error instanceof FvError ? error : new FvError("KAFKA_FATAL", String(error), { cause: error });
  }

  /** Asks the loop to finish its in-flight batch, commit and leave. Idempotent. */
  stop(): void {
    this.#stopRequested = true;
  }

  /** Runs until stopped, idle for `idleTimeoutMs`, or failed. Resolves with the final state. */
  async run(): Promise<LoopState> {
    if (this.#stopRequested) {
      this.#to("STOPPED");
      return this.#state;
    }
    this.#to("STARTING");
    const plan = this.#plan;
    const { settings } = plan;
    const clientId = `${plan.groupId}-${plan.instanceId}-${plan.consumerIndex}`;
    try {
      this.#producer = this.#client.producer({ clientId });
      this.#consumer = this.#client.consumer({
        groupId: plan.groupId,
        clientId,
        topics: [...this.#routes.keys()],
        offsetReset: settings.offsetReset,
        maxBuffered: settings.batchSize * 4,
        listener: {
          onRebalance: () => {
            // 1. A rebalance started: commit what is acknowledged while this generation holds.
            void this.#commit(true).catch((error) => this.#log("warn", `commit at rebalance failed: ${(error as Error).message}`));
          },
          onAssignment: ({ assigned, revoked, owned }) => {
            // 2. Revoked partitions: their in-flight work is dropped (the new owner reads it again
            //    from the last commit) and nothing more is committed for them.
            for (const tp of revoked) {
              this.#pending.delete(tpKey(tp.topic, tp.partition));
              this.#committed.delete(tpKey(tp.topic, tp.partition));
            }
            for (const tp of assigned) this.#committed.delete(tpKey(tp.topic, tp.partition));
            this.#log("info", "assignment changed", {
              consumer: plan.consumerIndex,
              owned: owned.map((tp) => `${tp.topic}:${tp.partition}`),
              assigned: assigned.length,
              revoked: revoked.length,
            });
          },
        },
      });
      await this.#consumer.start();
      this.#to("RUNNING");
      let lastCommit = Date.now();
      let lastRecord = Date.now();
      while (!this.#stopRequested) {
        const records = await this.#consumer.poll(settings.batchSize, settings.pollTimeoutMs);
        const now = Date.now();
        if (records.length > 0) {
          await this.#processBatch(records);
          lastRecord = now;
        } else if (settings.idleTimeoutMs > 0 && now - lastRecord >= settings.idleTimeoutMs) {
          this.#log("info", `no input for ${settings.idleTimeoutMs} ms: stopping`, { consumer: plan.consumerIndex });
          break;
        }
        if (now - lastCommit >= settings.checkpointIntervalMs) {
          // Not awaited: the next batch runs while the commit is in flight (commits are chained).
          void this.#commit().catch((error) => this.#fail(error));
          lastCommit = now;
        }
        if (this.#error) throw this.#error;
      }
      this.#to("STOPPING");
      await this.#commit();
      await this.#close();
      this.#to("STOPPED");
    } catch (error) {
      this.#error = error instanceof FvError ? error : new FvError("KAFKA_FATAL", (error as Error)?.message ?? String(error), { cause: error });
      this.#log("error", `consumer loop failed: ${this.#error.message}`, { consumer: plan.consumerIndex, code: this.#error.code });
      await this.#close().catch(() => {});
      this.#state = "FAILED";
    }
    return this.#state;
  }

  /** Transforms one batch, emits its outputs and dead letters, then marks its offsets committable. */
  async #processBatch(records: InboundRecord[]): Promise<void> {
    const out: OutboundRecord[] = [];
    let emitted = 0;
    let deadLettered = 0;
    const counters = this.counters;
    for (const record of records) {
      counters.consumed++;
      const routes = this.#routes.get(record.topic);
      if (!routes) continue;
      for (let r = 0; r < routes.length; r++) {
        const route = routes[r]!;
        // Each route gets its own parse: steps may change the row in place.
        const decoded = decodeRow(record.value);
        if ("poison" in decoded) {
          if (this.#poison(record, route, decoded.poison, decoded.detail, out)) deadLettered++;
          continue;
        }
        let row;
        try {
          row = route.stage.process(decoded.row);
        } catch (error) {
          if (recoveryOf(error) !== "poison") throw error;
          const reason = poisonReason(error);
          if (this.#poison(record, route, reason, (error as Error).message, out)) deadLettered++;
          continue;
        }
        if (row === null) {
          counters.dropped++;
          continue;
        }
        out.push({ topic: route.outputTopic, key: record.key, value: JSON.stringify(row), headers: record.headers });
        emitted++;
      }
    }
    await this.#send(out);
    counters.emitted += emitted;
    counters.deadLettered += deadLettered;
    for (const record of records) {
      const k = tpKey(record.topic, record.partition);
      const next = record.offset + 1n;
      const pending = this.#pending.get(k);
      if (!pending || pending.offset < next) this.#pending.set(k, { topic: record.topic, partition: record.partition, offset: next });
    }
  }

  /** Counts a poison row and queues it for the dead-letter topic. True when it was queued. */
  #poison(record: InboundRecord, route: Route, reason: string, detail: string, out: OutboundRecord[]): boolean {
    this.counters.poison++;
    this.counters.poisonByReason[reason] = (this.counters.poisonByReason[reason] ?? 0) + 1;
    if (!route.deadLetterTopic) return false;
    out.push({
      topic: route.deadLetterTopic,
      key: record.key,
      value: record.value,
      headers: [
        ...record.headers,
        ["fv.error.reason", reason],
        ["fv.error.message", detail.slice(0, 1000)],
        ["fv.error.stage", route.stageLabel],
        ["fv.source.topic", record.topic],
        ["fv.source.partition", String(record.partition)],
        ["fv.source.offset", String(record.offset)],
      ],
    });
    return true;
  }

  async #send(records: OutboundRecord[]): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        await this.#producer!.send(records);
        return;
      } catch (error) {
        if (recoveryOf(error) !== "retryable" || attempt >= SEND_RETRIES) throw error;
        this.#log("warn", `send failed, retrying (${attempt}/${SEND_RETRIES}): ${(error as Error).message}`);
        await new Promise((resolve) => setTimeout(resolve, SEND_RETRY_PAUSE_MS));
      }
    }
  }

  /**
   * Commits acknowledged offsets of owned partitions. Serialized: one commit at a time, except
   * that `immediate` sends at once, synchronously: at the start of a rebalance the client is
   * about to send JoinGroup, and a commit queued behind it on the coordinator connection would
   * arrive after the generation changed.
   */
  #commit(immediate = false): Promise<void> {
    const send = async () => {
      const offsets = this.#takeCommittable();
      if (offsets.length === 0) return;
      try {
        await this.#consumer!.commit(offsets);
      } catch (error) {
        this.#commitFailed(offsets, error);
        return;
      }
      for (const o of offsets) this.#committed.set(tpKey(o.topic, o.partition), o.offset);
      this.counters.commits++;
    };
    const run = immediate ? send() : this.#commitChain.then(send);
    this.#commitChain = this.#commitChain.then(() => run).catch(() => {});
    return run;
  }

  /** Takes the pending offsets that are worth committing: owned partitions, moving forward. */
  #takeCommittable(): CommitOffset[] {
    if (!this.#consumer || this.#pending.size === 0) return [];
    const owned = new Set(this.#consumer.owned().map((tp) => tpKey(tp.topic, tp.partition)));
    const offsets: CommitOffset[] = [];
    for (const [k, o] of this.#pending) {
      const committed = this.#committed.get(k);
      if (owned.has(k) && (committed === undefined || o.offset > committed)) offsets.push(o);
    }
    this.#pending.clear();
    return offsets;
  }

  #commitFailed(offsets: CommitOffset[], error: unknown): void {
    const recovery = recoveryOf(error);
    if (recovery === "retryable") {
      // Put the offsets back unless newer ones arrived meanwhile; the next commit retries.
      for (const o of offsets) {
        const k = tpKey(o.topic, o.partition);
        if (!this.#pending.has(k)) this.#pending.set(k, o);
      }
    }
    if (recovery !== "fenced" && recovery !== "retryable") throw error;
    // Fenced (the group moved on): the partitions' new owners restart from the last commit.
    this.#log("warn", `offset commit skipped: ${(error as Error).message}`, { consumer: this.#plan.consumerIndex });
  }

  async #close(): Promise<void> {
    const consumer = this.#consumer;
    const producer = this.#producer;
    this.#consumer = undefined;
    this.#producer = undefined;
    await consumer?.close().catch((error) => this.#log("warn", `closing consumer: ${(error as Error).message}`));
    await producer?.close().catch((error) => this.#log("warn", `closing producer: ${(error as Error).message}`));
  }
}

/** The reason a poison error gives: the expression error's reason, or its code. */
function poisonReason(error: unknown): string {
  // deno-lint-ignore no-explicit-any
  const e = error as any;
  return e?.reason ?? e?.context?.reason ?? e?.code ?? "step_error";
}

