/**
 * Compute steps: WASM (Extism) and container transforms from a transform registry, plus
 * transforms written in the value dialect. See functions/README.md for the manifest, the batch
 * ABI and the container protocol.
 *
 * @example
 * import { TransformRegistry, createComputeStep } from "./compute/index.ts";
 * import { createNodeComputeHost, nodeTransformFs } from "../runtime/compute/node-host.ts";
 * const registry = await TransformRegistry.load(process.env.FV_TRANSFORMS_DIR, nodeTransformFs);
 * const step = await createComputeStep({ op: "wasm", ref: "enrich-order" }, registry, createNodeComputeHost(), { stage: 0, step: 0 });
 * const results = await step.processBatch([{ sku: "AB-1", customer: "Zoë", price: 101.5, qty: 10 }]);
 * await step.close();
 */
export type { ComputeResult } from "./results.ts";
export { decodeResults, PoisonReasons } from "./results.ts";
export { type ComputeStep, type ComputeStepLocation, createComputeStep } from "./create-step.ts";
export type { ChildProcessLike, ComputeHost, ProcessExit, SpawnOptions, TransformFs, WorkerLike } from "./host.ts";
export { type ColumnDef, type ColumnType, columnTypes, rowCaster } from "./columns.ts";
export { manifestDefaults, type TransformManifest } from "./manifest.ts";
export { compareVersions, MANIFEST_FILE, parseRef, TRANSFORMS_DIR_ENV, TransformRegistry } from "./registry.ts";
export { computeOps, computeStepSchemas, type ComputeStepDef, containerStepSchema, expressionStepSchema, wasmStepSchema } from "./step-schemas.ts";
export type { ComputeCounters } from "./counters.ts";
export type { Isolation } from "./plugin-channel.ts";
export { containerCommand } from "./container-step.ts";
export { type ComputeRunOptions, runCompute } from "./run-compute.ts";
