/**
 * `{ op = "filter", language = "rego", policy = "...", query = "data.trades.allow" }`: keeps the
 * row when the Rego query is true for it (the row is `input`), drops it when false or undefined.
 * The policy is compiled to WebAssembly by OPA (`opa build -t wasm`) when the stream starts (the
 * runtime does that: src/loop/compute-runtime.ts asks its host) and evaluated per row with
 * @open-policy-agent/opa-wasm. An evaluation error makes the row poison `policy_error`.
 */
import { FvError } from "../errors.ts";
import type { Row } from "../expr/index.ts";
import type { InlineStep } from "./step.ts";

/** A query as Rego writes it: `data.<package path>.<rule>`. */
const QUERY = /^data(\.[A-Za-z_][A-Za-z0-9_]*)+$/;

interface LoadedPolicy {
  evaluate(input: unknown, entrypoint?: string | number): Array<{ result: unknown }>;
}

export class RegoFilter implements InlineStep {
  readonly op = "filter";
  readonly reads: readonly string[] = [];
  /** The policy's Rego text. */
  readonly policy: string;
  readonly query: string;
  /** OPA's name for the query: `trades/allow` for `data.trades.allow`. */
  readonly entrypoint: string;
  #loaded: LoadedPolicy | undefined;

  constructor(policy: string, query: string) {
    if (!QUERY.test(query)) throw Object.assign(new Error(`query is a Rego reference to a rule, e.g. query = "data.trades.allow"; got ${JSON.stringify(query)}`), { field: "query" });
    if (!/^\s*package\s/m.test(policy)) throw Object.assign(new Error('policy is Rego text starting with a package line (or, in a pipeline file, a path to a .rego file next to it)'), { field: "policy" });
    this.policy = policy;
    this.query = query;
    this.entrypoint = query.slice("data.".length).replaceAll(".", "/");
  }

  /** Loads the policy OPA compiled (`policy.wasm` of `opa build -t wasm -e <entrypoint>`). */
  async load(wasm: Uint8Array): Promise<void> {
    const { loadPolicy } = await import("@open-policy-agent/opa-wasm");
    this.#loaded = (await loadPolicy(wasm)) as LoadedPolicy;
  }

  get loaded(): boolean {
    return this.#loaded !== undefined;
  }

  /** (An arrow: the stage runs steps' apply unbound.) */
  readonly apply = (row: Row): Row | null => {
    const policy = this.#loaded;
    if (policy === undefined) throw new FvError("INTERNAL", `rego filter ${this.query}: the policy was not loaded (the stream loop loads it at start)`);
    let results: Array<{ result: unknown }>;
    try {
      results = policy.evaluate(row, this.entrypoint);
    } catch (error) {
      throw policyError(`${this.query} failed for this row: ${describeError(error)}`);
    }
    const value = results[0]?.result;
    if (value === true) return row;
    if (value === false || value === undefined) return null;
    throw policyError(`${this.query} must give true or false, got ${JSON.stringify(value)}`);
  };
}

function policyError(message: string): FvError {
  return new FvError("POISON_ROW", `rego filter: ${message}`, { context: { reason: "policy_error" } });
}

function describeError(error: unknown): string {
  if (error instanceof Error && error.message) return error.message;
  const text = typeof error === "object" ? JSON.stringify(error) : String(error);
  return text && text !== "{}" ? text : "OPA reported an error (e.g. a rule that gives two different values for the row)";
}
