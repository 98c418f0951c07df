import type { TopicPartition } from "../kafka/port.ts";
import type { MetricsSnapshot } from "../metrics/index.ts";
import type { LoopState } from "./consumer-loop.ts";
import type { LoopCounters } from "./counters.ts";
import type { LogLevel } from "../logger.ts";
import type { LoopPlan } from "./plan.ts";
import type { StandbyPartition } from "./standby-tasks.ts";
import type { StateAnswer, StateQuery, StateRead } from "./state-query.ts";

/** Main thread → worker. */
export type WorkerMessage =
  | { type: "start"; plan: LoopPlan }
  | { type: "stop" }
  | { type: "query"; id: number; query: StateQuery }
  | { type: "watch"; id: number; stage: number; group: unknown[] }
  | { type: "unwatch"; id: number };

/** Worker → main thread. */
export type WorkerReport =
  | { type: "counters"; counters: LoopCounters; owned: TopicPartition[]; standbys: StandbyPartition[]; metrics: MetricsSnapshot; phase: string }
  | { type: "log"; level: LogLevel; message: string; context?: Record<string, unknown> }
  | { type: "answer"; id: number; answer: StateAnswer }
  | { type: "watched"; id: number; read: StateRead }
  | { type: "done"; state: LoopState; counters?: LoopCounters; metrics?: MetricsSnapshot; error?: string };
