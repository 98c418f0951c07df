import { compileTopology } from "./compile-topology.ts";
import type { StepDef } from "../control/types.ts";
import type { FunctionRegistry, Row } from "../expr/index.ts";
import { recoveryOf } from "../errors.ts";

/** Counters of a row pipeline run without Kafka. */
export interface RowCounters {
  consumed: number;
  emitted: number;
  dropped: number;
  poison: number;
}

export interface RowPipelineOptions {
  functions?: FunctionRegistry;
  /** Called for each poison row with the error; the row is skipped either way. */
  onPoison?: (row: Row, error: Error) => void;
}

/**
 * The same compiled steps the stream runs, over any (async) iterable of rows: try a pipeline on
 * a file of rows before deploying it. Rows are copied, never changed in place.
 *
 * @example
 * const pipeline = rowPipeline([{ op: "filter", expression: "price > 100" }]);
 * for await (const row of pipeline.run([{ price: 150 }, { price: 50 }])) console.log(row);
 * pipeline.counters; // { consumed: 2, emitted: 1, dropped: 1, poison: 0 }
 */
export function rowPipeline(steps: StepDef[], options: RowPipelineOptions = {}) {
  const [stage] = compileTopology({ stages: [{ inputs: ["rows"], output: "out", steps }] }, { functions: options.functions }).stages;
  const counters: RowCounters = { consumed: 0, emitted: 0, dropped: 0, poison: 0 };
  const process = (row: Row): Row | null => {
    counters.consumed++;
    try {
      const out = stage!.process({ ...row });
      if (out === null) counters.dropped++;
      else counters.emitted++;
      return out;
    } catch (error) {
      if (recoveryOf(error) !== "poison") throw error;
      counters.poison++;
      options.onPoison?.(row, error as Error);
      return null;
    }
  };
  return {
    counters,
    process,
    async *run(rows: AsyncIterable<Row> | Iterable<Row>): AsyncGenerator<Row> {
      for await (const row of rows) {
        const out = process(row);
        if (out !== null) yield out;
      }
    },
  };
}
