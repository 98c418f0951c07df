/**
 * The `expression` step: a transform written in the value dialect, as inline steps listed in its
 * manifest (`steps = [...]`, the same tables a pipeline's steps use). Runs on the stream's thread.
 */
import * as v from "valibot";
import { FvError, recoveryOf } from "../errors.ts";
import type { Row } from "../expr/index.ts";
import { type InlineStep, inlineSteps } from "../steps/index.ts";
import { rowCaster } from "./columns.ts";
import type { TransformManifest } from "./manifest.ts";
import { type ComputeResult, poison } from "./results.ts";
import { type ComputeCounters, newCounters } from "./counters.ts";

/** Compiles a manifest's steps; throws a message naming the step of the manifest. */
export function compileManifestSteps(manifest: TransformManifest): InlineStep[] {
  return (manifest.steps ?? []).map((raw, i) => {
    const kind = inlineSteps[raw.op];
    if (!kind) throw new Error(`steps[${i}]: op "${raw.op}" is not an inline step (known: ${Object.keys(inlineSteps).join(", ")})`);
    const parsed = v.safeParse(kind.schema, raw);
    if (!parsed.success) {
      const issue = parsed.issues[0]!;
      throw new Error(`steps[${i}] (op "${raw.op}"), field "${v.getDotPath(issue) ?? ""}": ${issue.message}`);
    }
    try {
      return kind.compile(parsed.output);
    } catch (error) {
      throw new Error(`steps[${i}] (op "${raw.op}"): ${error instanceof Error ? error.message : String(error)}`);
    }
  });
}

export class ExpressionStep {
  readonly op = "expression" as const;
  readonly ref: string;
  readonly batchSize: number;
  readonly manifest: TransformManifest;
  readonly counters: ComputeCounters = newCounters();
  readonly #steps: InlineStep[];
  readonly #castIn: ((row: Row) => Row) | null;
  readonly #castOut: ((row: Row) => Row) | null;

  constructor(ref: string, manifest: TransformManifest, steps: InlineStep[]) {
    this.ref = ref;
    this.manifest = manifest;
    this.batchSize = manifest.batchSize;
    this.#steps = steps;
    this.#castIn = rowCaster(manifest.inputs[0]?.columns);
    this.#castOut = rowCaster(manifest.outputColumns);
  }

  async processBatch(rows: Row[]): Promise<ComputeResult[]> {
    return rows.map((input) => {
      let row: Row | null = this.#castIn ? this.#castIn(input) : { ...input };
      try {
        for (let i = 0; i < this.#steps.length && row !== null; i++) row = this.#steps[i]!.apply(row);
      } catch (error) {
        if (recoveryOf(error) !== "poison") throw error;
        this.counters.poison++;
        const e = error as FvError & { reason?: string };
        return poison(e.reason ?? (e.context?.reason as string | undefined) ?? "expression_error", e.message);
      }
      if (row === null) return { rows: [] };
      return { rows: [this.#castOut ? this.#castOut(row) : row] };
    });
  }

  async close(): Promise<void> {}
}
