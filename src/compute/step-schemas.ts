/** The pipeline steps that run a transform from the registry, checked with valibot. */
import * as v from "valibot";
import { httpStepSchema } from "./http-step.ts";

const refSchema = v.pipe(
  v.string('ref names a transform: ref = "enrich-order" or ref = "enrich-order@1.0.0"'),
  v.regex(/^[A-Za-z0-9][A-Za-z0-9._-]*(@[0-9A-Za-z][0-9A-Za-z.+-]*)?$/, 'ref is "id" or "id@version", e.g. ref = "enrich-order@1.0.0"'),
);

/** `{ op = "wasm", ref = "..." }` */
export const wasmStepSchema = v.strictObject({ op: v.literal("wasm"), ref: refSchema });
/** `{ op = "container", ref = "..." }` */
export const containerStepSchema = v.strictObject({ op: v.literal("container"), ref: refSchema });
/** `{ op = "expression", ref = "..." }`: a transform written in the value dialect. */
export const expressionStepSchema = v.strictObject({ op: v.literal("expression"), ref: refSchema });

const anyComputeStep = v.variant("op", [wasmStepSchema, containerStepSchema, expressionStepSchema, httpStepSchema]);

/**
 * The compute step schemas: a schema for any of them (a variant on `op`), which also carries
 * each one by op.
 *
 * @example
 * v.parse(computeStepSchemas, { op: "wasm", ref: "enrich-order" });
 * v.parse(computeStepSchemas.container, { op: "container", ref: "slugify-py" });
 */
export const computeStepSchemas: typeof anyComputeStep & {
  readonly wasm: typeof wasmStepSchema;
  readonly container: typeof containerStepSchema;
  readonly expression: typeof expressionStepSchema;
  readonly http: typeof httpStepSchema;
} = Object.assign(anyComputeStep, { wasm: wasmStepSchema, container: containerStepSchema, expression: expressionStepSchema, http: httpStepSchema });

export type ComputeStepDef = v.InferOutput<typeof anyComputeStep>;

/** The ops of compute steps (`http` calls a service per row: see http-step.ts). */
export const computeOps = ["wasm", "container", "expression", "http"] as const;
