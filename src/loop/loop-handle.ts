import { deadline } from "../async.ts";
import { loadKafkaClient } from "../kafka/clients.ts";
import type { TopicPartition } from "../kafka/port.ts";
import { emptySnapshot, type MetricsSnapshot } from "../metrics/index.ts";
import { ConsumerLoop, type LoopState } from "./consumer-loop.ts";
import { emptyCounters, type LoopCounters } from "./counters.ts";
import type { Logger } from "../logger.ts";
import type { LoopPlan } from "./plan.ts";
import type { StandbyPartition } from "./standby-tasks.ts";
import type { WorkerMessage, WorkerReport } from "./worker-protocol.ts";
import { answerQuery, type StateAnswer, type StateQuery, type StateRead } from "./state-query.ts";

/** A running consumer loop, in this thread or in a Worker; the stream sees both alike. */
export interface LoopHandle {
  counters(): LoopCounters;
  owned(): TopicPartition[];
  /** Standby copies of other members' task states it keeps. */
  standbys(): StandbyPartition[];
  /** Cumulative metric events of the loop (latencies, rebalances, checkpoints). */
  metrics(): MetricsSnapshot;
  /** What the loop is doing or waiting on (ConsumerLoop.phase; a Worker's as of its last report). */
  phase(): string;
  stop(): void;
  /** Queryable state: what the loop's stateful tasks hold. */
  query(query: StateQuery): Promise<StateAnswer>;
  /** Hears each change a row makes to one key (stage index 0-based); returns the end. */
  watch(stage: number, group: unknown[], listener: (read: StateRead) => void): () => void;
  readonly done: Promise<{ state: LoopState; error?: string }>;
}

let nextWatch = 0;

/** Runs the loop in this thread (one consumer: no Worker needed). */
export async function startInline(plan: LoopPlan, log: Logger): Promise<LoopHandle> {
  const client = (await loadKafkaClient(plan.kafkaClient))(plan.settings.brokers.split(","));
  const loop = new ConsumerLoop(plan, client, log);
  const done = loop.run().then((state) => ({ state, error: loop.error?.message }));
  return {
    counters: () => loop.counters,
    owned: () => loop.owned(),
    standbys: () => loop.standbys(),
    metrics: () => loop.metrics.snapshot(),
    phase: () => loop.phase,
    stop: () => loop.stop(),
    query: (query) => Promise.resolve(loop.queryState(query)),
    watch: (stage, group, listener) => loop.watches.add(nextWatch++, stage, group, listener),
    done,
  };
}

/** How long a Worker may take to end once its loop is done. */
const WORKER_END_MS = 5_000;

/**
 * Terminates a Worker whose loop is done and waits until it has ended (Bun says so with a
 * `close` event; Deno's terminate is immediate): a process that exits while a Worker is still
 * being torn down, its native addons' cleanup under way, can crash (SIGSEGV on exit under Bun).
 */
function ended(worker: Worker): Promise<void> {
  const isBun = "Bun" in globalThis;
  const closed = isBun ? new Promise<void>((resolve) => worker.addEventListener("close", () => resolve(), { once: true })) : Promise.resolve();
  worker.terminate();
  return deadline(closed, WORKER_END_MS, () => undefined).catch(() => {});
}

/** Runs the loop in a Worker, so N consumers use N cores. */
export function startInWorker(plan: LoopPlan, log: Logger): LoopHandle {
  // The same extension as this module: .ts from source (Bun, Deno), .js from dist/ (Node).
  const worker = new Worker(new URL(`./consumer-worker${import.meta.url.slice(-3)}`, import.meta.url).href, { type: "module" });
  let counters = emptyCounters();
  let owned: TopicPartition[] = [];
  let standbys: StandbyPartition[] = [];
  let metrics = emptySnapshot();
  let phase = "starting in its Worker";
  // Queries waiting for the worker's answer, by id; a worker that ends answers the rest with nothing.
  const asked = new Map<number, { query: StateQuery; answer: (answer: StateAnswer) => void }>();
  let nextQuery = 0;
  let finished = false;
  const watchers = new Map<number, (read: StateRead) => void>();
  const done = new Promise<{ state: LoopState; error?: string }>((resolve) => {
    worker.onmessage = (event: MessageEvent<WorkerReport>) => {
      const report = event.data;
      if (report.type === "counters") {
        counters = report.counters;
        owned = report.owned;
        standbys = report.standbys;
        metrics = report.metrics;
        phase = report.phase;
      } else if (report.type === "watched") {
        watchers.get(report.id)?.(report.read);
      } else if (report.type === "answer") {
        asked.get(report.id)?.answer(report.answer);
        asked.delete(report.id);
      } else if (report.type === "log") {
        log(report.level, report.message, { ...report.context, consumer: plan.consumerIndex });
      } else {
        if (report.counters) counters = report.counters;
        if (report.metrics) metrics = report.metrics;
        owned = [];
        standbys = [];
        finished = true;
        for (const { query, answer } of asked.values()) answer(answerQuery(undefined, query));
        asked.clear();
        void ended(worker).then(() => resolve({ state: report.state, error: report.error }));
      }
    };
    worker.onerror = (event: ErrorEvent) => {
      event.preventDefault?.();
      worker.terminate();
      resolve({ state: "FAILED", error: `consumer worker ${plan.consumerIndex} crashed: ${event.message}` });
    };
  });
  // The compiled topology holds closures, which cannot be posted: the worker compiles its own.
  const { compiled: _compiled, ...posted } = plan;
  worker.postMessage({ type: "start", plan: posted } satisfies WorkerMessage);
  return {
    counters: () => counters,
    owned: () => owned,
    standbys: () => standbys,
    metrics: () => metrics,
    phase: () => (finished ? "done" : phase),
    stop: () => worker.postMessage({ type: "stop" } satisfies WorkerMessage),
    query: (query) => {
      if (finished) return Promise.resolve(answerQuery(undefined, query));
      const id = nextQuery++;
      return new Promise<StateAnswer>((answer) => {
        asked.set(id, { query, answer });
        worker.postMessage({ type: "query", id, query } satisfies WorkerMessage);
      });
    },
    watch: (stage, group, listener) => {
      const id = nextWatch++;
      watchers.set(id, listener);
      if (!finished) worker.postMessage({ type: "watch", id, stage, group } satisfies WorkerMessage);
      return () => {
        watchers.delete(id);
        if (!finished) worker.postMessage({ type: "unwatch", id } satisfies WorkerMessage);
      };
    },
    done,
  };
}
