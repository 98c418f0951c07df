/**
 * A compute step without Kafka: over any (async) iterable of rows, in batches, the way a stage
 * runs it. Mixed with inline steps, see src/topology/compute-pipeline.ts.
 */
import type { Row } from "../expr/index.ts";
import type { ComputeStep } from "./create-step.ts";

export interface ComputeRunOptions {
  /** Rows per processBatch call; default the step's batchSize. */
  batchSize?: number;
  /** Called for each poison row; the row is skipped either way. */
  onPoison?: (row: Row, poison: { reason: string; message: string }) => void;
}

/**
 * Runs one compute step over rows, in batches, yielding the output rows in input order.
 *
 * @example
 * const step = await createComputeStep({ op: "wasm", ref: "enrich-order" }, registry, host, { stage: 0, step: 0 });
 * for await (const row of runCompute(step, readRows("orders.jsonl"))) console.log(row);
 * await step.close();
 */
export async function* runCompute(step: ComputeStep, rows: AsyncIterable<Row> | Iterable<Row>, options: ComputeRunOptions = {}): AsyncGenerator<Row> {
  const size = options.batchSize ?? step.batchSize;
  let batch: Row[] = [];
  const flush = async function* (): AsyncGenerator<Row> {
    const input = batch;
    batch = [];
    const results = await step.processBatch(input);
    for (let i = 0; i < results.length; i++) {
      const result = results[i]!;
      if ("rows" in result) yield* result.rows;
      else options.onPoison?.(input[i]!, result.poison);
    }
  };
  for await (const row of rows) {
    batch.push(row);
    if (batch.length >= size) yield* flush();
  }
  if (batch.length > 0) yield* flush();
}
