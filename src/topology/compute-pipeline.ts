/**
 * Inline and compute steps without Kafka: over any (async) iterable of rows, the way a stage
 * runs them.
 */
import { type ComputeStep, computeOps, type ComputeHost, createComputeStep, runCompute, type TransformRegistry } from "../compute/index.ts";
import type { StepDef } from "../control/types.ts";
import { recoveryOf } from "../errors.ts";
import type { FunctionRegistry, Row } from "../expr/index.ts";
import { rowPipeline } from "./row-pipeline.ts";

/** Counters of a compute pipeline run. */
export interface ComputePipelineCounters {
  consumed: number;
  emitted: number;
  poison: number;
}

/**
 * Inline and compute steps in order, over any (async) iterable of rows: try a pipeline with
 * its WASM or container transforms on a file of rows, without Kafka. Close it when done.
 *
 * @example
 * const pipeline = await computePipeline([{ op: "wasm", ref: "enrich-order" }, { op: "filter", expression: "tier == 'large'" }], { registry, host });
 * for await (const row of pipeline.run(rows)) console.log(row);
 * await pipeline.close();
 */
export async function computePipeline(
  steps: StepDef[],
  options: { registry: TransformRegistry; host: ComputeHost; functions?: FunctionRegistry; onPoison?: (row: Row, error: { reason: string; message: string }) => void },
) {
  const counters: ComputePipelineCounters = { consumed: 0, emitted: 0, poison: 0 };
  const onPoison = (row: Row, poison: { reason: string; message: string }) => {
    counters.poison++;
    options.onPoison?.(row, poison);
  };
  type Stage = (rows: AsyncIterable<Row>) => AsyncGenerator<Row>;
  const stages: Stage[] = [];
  const started: ComputeStep[] = [];
  try {
    for (let i = 0; i < steps.length; i++) {
      const def = steps[i]!;
      if ((computeOps as readonly string[]).includes(def.op)) {
        const step = await createComputeStep(def as { op: string; ref: string }, options.registry, options.host, { stage: 0, step: i });
        started.push(step);
        stages.push((rows) => runCompute(step, rows, { onPoison }));
      } else {
        const inline = rowPipeline([def], {
          functions: options.functions,
          onPoison: (row, error) => onPoison(row, { reason: poisonReason(error), message: error.message }),
        });
        stages.push(async function* (rows) {
          for await (const row of rows) {
            const out = inline.process(row);
            if (out !== null) yield out;
          }
        });
      }
    }
  } catch (error) {
    await Promise.all(started.map((s) => s.close()));
    throw error;
  }
  return {
    counters,
    steps: started as readonly ComputeStep[],
    run(rows: AsyncIterable<Row> | Iterable<Row>): AsyncGenerator<Row> {
      const source = async function* (): AsyncGenerator<Row> {
        for await (const row of rows) {
          counters.consumed++;
          yield row;
        }
      };
      let current: AsyncGenerator<Row> = source();
      for (const stage of stages) current = stage(current);
      const last = current;
      return (async function* () {
        for await (const row of last) {
          counters.emitted++;
          yield row;
        }
      })();
    },
    async close(): Promise<void> {
      await Promise.all(started.map((s) => s.close()));
    },
  };
}

function poisonReason(error: Error): string {
  const e = error as Error & { reason?: string; context?: { reason?: string }; code?: string };
  if (recoveryOf(error) !== "poison") return "step_error";
  return e.reason ?? e.context?.reason ?? e.code ?? "step_error";
}
