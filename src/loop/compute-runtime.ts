import type { CompiledStage } from "../topology/compile-topology.ts";
import { type ComputeHost, type ComputeStep, createComputeStep, type TransformFs, TransformRegistry } from "../compute/index.ts";
import type { HttpObserver } from "../compute/http-step.ts";
import { FvError } from "../errors.ts";
import { RegoFilter } from "../steps/rego-filter.ts";
import type { Logger } from "../logger.ts";

/**
 * Where compute steps come from. Plain data, so it crosses into Workers: `hostModule` is the URL
 * of a module exporting `createNodeComputeHost` and `nodeTransformFs` (the runtime's file and
 * process access; see runtime/compute/node-host.ts), imported where the loop runs.
 */
export interface ComputeConfig {
  /** FV_TRANSFORMS_DIR: colon-separated roots; unset means no transforms (compute steps fail closed). */
  transformsDir?: string;
  hostModule: string;
  /** The environment `${NAME}` placeholders of http steps are read from (the CLI passes its own). */
  env?: Record<string, string | undefined>;
}

/** What http steps report to, per stage. */
export interface ComputeObservers {
  http?: (stage: CompiledStage) => Partial<HttpObserver>;
}

interface HostModule {
  createNodeComputeHost(options: { logger?: Logger }): ComputeHost;
  nodeTransformFs: TransformFs;
  /** Compiles a Rego policy with OPA to WebAssembly (`policy.wasm` for one entrypoint). Throws OPA's message. */
  compileRego?(policy: string, entrypoint: string): Promise<Uint8Array>;
}

/**
 * Compiles and loads every Rego filter of the stages (the runtime's OPA does the compiling).
 * Throws FvError INVALID_TOPOLOGY naming the stage, the step and OPA's message with its line.
 */
async function loadRegoFilters(stages: readonly CompiledStage[], config: ComputeConfig | undefined): Promise<void> {
  const filters = stages.flatMap((stage) => stage.steps.flatMap((step, index) => (step instanceof RegoFilter ? [{ stage, step, index }] : [])));
  if (filters.length === 0) return;
  const module = config ? ((await import(config.hostModule)) as HostModule) : undefined;
  for (const { stage, step, index } of filters) {
    const at = `invalid topology: stage ${stage.index + 1}, step ${index + 1} (op "filter"), field "policy"`;
    const context = { stage: stage.index + 1, step: index + 1, field: "policy", op: "filter" };
    if (!module?.compileRego) throw new FvError("INVALID_TOPOLOGY", `${at}: Rego filters need a runtime that compiles policies with OPA (the fv-streams CLI does)`, { context });
    let wasm: Uint8Array;
    try {
      wasm = await module.compileRego(step.policy, step.entrypoint);
    } catch (error) {
      throw new FvError("INVALID_TOPOLOGY", `${at}: ${(error as Error).message}`, { cause: error, context });
    }
    await step.load(wasm);
  }
}

/**
 * Loads the transform registry (a bad manifest fails here, even when no step uses it) and, for
 * each stage with a compute step, starts the step (the plugin loads and must export its
 * function; a container must start). Throws FvError naming the stage, step, ref and the fix.
 */
export async function startComputeSteps(stages: readonly CompiledStage[], config: ComputeConfig | undefined, log: Logger, observers: ComputeObservers = {}): Promise<Map<number, ComputeStep>> {
  await loadRegoFilters(stages, config);
  const started = new Map<number, ComputeStep>();
  // http steps call a service with the runtime's fetch: no registry, no compute host.
  for (const stage of stages) {
    if (stage.compute?.op !== "http") continue;
    const http = { env: config?.env ?? {}, observer: observers.http?.(stage) ?? {} };
    started.set(stage.index, await createComputeStep(stage.compute.def, undefined, undefined, { stage: stage.index, step: stage.compute.step }, http));
  }
  const wanted = stages.filter((s) => s.compute && s.compute.op !== "http");
  if (wanted.length === 0 && !config?.transformsDir) return started;
  if (!config) {
    const stage = wanted[0]!;
    throw new FvError("INVALID_TOPOLOGY", `stage ${stage.index + 1}, step ${stage.compute!.step + 1}: compute steps need a runtime that provides a compute host (the fv-streams CLI does)`);
  }
  const module = (await import(config.hostModule)) as HostModule;
  const registry = await TransformRegistry.load(config.transformsDir, module.nodeTransformFs);
  const host = module.createNodeComputeHost({ logger: log });
  try {
    for (const stage of wanted) {
      const compute = stage.compute!;
      started.set(stage.index, await createComputeStep({ op: compute.op, ref: compute.ref }, registry, host, { stage: stage.index, step: compute.step }));
    }
  } catch (error) {
    await closeComputeSteps(started);
    throw error;
  }
  return started;
}

export async function closeComputeSteps(steps: Map<number, ComputeStep>): Promise<void> {
  await Promise.allSettled([...steps.values()].map((s) => s.close()));
  steps.clear();
}
