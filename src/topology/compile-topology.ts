import * as v from "valibot";
import { FvError } from "../errors.ts";
import type { FunctionRegistry, Row } from "../expr/index.ts";
import { computeOps, computeStepSchemas, type ComputeStepDef } from "../compute/step-schemas.ts";
import { checkHttpStep } from "../compute/http-step.ts";
import { type CompiledOperator, operatorSteps } from "../ops/index.ts";
import { type InlineStep, inlineSteps } from "../steps/index.ts";
import { describeIssues } from "../control/schema-issues.ts";
import type { StageDef, Topology } from "../control/types.ts";

const datasetName = v.pipe(v.string("a dataset name is a string"), v.minLength(1, "a dataset name cannot be empty"));

const stageSchema = v.object({
  inputs: v.pipe(v.array(datasetName, 'list the input datasets, e.g. inputs = ["events"]'), v.minLength(1, "a stage needs at least one input")),
  output: datasetName,
  steps: v.array(v.looseObject({ op: v.string("every step needs op = \"...\"") }), "steps is a list of tables ([[transforms.steps]])"),
});

const topologySchema = v.object({
  stages: v.pipe(v.array(v.unknown(), "stages must be a list"), v.minLength(1, "the pipeline has no stage: add a [[transforms]] table")),
});

/** A compute step of a stage (WASM, container or expression transform, or an http call), resolved when the stream starts. */
export interface StageCompute {
  readonly op: string;
  /** The transform's ref; for an http step, its url. */
  readonly ref: string;
  /** The step as checked (with its defaults). */
  readonly def: ComputeStepDef;
  /** 0-based position among the stage's steps. */
  readonly step: number;
}

/** A stateful operator step of a stage. */
export interface StageOperator {
  readonly op: string;
  /** 0-based position among the stage's steps. */
  readonly step: number;
  readonly compiled: CompiledOperator;
  /**
   * The step's `repartition` option: false skips the hop (the user vouches that the inputs are
   * keyed by the step's key columns), true forces one; absent, the engine decides (keying.ts).
   */
  readonly repartition?: boolean;
}

/** A stage whose steps are compiled and ready to run on rows. */
export interface CompiledStage {
  /** 0-based position in the topology. */
  readonly index: number;
  readonly def: StageDef;
  /** Every step in order; a compute step appears as `{ op, reads: [] }` with no `apply`. */
  readonly steps: ReadonlyArray<Pick<InlineStep, "op" | "reads">>;
  /** The stage's compute step, if any: inline steps run `before` it, then it, then `after`. */
  readonly compute?: StageCompute;
  /** The stage's stateful operator, if any (one instance per input partition), between `before` and `after`. */
  readonly operator?: StageOperator;
  /** Runs the inline steps before the compute step (all steps when there is none). Throws for poison. */
  readonly before: (row: Row) => Row | null;
  /** `before` has no steps: it hands back the row as decoded. */
  readonly nothingBefore: boolean;
  /**
   * A stage with no compute step or operator whose steps only filter rows and set columns
   * (filter, applyExpression): the columns its steps set, in the order they are first set. A row
   * that had none of them is written as its source text with them appended (stage-runner.ts),
   * rather than serialized again whole.
   */
  readonly appends?: readonly string[];
  /** Runs the inline steps after the compute step on each of its output rows. */
  readonly after: (row: Row) => Row | null;
  /** Runs all steps of a stage without a compute step: the output row, or null when dropped. */
  process(row: Row): Row | null;
}

export interface CompiledTopology {
  readonly stages: readonly CompiledStage[];
}

function fail(message: string, context: { stage?: number; step?: number; field?: string; op?: string }, cause?: unknown): never {
  throw new FvError("INVALID_TOPOLOGY", message, { context, cause });
}

function where(stage: number, step?: number, op?: string, field?: string): string {
  let at = `stage ${stage + 1}`;
  if (step !== undefined) at += `, step ${step + 1}${op ? ` (op "${op}")` : ""}`;
  if (field) at += `, field "${field}"`;
  return at;
}

/**
 * Checks a topology and compiles its steps. Runs before anything is consumed: an invalid topology
 * throws an FvError (INVALID_TOPOLOGY) whose message names the stage, the step and the field.
 *
 * @example
 * const compiled = compileTopology({ stages: [{ inputs: ["events"], output: "out", steps: [{ op: "filter", expression: "price > 100" }] }] });
 * compiled.stages[0].process({ price: 150 }); // → { price: 150 }
 */
export function compileTopology(topology: unknown, options: { functions?: FunctionRegistry } = {}): CompiledTopology {
  const top = v.safeParse(topologySchema, topology);
  if (!top.success) {
    const { field, message } = describeIssues(topologySchema, top.issues);
    fail(`invalid topology: field "${field || "stages"}": ${message}`, { field: field || "stages" });
  }
  const stages = top.output.stages.map((raw, index) => compileStage(raw, index, options.functions));
  return { stages };
}

function compileStage(raw: unknown, index: number, functions?: FunctionRegistry): CompiledStage {
  const parsed = v.safeParse(stageSchema, raw);
  if (!parsed.success) {
    const { field, message } = describeIssues(stageSchema, parsed.issues);
    const stepMatch = /^steps\.(\d+)\.?(.*)$/.exec(field);
    if (stepMatch) {
      const step = Number(stepMatch[1]);
      const stepField = stepMatch[2] || "op";
      fail(`invalid topology: ${where(index, step, undefined, stepField)}: ${message}`, { stage: index + 1, step: step + 1, field: stepField });
    }
    fail(`invalid topology: ${where(index, undefined, undefined, field)}: ${message}`, { stage: index + 1, field });
  }
  const def = parsed.output as StageDef;
  // A stage is inline steps around at most one operator or compute step.
  const heavy = def.steps.map((step, i) => ({ op: step.op, i })).filter(({ op }) => op in operatorSteps || isComputeOp(op));
  if (heavy.length > 1) {
    const second = heavy[1]!;
    fail(
      `invalid topology: ${where(index, second.i, second.op, "op")}: a stage holds at most one operator or compute step, and this one already has "${heavy[0]!.op}" (step ${heavy[0]!.i + 1}). Split it into two stages.`,
      { stage: index + 1, step: second.i + 1, field: "op", op: second.op },
    );
  }
  let compute: StageCompute | undefined;
  let operator: StageOperator | undefined;
  const before: InlineStep[] = [];
  const after: InlineStep[] = [];
  const steps: Array<Pick<InlineStep, "op" | "reads">> = [];
  def.steps.forEach((step, stepIndex) => {
    if (isComputeOp(step.op)) {
      const parsed = v.safeParse(computeStepSchemas, step);
      if (!parsed.success) {
        const described = describeIssues(computeStepSchemas, parsed.issues, step.op);
        const field = described.field || "ref";
        const message = described.message;
        fail(`invalid topology: ${where(index, stepIndex, step.op, field)}: ${message}`, { stage: index + 1, step: stepIndex + 1, field, op: step.op });
      }
      if (parsed.output.op === "http") {
        try {
          checkHttpStep(parsed.output);
        } catch (error) {
          const field = (error as { field: string }).field;
          fail(`invalid topology: ${where(index, stepIndex, step.op, field)}: ${(error as Error).message}`, { stage: index + 1, step: stepIndex + 1, field, op: step.op });
        }
      }
      compute = { op: step.op, ref: parsed.output.op === "http" ? parsed.output.url : parsed.output.ref, def: parsed.output, step: stepIndex };
      steps.push({ op: step.op, reads: [] });
      return;
    }
    if (step.op in operatorSteps) {
      const { repartition, ...fields } = step as { op: string; repartition?: unknown };
      if (repartition !== undefined && typeof repartition !== "boolean") {
        fail(
          `invalid topology: ${where(index, stepIndex, step.op, "repartition")}: repartition is true or false (false: the inputs are already keyed by the step's key columns, skip the repartition topic)`,
          { stage: index + 1, step: stepIndex + 1, field: "repartition", op: step.op },
        );
      }
      operator = { op: step.op, step: stepIndex, compiled: compileOperator(fields, index, stepIndex, def.inputs), ...(repartition !== undefined ? { repartition } : {}) };
      if (operator.compiled.global && repartition !== undefined) {
        fail(`invalid topology: ${where(index, stepIndex, step.op, "repartition")}: a global table is read whole by every member, so nothing is repartitioned: leave repartition out`, { stage: index + 1, step: stepIndex + 1, field: "repartition", op: step.op });
      }
      steps.push({ op: step.op, reads: [] });
      return;
    }
    const compiled = compileStep(step, index, stepIndex, functions);
    (compute || operator ? after : before).push(compiled);
    steps.push(compiled);
  });
  const runBefore = chain(before);
  if (def.inputs.length > 1 && operator?.op !== "streamJoin" && operator?.op !== "tableJoin") {
    fail(`invalid topology: ${where(index, undefined, undefined, "inputs")}: only a stage with a streamJoin or tableJoin step takes more than one input`, { stage: index + 1, field: "inputs" });
  }
  const process = compute || operator
    ? () => {
      throw new Error(`stage ${index + 1} has a ${compute ? "compute" : "stateful"} step: run it through the stream loop`);
    }
    : runBefore;
  // (A column named __proto__ is not a field JSON.parse or an assignment makes: such a stage is serialized whole.)
  const appendsOnly = !compute && !operator && before.length > 0 && before.every((s) => s.op === "filter" || (s.op === "applyExpression" && s.sets !== undefined && s.sets !== "__proto__"));
  const appends = appendsOnly ? [...new Set(before.flatMap((s) => (s.sets === undefined ? [] : [s.sets])))] : undefined;
  return { index, def, steps, compute, operator, before: runBefore, nothingBefore: before.length === 0, ...(appends ? { appends } : {}), after: chain(after), process };
}

function compileOperator(raw: { op: string }, stage: number, step: number, inputNames: readonly string[]): CompiledOperator {
  const inputs = inputNames.length;
  const kind = operatorSteps[raw.op]!;
  const parsed = v.safeParse(kind.schema, raw);
  if (!parsed.success) {
    const { field, message } = describeIssues(kind.schema, parsed.issues, raw.op);
    fail(`invalid topology: ${where(stage, step, raw.op, field)}: ${message}`, { stage: stage + 1, step: step + 1, field, op: raw.op });
  }
  try {
    return kind.compile(parsed.output, { stage, step, inputs, inputNames });
  } catch (error) {
    const field = String((error as FvError)?.context?.field ?? "op");
    fail(`invalid topology: ${where(stage, step, raw.op, field)}: ${(error as Error).message}`, { stage: stage + 1, step: step + 1, field, op: raw.op }, error);
  }
}

function isComputeOp(op: string): boolean {
  return (computeOps as readonly string[]).includes(op);
}

function compileStep(raw: { op: string }, stage: number, step: number, functions?: FunctionRegistry): InlineStep {
  const op = raw.op;
  const kind = inlineSteps[op];
  if (!kind) {
    const known = [...Object.keys(inlineSteps), ...computeOps, ...Object.keys(operatorSteps)].join(", ");
    const why = `unknown op "${op}"`;
    fail(`invalid topology: ${where(stage, step, op, "op")}: ${why}. Known steps: ${known}`, { stage: stage + 1, step: step + 1, field: "op", op });
  }
  const schema = kind.schemaFor?.(raw as { language?: unknown }) ?? kind.schema;
  const parsed = v.safeParse(schema, raw);
  if (!parsed.success) {
    const { field, message } = describeIssues(schema, parsed.issues, op);
    fail(`invalid topology: ${where(stage, step, op, field)}: ${message}`, { stage: stage + 1, step: step + 1, field, op });
  }
  try {
    return kind.compile(parsed.output, functions);
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    const field = (error as { field?: string }).field ?? "expression";
    fail(`invalid topology: ${where(stage, step, op, field)}: ${message}`, { stage: stage + 1, step: step + 1, field, op }, error);
  }
}

/** Runs steps in order; stops at the first one that drops the row. */
function chain(steps: readonly InlineStep[]): (row: Row) => Row | null {
  const fns = steps.map((s) => s.apply);
  return (row) => {
    let current: Row | null = row;
    for (let i = 0; i < fns.length && current !== null; i++) current = fns[i]!(current);
    return current;
  };
}
