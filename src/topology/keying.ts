/**
 * How each stage's input is keyed, and where a stateful step needs a repartition hop.
 *
 * A stateful operator keeps one instance per input partition, so it is right only when every row
 * of one group (or join key) lands in one partition. Kafka places a record by its message key;
 * the engine cannot see what a source topic's key means, so a source dataset counts as keyed by
 * nothing it can name. A stateful stage keys what it emits by its group (or join) key, and that
 * keying survives the inline steps after it unless one of them drops, renames or overwrites a
 * key column. A stateful step whose inputs are not keyed by its own key columns gets a hop: the
 * rows go, re-keyed, through the internal topic `fv-repartition-<name>-<stage>` (stage counted
 * from 1, like every message), and the operator runs on that topic's partitions.
 */
import { groupKeyText } from "../ops/group-key.ts";
import type { CompiledStage, CompiledTopology } from "./compile-topology.ts";

/** The columns a dataset's message key is made of, or null when unknown (a source topic's key). */
export type Keying = readonly string[] | null;

export interface StageKeying {
  stage: number;
  /** The repartition topic, when the stage gets a hop. */
  hop?: { topic: string; keyColumns: ReadonlyArray<readonly string[]> };
  /** Why the stage gets a hop or not, in words for `validate` and the logs. */
  reason: string;
}

export const repartitionTopicOf = (pipeline: string, stageIndex: number) => `fv-repartition-${pipeline}-${stageIndex + 1}`;

const sameColumns = (a: readonly string[], b: readonly string[]) => a.length === b.length && a.every((c, i) => c === b[i]);
const list = (columns: readonly string[]) => `[${columns.join(", ")}]`;

/**
 * Decides the hops of a compiled topology. Only stages with a stateful step are listed.
 *
 * @example
 * planKeying(compileTopology({ stages: [{ inputs: ["trades"], output: "counts", steps: [{ op: "windowedAggregate", ... groupBy: ["sym"] }] }] }), "demo")
 * // → [{ stage: 0, hop: { topic: "fv-repartition-demo-1", ... }, reason: "input \"trades\" is keyed by its message key, not by [sym]" }]
 */
export function planKeying(topology: CompiledTopology, pipeline: string): StageKeying[] {
  const keyingOf = new Map<string, { keying: Keying; from?: number }>();
  const plans: StageKeying[] = [];
  for (const stage of topology.stages) {
    const operator = stage.operator;
    // The steps before the operator may change a key column too.
    const before = operator ? stage.def.steps.slice(0, operator.step) : [];
    const inputs = stage.def.inputs.map((dataset) => {
      const known = keyingOf.get(dataset) ?? { keying: null };
      return { dataset, from: known.from, keying: known.keying && survivingKeying(known.keying, before) };
    });
    if (!operator) {
      // Inline and compute stages pass the message key through: the keying holds while the
      // steps leave the key columns alone (a compute step may change any column).
      const input = inputs.length === 1 ? inputs[0]!.keying : null;
      keyingOf.set(stage.def.output, { keying: input && !stage.compute ? survivingKeying(input, stage.def.steps) : null, from: stage.index });
      continue;
    }
    const wanted = operator.compiled.inputKeyColumns;
    const describe = (i: number) => {
      const input = inputs[i]!;
      const whose = input.from === undefined ? `input "${input.dataset}"` : `input "${input.dataset}" (output of stage ${input.from + 1})`;
      return input.keying === null
        ? `${whose} is keyed by ${input.from === undefined ? "its message key" : "columns the engine cannot name"}, not by ${list(wanted[i]!)}`
        : `${whose} is keyed by ${list(input.keying)}, not by ${list(wanted[i]!)}`;
    };
    // An input wanted keyed by nothing (a tableJoin's table, keyed by its message key) is never re-keyed.
    const mismatched = inputs.map((input, i) => (wanted[i]!.length === 0 || (input.keying !== null && sameColumns(input.keying, wanted[i]!)) ? -1 : i)).filter((i) => i >= 0);
    const step = `step ${operator.step + 1} (${operator.op})`;
    let plan: StageKeying;
    if (operator.repartition === false) {
      plan = { stage: stage.index, reason: `no repartition: ${step} sets repartition = false (the inputs must already be keyed by ${list(wanted[0]!)})` };
    } else if (operator.repartition === true || mismatched.length > 0) {
      const why = operator.repartition === true ? `${step} sets repartition = true` : mismatched.map(describe).join("; ");
      const table = operator.compiled.tableInput;
      const both = table !== undefined
        ? `; the table "${inputs[table]!.dataset}" is read as it is (keyed by its message key), so the repartition topic has its partition count`
        : inputs.length > 1 ? "; both join inputs go through it, so they are co-partitioned" : "";
      plan = { stage: stage.index, hop: { topic: repartitionTopicOf(pipeline, stage.index), keyColumns: wanted }, reason: `repartition through ${repartitionTopicOf(pipeline, stage.index)} keyed by ${list(wanted[0]!)}: ${why}${both}` };
    } else {
      const table = operator.compiled.tableInput;
      plan = operator.compiled.global
        ? { stage: stage.index, reason: `no repartition: the table "${inputs[table!]!.dataset}" is global (every member reads all of it), so the stream is joined where it is` }
        : { stage: stage.index, reason: `no repartition: ${inputs.map((input, i) => wanted[i]!.length === 0 ? `input "${input.dataset}" is the table, keyed by its message key` : `input "${input.dataset}" is already keyed by ${list(input.keying!)}`).join("; ")}` };
    }
    plans.push(plan);
    // What the stage emits is keyed by its key columns (a join: the left key, under its prefix).
    const emitted = outputKeyColumns(stage);
    keyingOf.set(stage.def.output, { keying: emitted && survivingKeying(emitted, stage.def.steps.slice(operator.step + 1)), from: stage.index });
  }
  return plans;
}

/** The key columns of the rows a stateful stage emits, as named in those rows. */
export function outputKeyColumns(stage: CompiledStage): readonly string[] | null {
  const operator = stage.operator;
  if (!operator) return null;
  if (operator.op !== "streamJoin") return operator.compiled.keyColumns;
  const step = stage.def.steps[operator.step] as { leftPrefix?: string };
  const prefix = step.leftPrefix ?? "";
  return operator.compiled.keyColumns.map((c) => prefix + c);
}

/** The keying after these inline steps, or null once one of them changes a key column. */
function survivingKeying(keying: readonly string[], steps: ReadonlyArray<{ op: string; [field: string]: unknown }>): Keying {
  const touched = (columns: readonly string[]) => columns.some((c) => keying.includes(c));
  for (const step of steps) {
    switch (step.op) {
      case "filter":
        break;
      case "select":
        if (!keying.every((c) => (step.columns as string[]).includes(c))) return null;
        break;
      case "drop":
        if (touched(step.columns as string[])) return null;
        break;
      case "rename": {
        const mapping = step.mapping as Record<string, string>;
        if (touched(Object.keys(mapping)) || touched(Object.values(mapping))) return null;
        break;
      }
      case "applyExpression":
        if (keying.includes(step.column as string)) return null;
        break;
      default:
        return null;
    }
  }
  return keying;
}

export { groupKeyText };

/** The group key of a row for these key columns (a missing column reads as null). */
export function rowKeyText(row: Record<string, unknown>, columns: readonly string[]): string {
  return groupKeyText(columns.map((c) => row[c] ?? null));
}
