import type { Settings } from "../control/settings.ts";
import type { CompiledTopology } from "../topology/compile-topology.ts";
import type { TopicBinding, Topology } from "../control/types.ts";
import type { ComputeConfig } from "./compute-runtime.ts";

/**
 * Everything one consumer loop needs, as plain data: it is posted to Workers as is (less
 * `compiled`, whose steps are closures: a Worker compiles the topology once for itself).
 */
export interface LoopPlan {
  pipeline: string;
  groupId: string;
  topology: Topology;
  /** Binding of every dataset the topology names. */
  bindings: Record<string, TopicBinding>;
  settings: Settings;
  /** Name of the Kafka client adapter ("platformatic", ...). */
  kafkaClient: string;
  /** 0-based index of this consumer within the process. */
  consumerIndex: number;
  /** Distinguishes this process's client ids from another process's. */
  instanceId: string;
  /** Where compute steps (WASM, container) are resolved and run. */
  compute?: ComputeConfig;
  /** Repartition hops, by stage index (see topology/keying.ts); created before the loops start. */
  hops?: Record<number, HopPlan>;
  /** The topology compiled once per run (by `planStream`); loops in this thread share it. Never posted to a Worker. */
  compiled?: CompiledTopology;
  /** Log every poll, batch and transaction commit at debug level (was FV_DEBUG_LOOP=1). */
  debugLoop?: boolean;
  /**
   * Unsafe, for the kill test only (FV_UNSAFE_COMMIT_AHEAD=1): each exactly-once commit takes the
   * offsets of batches whose records wait for the next transaction (Commits, `unsafeCommitAhead`).
   */
  unsafeCommitAhead?: boolean;
}

/** A stage's repartition hop: its topic and the upstream partitions whose watermarks cross it. */
export interface HopPlan {
  topic: string;
  partitions: number;
  /** Key columns per stage input, for re-keying rows into the hop. */
  keyColumns: string[][];
  /** Every partition of the stage's input topics, as "topic:partition". */
  upstream: string[];
}

export const groupIdOf = (pipeline: string) => `fv-stream-${pipeline}`;

/**
 * A consumer's name in the group, which the assignor orders members by: its group instance id
 * (`<STREAM_INSTANCE_ID>-<consumer index>`) when the process has a stable one, else its client id.
 */
export function memberNameOf(plan: Pick<LoopPlan, "groupId" | "instanceId" | "consumerIndex" | "settings">): string {
  const { instanceId } = plan.settings;
  return instanceId ? `${instanceId}-${plan.consumerIndex}` : clientIdOf(plan);
}

/** The client id of a consumer loop's clients: `<group>-<random id of this process>-<consumer index>`. */
export function clientIdOf(plan: Pick<LoopPlan, "groupId" | "instanceId" | "consumerIndex">): string {
  return `${plan.groupId}-${plan.instanceId}-${plan.consumerIndex}`;
}

/**
 * The transactional id of the group member called `memberName`: `fv-<pipeline>-<instance>-<index>`,
 * stable across restarts when STREAM_INSTANCE_ID is, so a restarted member fences its predecessor.
 * Derived from the name so that another member can fence it (src/loop/departed-owners.ts).
 */
export function transactionalIdOf(pipeline: string, memberName: string, turn = 0): string {
  const dynamic = `${groupIdOf(pipeline)}-`;
  // The second producer of a loop that has two (STREAM_TRANSACTION_PRODUCERS): `.2` after the first's id.
  return `fv-${pipeline}-${memberName.startsWith(dynamic) ? memberName.slice(dynamic.length) : memberName}${turn === 0 ? "" : `.${turn + 1}`}`;
}

/** The compacted topic holding the changelog of every stateful stage of a pipeline. */
export const stateTopicOf = (pipeline: string) => `fv-state-${pipeline}`;
