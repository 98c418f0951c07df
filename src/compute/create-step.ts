/**
 * `createComputeStep`: resolves a compute step's ref and starts it, before anything is consumed.
 * Every problem throws FvError INVALID_TOPOLOGY naming the stage, the step, the ref and the fix.
 */
import * as v from "valibot";
import { describeIssues } from "../control/schema-issues.ts";
import { FvError } from "../errors.ts";
import type { Row } from "../expr/index.ts";
import { ContainerStep, containerCommand } from "./container-step.ts";
import { compileManifestSteps, ExpressionStep } from "./expression-step.ts";
import type { ComputeHost } from "./host.ts";
import type { TransformManifest } from "./manifest.ts";
import type { Isolation } from "./plugin-channel.ts";
import type { TransformRegistry } from "./registry.ts";
import type { ComputeResult } from "./results.ts";
import { computeStepSchemas, type ComputeStepDef } from "./step-schemas.ts";
import type { ComputeCounters } from "./counters.ts";
import { checkHttpStep, HttpStep, type HttpStepOptions } from "./http-step.ts";
import { PluginClient, WasmStep } from "./wasm-step.ts";

/**
 * A started compute step. `processBatch` gives one result per input row, in order.
 */
export interface ComputeStep {
  readonly op: "wasm" | "container" | "expression" | "http";
  /** The transform's ref; an http step's url. */
  readonly ref: string;
  /**
   * One result per input row, in order. Never rejects because of a row; rejects only for a fatal
   * problem. `keys`: the message key of each row (an http step orders calls by it).
   */
  processBatch(rows: Row[], keys?: ReadonlyArray<Uint8Array | string | null>): Promise<ComputeResult[]>;
  /** Rows per call; `processBatch` splits larger arrays into batches of this size. */
  readonly batchSize: number;
  /**
   * `processBatch` may be called again before the last call settled (each settles with its own
   * rows' results): the loop hands it rows a batch at a time while it reads the rest.
   */
  readonly overlaps?: boolean;
  /** Calls, timeouts, restarts and poison rows so far. */
  readonly counters: ComputeCounters;
  /** The manifest the ref resolved to (none for an http step). */
  readonly manifest?: TransformManifest;
  /** The stream is stopping: stop waiting for anything that may never come (an http step held by its breaker). */
  interrupt?(): void;
  /** Stops the plugin host or process. Idempotent. */
  close(): Promise<void>;
}

/** Where a step stands: 0-based positions, shown 1-based in messages (like compileTopology). */
export interface ComputeStepLocation {
  stage: number;
  step: number;
}

/**
 * Resolves `def.ref` in the registry, checks the transform and starts it: a WASM plugin is loaded
 * and must export its function; a container process must start. Nothing is consumed before.
 *
 * @example
 * const step = await createComputeStep({ op: "wasm", ref: "enrich-order" }, registry, host, { stage: 0, step: 1 });
 * const [result] = await step.processBatch([{ sku: "A", price: 10, qty: 2 }]);
 * await step.close();
 */
export async function createComputeStep(
  def: { op: string; ref?: string; [field: string]: unknown },
  registry: TransformRegistry | undefined,
  host: ComputeHost | undefined,
  location: ComputeStepLocation,
  http: Omit<HttpStepOptions, "location"> = {},
): Promise<ComputeStep> {
  const op = def.op;
  const at = `stage ${location.stage + 1}, step ${location.step + 1} (op "${op}")`;
  const fail = (field: string, message: string, cause?: unknown): never => {
    throw new FvError("INVALID_TOPOLOGY", `invalid topology: ${at}, field "${field}": ${message}`, {
      cause,
      context: { stage: location.stage + 1, step: location.step + 1, field, op, ref: def.ref },
    });
  };
  const parsed = v.safeParse(computeStepSchemas, def);
  if (!parsed.success) {
    const { field, message } = describeIssues(computeStepSchemas, parsed.issues, op);
    fail(field || "op", message);
  }
  const checked = parsed.output as ComputeStepDef;
  if (checked.op === "http") {
    try {
      checkHttpStep(checked);
    } catch (error) {
      fail((error as { field: string }).field, (error as Error).message);
    }
    return new HttpStep(checked, { ...http, location });
  }
  if (!registry || !host) return fail("op", `${op} steps need a transform registry and a compute host (the fv-streams CLI has them)`);
  const ref = checked.ref;
  let manifest: TransformManifest;
  try {
    manifest = registry.resolve(ref);
  } catch (error) {
    return fail("ref", error instanceof Error ? error.message : String(error), error);
  }
  const named = `transform "${ref}" (${manifest.file})`;
  if (manifest.impl !== op) fail("op", `${named} is impl = "${manifest.impl}": write op = "${manifest.impl}", or pick a ${op} transform`);
  if (manifest.inputs.length > 1) fail("ref", `${named} declares ${manifest.inputs.length} [[inputs]]; a compute step feeds it one stream of rows. Declare one [[inputs]] table`);
  const context = { stage: location.stage + 1, step: location.step + 1, op, ref, transform: `${manifest.id}@${manifest.version}` };

  if (manifest.impl === "expression") {
    try {
      return new ExpressionStep(ref, manifest, compileManifestSteps(manifest));
    } catch (error) {
      return fail("ref", `${named} has bad steps: ${error instanceof Error ? error.message : String(error)}. Fix the steps in its transform.toml`, error);
    }
  }

  if (manifest.impl === "container") {
    let engine: string | undefined;
    if (manifest.image !== undefined) {
      const candidates = manifest.engine ? [manifest.engine] : ["docker", "podman"];
      for (const name of candidates) if (!engine && (await host.findExecutable?.(name))) engine = name;
      if (!engine) {
        fail("ref", `${named} runs image "${manifest.image}", which needs ${candidates.join(" or ")}, and none is on PATH. Install a container engine, or give the transform a local command = [...] for development and edge nodes`);
      }
    }
    const command = containerCommand(manifest, engine);
    const step = new ContainerStep(ref, manifest, command, host, context);
    try {
      await step.start();
    } catch (error) {
      await step.close();
      fail("ref", `${named} could not start \`${command.join(" ")}\`: ${error instanceof Error ? error.message : String(error)}. Check that ${command[0]} is installed and on PATH, and the transform's entry`, error);
    }
    return step;
  }

  // impl = "wasm"
  let wasm: Uint8Array;
  try {
    wasm = await host.readFile(manifest.wasmPath!);
  } catch (error) {
    return fail("ref", `${named}: cannot read ${manifest.wasmPath}: ${error instanceof Error ? error.message : String(error)}. Build the transform (see its build script)`, error);
  }
  const isolation: Isolation = manifest.isolation ?? (host.pluginProcessCommand ? "process" : "worker");
  const client = new PluginClient(
    wasm,
    {
      wasi: manifest.wasi,
      config: { ...manifest.config },
      memoryMaxPages: manifest.memoryMaxPages,
      allowedHosts: [...manifest.allowedHosts],
      allowedPaths: { ...manifest.allowedPaths },
    },
    isolation,
    host,
    context,
  );
  let exports: string[];
  try {
    exports = await client.ready();
  } catch (error) {
    client.close();
    const message = error instanceof Error ? error.message : String(error);
    const hint = /WASI/i.test(message)
      ? "This plugin needs WASI (wasi = true), which the Extism SDK provides on Node and Deno, not on Bun: run the stream on Deno, or build the plugin without WASI"
      : "Check that entry is an Extism plugin and that the options in its transform.toml are right";
    return fail("ref", `${named} could not be loaded: ${message}. ${hint}`, error);
  }
  if (!exports.includes(manifest.function)) {
    client.close();
    fail(
      "ref",
      `${named} does not export function "${manifest.function}" (it exports: ${exports.join(", ") || "nothing"}). Export it from the plugin, or set function = "<name>" in its transform.toml`,
    );
  }
  return new WasmStep(ref, manifest, client, manifest.batchSize);
}
