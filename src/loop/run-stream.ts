import { parseSettings, type Settings } from "../control/settings.ts";
import { planKeying, type StageKeying } from "../topology/keying.ts";
import { compileTopology, type CompiledTopology } from "../topology/compile-topology.ts";
import { type BuildRecord, BuildSignal, type BuildStatus, type ControlPlane, type InternalTopic, type TopicBinding, type Topology } from "../control/types.ts";
import { FvError } from "../errors.ts";
import { withEnvironment } from "../sinks/config.ts";
import { loadKafkaClient, resolveKafkaClient } from "../kafka/clients.ts";
import type { TopicSpec } from "../kafka/port.ts";
import { closeComputeSteps, type ComputeConfig, startComputeSteps } from "./compute-runtime.ts";
import { addCounters, emptyCounters } from "./counters.ts";
import { mergeSnapshots, type MetricsSnapshot } from "../metrics/index.ts";
import { closeStoresOfThisThread } from "../state/local-store.ts";
import { type LoopHandle, startInline, startInWorker } from "./loop-handle.ts";
import { type Logger, silentLogger } from "../logger.ts";
import { type LocalState, localState, stateStages } from "./state-query.ts";
import { MembersDirectory, membersTopicOf } from "./members-directory.ts";
import { groupIdOf, type HopPlan, type LoopPlan, stateTopicOf } from "./plan.ts";

export interface RunStreamOptions {
  /** Engine settings; default: parsed from an empty environment (all defaults). */
  settings?: Settings;
  /** Kafka adapter name (auto, platformatic, confluent); default: the settings' STREAM_KAFKA_CLIENT. */
  kafkaClient?: string;
  log?: Logger;
  /** Aborting it starts the ordered shutdown at once, without waiting for the next heartbeat. */
  signal?: AbortSignal;
  /** Run every consumer in this thread even when there are several (tests, single-file builds). */
  inline?: boolean;
  /** Where compute steps come from (FV_TRANSFORMS_DIR and the runtime's compute host). */
  compute?: ComputeConfig;
  /**
   * Called with a fresh build record every second and at every status change (admin, dashboards),
   * with the metric events of every consumer merged.
   */
  onRecord?: (record: BuildRecord, metrics: MetricsSnapshot) => void;
  /** Called once the loops run, with what the admin server's /state routes read (queryable state). */
  onState?: (state: LocalState) => void;
  /**
   * This process's admin URL: advertised to the pipeline's other processes in `fv-members-<name>`
   * (src/loop/members-directory.ts), so that their /state routes can forward reads here.
   */
  advertise?: string;
  /** Log every poll, batch and transaction commit of the consumer loops at debug level. */
  debugLoop?: boolean;
  /** Unsafe, for the kill test only (see LoopPlan.unsafeCommitAhead). */
  unsafeCommitAhead?: boolean;
}

/** The plan the stream runs: topology validated and compiled (once per run), keying planned, datasets resolved. */
export interface StreamPlan {
  topology: Topology;
  bindings: Record<string, TopicBinding>;
  compiled: CompiledTopology;
  /** How each stateful stage's input is keyed, and which get a repartition hop. */
  keying: StageKeying[];
}

/**
 * Asks the host for the topology and the topic of every dataset it names, and validates the
 * topology, including every compute step's transform (resolved, loaded, then closed again).
 * Throws FvError (INVALID_TOPOLOGY, HOST_UNAVAILABLE) before anything is consumed.
 */
export async function planStream(host: ControlPlane, pipeline: string, options: { compute?: ComputeConfig } = {}): Promise<StreamPlan> {
  const topology = await host.topology(pipeline);
  const compiled = compileTopology(topology);
  await closeComputeSteps(await startComputeSteps(compiled.stages, options.compute, silentLogger));
  const datasets = new Set<string>();
  for (const stage of compiled.stages) {
    for (const input of stage.def.inputs) datasets.add(input);
    datasets.add(stage.def.output);
  }
  const bindings: Record<string, TopicBinding> = {};
  for (const dataset of datasets) bindings[dataset] = await host.resolveTopic(dataset);
  checkSinks(compiled, bindings, options.compute?.env ?? {});
  return { topology, bindings, compiled, keying: planKeying(compiled, pipeline) };
}

/**
 * A sink (postgres, http) is where rows leave: only a stage's output, never read back, and its
 * `${VAR}`s must be set. Checked before anything runs.
 */
function checkSinks(compiled: CompiledTopology, bindings: Record<string, TopicBinding>, env: Record<string, string | undefined>): void {
  for (const stage of compiled.stages) {
    for (const input of stage.def.inputs) {
      const binding = bindings[input]!;
      if (binding.sink === "kafka") continue;
      throw new FvError("INVALID_TOPOLOGY", `stage ${stage.index + 1}: input dataset "${input}" is a ${binding.sink} sink, which nothing can read back. Read from a Kafka dataset, or write the rows to a topic as well from the stage before`, {
        context: { stage: stage.index + 1, field: "inputs" },
      });
    }
    const output = bindings[stage.def.output]!;
    if (output.sink === "kafka") continue;
    if (!output.sinkConfig) throw new FvError("INVALID_SETTINGS", `dataset "${stage.def.output}": sink "${output.sink}" needs its fields (docs/sinks.md)`, { context: { field: "sink" } });
    try {
      withEnvironment(output.sinkConfig, stage.def.output, env);
    } catch (error) {
      throw new FvError("INVALID_SETTINGS", (error as Error).message, { context: { field: "sink" } });
    }
  }
}

/**
 * Runs one stream pipeline until the host says Stop, the signal aborts, the input stays idle
 * (STREAM_IDLE_TIMEOUT_MS), or it fails. Resolves with the final build record (STOPPED or FAILED).
 *
 * @example
 * const final = await runStream(host, "demo", "build-1", { id: "build-1", pipeline: "demo", kind: "stream", status: "STARTING" });
 */
export async function runStream(
  host: ControlPlane,
  pipeline: string,
  buildId: string,
  record: BuildRecord,
  options: RunStreamOptions = {},
): Promise<BuildRecord> {
  const log = options.log ?? silentLogger;
  const startedAt = new Date();
  let current: BuildRecord = { ...record, id: buildId, pipeline, kind: "stream", startedAt: startedAt.toISOString() };
  let handles: LoopHandle[] = [];
  let guarantee = "at-least-once";
  /** The stage graph, for status pages: `{ index, inputs, output, steps: [op, ...] }`. */
  let stages: Array<{ index: number; inputs: string[]; output: string; steps: string[] }> | undefined;
  let lastRate = { at: Date.now(), consumed: 0, perSecond: 0 };
  /** The adapter in use, once `auto` is resolved (the build record names it). */
  let kafkaClient = options.kafkaClient ?? options.settings?.kafkaClient ?? "auto";

  const snapshot = (status: BuildStatus, error?: string): BuildRecord => {
    const counters = emptyCounters();
    for (const h of handles) addCounters(counters, h.counters());
    const now = Date.now();
    if (now - lastRate.at >= 500) {
      lastRate = { at: now, consumed: counters.consumed, perSecond: Math.round(((counters.consumed - lastRate.consumed) * 1000) / (now - lastRate.at)) };
    }
    current = {
      ...current,
      status,
      ...(stages ? { stages } : {}),
      updatedAt: new Date(now).toISOString(),
      ...(error ? { error } : {}),
      metrics: {
        ...counters,
        consumers: handles.length,
        guarantee,
        kafkaClient,
        partitions: handles.flatMap((h) => h.owned()).sort((a, b) => a.topic.localeCompare(b.topic) || a.partition - b.partition),
        standbyPartitions: handles.flatMap((h) => h.standbys()),
        recordsPerSecond: lastRate.perSecond,
        restoreRecordsPerSecond: counters.restoreMs > 0 ? Math.round((counters.restoredRecords * 1000) / counters.restoreMs) : 0,
      },
    };
    return current;
  };
  const put = async (status: BuildStatus, error?: string) => {
    const record = snapshot(status, error);
    options.onRecord?.(record, mergeSnapshots(...handles.map((h) => h.metrics())));
    try {
      await host.putRecord(buildId, record);
    } catch (e) {
      log("warn", `could not send the build record: ${(e as Error).message}`);
    }
  };

  await put("STARTING");
  let settings: Settings;
  let plan: StreamPlan;
  let hops: Record<number, HopPlan>;
  try {
    settings = options.settings ?? parseSettings({});
    const resolved = await resolveKafkaClient(options.kafkaClient ?? settings.kafkaClient);
    kafkaClient = resolved.name;
    log("info", `kafka client: ${resolved.name} (${resolved.detail})`, { pipeline, kafkaClient: resolved.name });
    guarantee = settings.exactlyOnce ? "exactly-once" : "at-least-once";
    plan = await planStream(host, pipeline, { compute: options.compute });
    stages = plan.topology.stages.map((s, index) => ({ index, inputs: s.inputs, output: s.output, steps: s.steps.map((step) => step.op) }));
    const prepared = await prepareTopics(plan, settings, kafkaClient, pipeline);
    hops = prepared.hops;
    current = { ...current, internalTopics: prepared.internalTopics };
    for (const keying of plan.keying) log("info", `stage ${keying.stage + 1}: ${keying.reason}`, { pipeline });
  } catch (error) {
    const message = (error as Error)?.message ?? String(error);
    log("error", message, { pipeline });
    await put("FAILED", message);
    return current;
  }

  const instanceId = crypto.randomUUID().slice(0, 8);
  const plans: LoopPlan[] = Array.from({ length: settings.consumers }, (_, consumerIndex) => ({
    pipeline,
    groupId: groupIdOf(pipeline),
    topology: plan.topology,
    bindings: plan.bindings,
    settings,
    kafkaClient,
    consumerIndex,
    instanceId,
    compute: options.compute,
    hops,
    compiled: plan.compiled,
    ...(options.debugLoop ? { debugLoop: true } : {}),
    ...(options.unsafeCommitAhead ? { unsafeCommitAhead: true } : {}),
  }));
  const useWorkers = settings.consumers > 1 && !options.inline && typeof Worker !== "undefined";
  handles = useWorkers ? plans.map((p) => startInWorker(p, log)) : await Promise.all(plans.map((p) => startInline(p, log)));
  log("info", `running ${handles.length} consumer(s)${useWorkers ? " in workers" : ""}`, { pipeline, group: groupIdOf(pipeline) });
  const directory = options.advertise ? await startDirectory(kafkaClient, settings, pipeline, settings.instanceId ?? instanceId, options.advertise, log) : undefined;
  options.onState?.(localState(stateStages(plan.compiled), () => handles, () => directory?.peers() ?? Promise.resolve([]), settings.instanceId ?? instanceId));
  await put("RUNNING");

  let stopping = false;
  // What the stream itself waits on once its loops are done (a slow stop names it).
  let streamPhase = "waiting for its consumer loops";
  let stopReport: ReturnType<typeof setInterval> | undefined;
  const stopAll = (why: string) => {
    if (stopping) return;
    stopping = true;
    log("info", `stopping: ${why}`, { pipeline });
    for (const h of handles) h.stop();
    // A stop that takes long says, every STOP_REPORT_MS, what each loop still waits on.
    const since = Date.now();
    stopReport = setInterval(() => {
      const going = handles.flatMap((h, i) => (h.phase() === "done" ? [] : [`consumer ${i + 1} of ${handles.length}: ${h.phase()}`]));
      const what = going.length > 0 ? going.join("; ") : `the stream: ${streamPhase}`;
      log("warn", `still stopping after ${Math.round((Date.now() - since) / 1000)} s: ${what}`, { pipeline });
    }, STOP_REPORT_MS);
    stopReport.unref?.();
  };
  const onAbort = () => stopAll("signal");
  options.signal?.addEventListener("abort", onAbort, { once: true });
  if (options.signal?.aborted) stopAll("signal");
  // One failed loop fails the build: the others stop in order at once (not when they next idle).
  // (A loop whose run rejected is reported by the Promise.all below.)
  handles.forEach((h, i) => void h.done.then((r) => r.state === "FAILED" && stopAll(`consumer ${i + 1} of ${handles.length} failed: ${r.error ?? "no error given"}`), () => {}));

  const heartbeat = setInterval(async () => {
    const signal = await host.heartbeat(buildId).catch(() => BuildSignal.ContinueUnreachable);
    if (signal === BuildSignal.Stop) stopAll("the host said Stop");
  }, settings.heartbeatIntervalMs);
  const records = setInterval(() => void put("RUNNING"), settings.recordIntervalMs);
  const live = options.onRecord ? setInterval(() => options.onRecord!(snapshot("RUNNING"), mergeSnapshots(...handles.map((h) => h.metrics()))), 1000) : undefined;

  const results = await Promise.all(handles.map((h) => h.done));
  // A signal after this point has nothing left to stop.
  options.signal?.removeEventListener("abort", onAbort);
  streamPhase = "leaving the members directory";
  await directory?.stop();
  // Loops in this thread may leave a store closing (a restore cut short): the process exits next.
  streamPhase = "closing the state stores of this thread";
  // Bounded (STORES_CLOSE_MS): a store whose close a session gave up on is not waited for without end.
  await closeStoresOfThisThread().catch((error) => log("warn", `the local state stores did not close: going on without them (${(error as Error).message})`, { pipeline }));
  streamPhase = "writing the final build record";
  clearInterval(heartbeat);
  clearInterval(records);
  clearInterval(live);
  const failed = results.filter((r) => r.state === "FAILED");
  try {
    if (failed.length > 0) await put("FAILED", failed.map((r) => r.error ?? "consumer failed").join("; "));
    else await put("STOPPED");
  } finally {
    clearInterval(stopReport);
  }
  return current;
}

/** A stop still under way after this long logs what it waits on, and again every as long (see stopAll). */
export const STOP_REPORT_MS = 15_000;

/** Advertises this process's admin URL to the pipeline's others; a failure only costs forwarding here. */
async function startDirectory(kafkaClient: string, settings: Settings, pipeline: string, instance: string, admin: string, log: Logger): Promise<MembersDirectory | undefined> {
  const client = (await loadKafkaClient(kafkaClient))(settings.brokers.split(","));
  const directory = new MembersDirectory(client, pipeline, { instance, admin }, log);
  try {
    await directory.start();
    return directory;
  } catch (error) {
    log("warn", `cannot advertise the admin URL in ${membersTopicOf(pipeline)}: ${(error as Error).message}; reads of state another process holds are not forwarded here`);
    await directory.stop();
    return undefined;
  }
}

/**
 * One partition's changelog of one checkpoint is written as one batch (atomic at-least-once
 * state); the state topic accepts batches up to this size.
 */
const STATE_BATCH_MAX_BYTES = 64 * 1024 * 1024;

/** An adapter's error that says no broker answered (context `unreachable`), worded for the user who set the brokers. */
function noBrokerAnswered(error: unknown, brokers: string): unknown {
  if (!(error instanceof FvError) || typeof error.context.unreachable !== "string") return error;
  return new FvError(
    error.code,
    `no broker answered at ${brokers} (${error.context.unreachable}). Check that Kafka is running and listens on that address (scripts/kafka.sh status for the local one), and that STREAM_BROKERS (or the pipeline's brokers) names it. ${error.message}`,
    { cause: error, context: { ...error.context, brokers } },
  );
}

/**
 * Checks inputs exist, then creates missing outputs and dead-letter topics with the input's
 * partition count, and the engine's internal topics: repartition topics and the state topic.
 */
async function prepareTopics(
  plan: StreamPlan,
  settings: Settings,
  kafkaClient: string,
  pipeline: string,
): Promise<{ hops: Record<number, HopPlan>; internalTopics: InternalTopic[] }> {
  const client = (await loadKafkaClient(kafkaClient))(settings.brokers.split(","));
  const admin = client.admin({ clientId: `fv-admin-${pipeline}` });
  try {
    const { compiled } = plan;
    const producedBy = new Set(compiled.stages.map((s) => s.def.output));
    const inputs = [...new Set(compiled.stages.flatMap((s) => s.def.inputs))];
    // The first request to the brokers: when none answers, say so and what to check.
    const counts = await admin.partitionCounts(inputs.map((d) => plan.bindings[d]!.topic)).catch((error) => {
      throw noBrokerAnswered(error, settings.brokers);
    });
    const partitionsOf = (dataset: string): number | undefined => counts.get(plan.bindings[dataset]!.topic);
    const specs: TopicSpec[] = [];
    for (const stage of compiled.stages) {
      const first = stage.def.inputs[0]!;
      let partitions = partitionsOf(first);
      for (const input of stage.def.inputs) {
        const binding = plan.bindings[input]!;
        const count = partitionsOf(input);
        if (count === undefined && !producedBy.has(input)) {
          throw new FvError(
            "INVALID_TOPOLOGY",
            `stage ${stage.index + 1}: input dataset "${input}" maps to topic "${binding.topic}", which does not exist on ${settings.brokers}. Create it, or fix the dataset's topic.`,
            { context: { stage: stage.index + 1, field: "inputs", topic: binding.topic } },
          );
        }
        if (binding.policy.deadLetter) specs.push({ topic: binding.policy.deadLetter, partitions: count ?? partitions ?? 1 });
      }
      partitions ??= specs.find((s) => s.topic === plan.bindings[first]!.topic)?.partitions ?? 1;
      // A sink (postgres, http) is not a topic.
      if (plan.bindings[stage.def.output]!.sink === "kafka") specs.push({ topic: plan.bindings[stage.def.output]!.topic, partitions });
    }
    // Stateful stages: a join's inputs must be co-partitioned, unless a repartition hop does it;
    // the compacted state topic has as many partitions as the widest stateful input (changelog
    // of input partition p → partition p), the hop's partitions counted as its input.
    let statePartitions = 0;
    const keyings = new Map(plan.keying.map((k) => [k.stage, k]));
    const hops: Record<number, HopPlan> = {};
    const internalTopics: InternalTopic[] = [];
    for (const stage of compiled.stages.filter((s) => s.operator)) {
      const counts = stage.def.inputs.map((d) => partitionsOf(d) ?? specs.find((s) => s.topic === plan.bindings[d]!.topic)?.partitions ?? 1);
      const hop = keyings.get(stage.index)?.hop;
      const table = stage.operator!.compiled.tableInput;
      if (hop) {
        // A tableJoin's table is not re-keyed: the repartition topic takes its partition count.
        const partitions = table !== undefined ? counts[table]! : settings.repartitionPartitions || Math.max(...counts);
        if (table !== undefined && settings.repartitionPartitions && settings.repartitionPartitions !== partitions) {
          throw new FvError("INVALID_TOPOLOGY", `stage ${stage.index + 1}: STREAM_REPARTITION_PARTITIONS=${settings.repartitionPartitions}, but the tableJoin's table ${plan.bindings[stage.def.inputs[table]!]!.topic} has ${partitions} partitions, and the stream is re-keyed to the table's partitions: unset it`, { context: { stage: stage.index + 1, field: "inputs" } });
        }
        const upstream = stage.def.inputs.flatMap((d, i) => (i === table ? [] : Array.from({ length: counts[i]! }, (_, p) => `${plan.bindings[d]!.topic}:${p}`)));
        hops[stage.index] = { topic: hop.topic, partitions, keyColumns: hop.keyColumns.map((c) => [...c]), upstream: [...new Set(upstream)] };
        // Deleted by time, like Kafka Streams' repartition topics; a week covers a long stop.
        specs.push({ topic: hop.topic, partitions, configs: { "cleanup.policy": "delete", "retention.ms": String(7 * 24 * 3600 * 1000) } });
        internalTopics.push({ topic: hop.topic, partitions, purpose: "repartition", stage: stage.index + 1, keyedBy: [...hop.keyColumns.find((c) => c.length > 0)!] });
        statePartitions = Math.max(statePartitions, partitions);
        continue;
      }
      // A global table is read whole by every member: no co-partitioning.
      if (new Set(counts).size > 1 && !stage.operator!.compiled.global) {
        throw new FvError(
          "INVALID_TOPOLOGY",
          `stage ${stage.index + 1}: the inputs of ${stage.operator!.op} must be co-partitioned, but ${stage.def.inputs.map((d, i) => `${plan.bindings[d]!.topic} has ${counts[i]}`).join(" and ")} partitions. Give them the same partition count and key.`,
          { context: { stage: stage.index + 1, field: "inputs" } },
        );
      }
      statePartitions = Math.max(statePartitions, ...counts.filter((_, i) => !(stage.operator!.compiled.global && i === table)));
    }
    if (statePartitions > 0) {
      specs.push({ topic: stateTopicOf(pipeline), partitions: statePartitions, configs: { "cleanup.policy": "compact", "max.message.bytes": String(STATE_BATCH_MAX_BYTES) } });
      internalTopics.unshift({ topic: stateTopicOf(pipeline), partitions: statePartitions, purpose: "state" });
    }
    // Stages are in order, so an intermediate topic is created before a later stage reads it.
    await admin.createTopics(specs);
    // An existing state topic keeps its partition count: report what it has.
    const existing = await admin.partitionCounts(internalTopics.map((t) => t.topic));
    for (const t of internalTopics) t.partitions = existing.get(t.topic) ?? t.partitions;
    for (const hop of Object.values(hops)) hop.partitions = existing.get(hop.topic) ?? hop.partitions;
    return { hops, internalTopics };
  } finally {
    await admin.close();
  }
}
