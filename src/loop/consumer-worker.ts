/**
 * A Worker that runs one consumer loop. The main thread posts `start` with the plan, then
 * `stop`; the worker posts its counters on a cadence and `done` with the final state.
 */
import { loadKafkaClient } from "../kafka/clients.ts";
import { ConsumerLoop } from "./consumer-loop.ts";
import { closeStoresOfThisThread } from "../state/local-store.ts";
import { answerQuery, StateWatches } from "./state-query.ts";
import type { Logger } from "../logger.ts";
import type { LoopPlan } from "./plan.ts";
import type { WorkerMessage, WorkerReport } from "./worker-protocol.ts";

/** How often counters go to the main thread: often enough for a live build record. */
const REPORT_INTERVAL_MS = 250;

// deno-lint-ignore no-explicit-any
const scope = globalThis as any;
let loop: ConsumerLoop | undefined;
// A stop may come before the loop exists (while the Kafka client loads): the loop takes it at once.
let stopRequested = false;
// Watches may start before the loop does: the loop takes these.
const watches = new StateWatches();
const unwatch = new Map<number, () => void>();

const post = (report: WorkerReport) => scope.postMessage(report);
const log: Logger = (level, message, context) => post({ type: "log", level, message, context });

scope.onmessage = async (event: MessageEvent<WorkerMessage>) => {
  const message = event.data;
  if (message.type === "stop") {
    stopRequested = true;
    loop?.stop();
    return;
  }
  if (message.type === "watch") {
    unwatch.set(message.id, watches.add(message.id, message.stage, message.group, (read) => post({ type: "watched", id: message.id, read })));
    return;
  }
  if (message.type === "unwatch") {
    unwatch.get(message.id)?.();
    unwatch.delete(message.id);
    return;
  }
  if (message.type === "query") {
    const query = message.query;
    post({ type: "answer", id: message.id, answer: loop ? loop.queryState(query) : answerQuery(undefined, query) });
    return;
  }
  const plan: LoopPlan = message.plan;
  try {
    const client = (await loadKafkaClient(plan.kafkaClient))(plan.settings.brokers.split(","));
    loop = new ConsumerLoop(plan, client, log);
    loop.watches = watches;
    if (stopRequested) loop.stop();
    const report = (phase: string) => post({ type: "counters", counters: loop!.counters, owned: loop!.owned(), standbys: loop!.standbys(), metrics: loop!.metrics.snapshot(), phase });
    const timer = setInterval(() => report(loop!.phase), REPORT_INTERVAL_MS);
    const state = await loop.run();
    clearInterval(timer);
    // A restore cut short by the stop may still hold a store open: the thread ends next (bounded).
    report("closing the state stores of its thread");
    await closeStoresOfThisThread().catch((error) => log("warn", `the local state stores did not close: going on without them (${(error as Error).message})`));
    post({ type: "done", state, counters: loop.counters, metrics: loop.metrics.snapshot(), error: loop.error?.message });
  } catch (error) {
    await closeStoresOfThisThread().catch(() => 0);
    post({ type: "done", state: "FAILED", counters: loop?.counters, error: (error as Error)?.message ?? String(error) });
  }
};
