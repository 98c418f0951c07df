/**
 * The functions an expression may call, by name. Extendable: start from
 * `FunctionRegistry.defaults()` (or `defaultFunctions.extend()`) and `register` more.
 */
import { builtinFunctions } from "./builtin-functions.ts";
import type { Clock, FunctionDef } from "./function-def.ts";
import { keywords } from "./lexer.ts";

const namePattern = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * A name → function table. `register` is refused on the shared `defaultFunctions`; copy it with
 * `extend()` or `clone()` first. A compiled expression keeps the definitions it was compiled
 * with, so registering later does not change it.
 *
 * @example
 * const functions = FunctionRegistry.defaults({ clock: () => 0 });
 * functions.register("double", { minArgs: 1, maxArgs: 1, fn: ([x]) => (x as number) * 2 });
 * compileExpression("double(qty)", { functions }).evaluate({ qty: 4 }); // 8
 */
export class FunctionRegistry {
  readonly #functions = new Map<string, FunctionDef>();
  readonly #clock: Clock;
  #sealed = false;

  constructor(options: { clock?: Clock } = {}) {
    this.#clock = options.clock ?? (() => Date.now());
  }

  /** A fresh, writable registry holding the built-in functions. */
  static defaults(options: { clock?: Clock } = {}): FunctionRegistry {
    const registry = new FunctionRegistry(options);
    for (const [name, def] of Object.entries(builtinFunctions)) registry.register(name, def);
    return registry;
  }

  /** The clock `now()` and friends read. */
  get clock(): Clock {
    return this.#clock;
  }

  /** True for a registry that refuses `register` (the shared `defaultFunctions`). */
  get sealed(): boolean {
    return this.#sealed;
  }

  /** Adds or replaces a function. Returns the registry, for chaining. */
  register(name: string, def: FunctionDef): this {
    if (this.#sealed) {
      throw new TypeError(`this function registry is shared and read-only; register on a copy from extend() or clone()`);
    }
    if (!namePattern.test(name) || keywords.has(name)) {
      throw new TypeError(`invalid function name ${JSON.stringify(name)}: use letters, digits and '_', not a keyword`);
    }
    const { minArgs, maxArgs, fn } = def;
    if (!Number.isInteger(minArgs) || minArgs < 0 || !(maxArgs === Infinity || Number.isInteger(maxArgs)) || maxArgs < minArgs) {
      throw new TypeError(`function ${name}: minArgs and maxArgs must be integers with 0 <= minArgs <= maxArgs`);
    }
    if (typeof fn !== "function") throw new TypeError(`function ${name}: fn must be a function`);
    this.#functions.set(name, def);
    return this;
  }

  has(name: string): boolean {
    return this.#functions.has(name);
  }

  get(name: string): FunctionDef | undefined {
    return this.#functions.get(name);
  }

  /** Registered names, sorted. */
  names(): string[] {
    return [...this.#functions.keys()].sort();
  }

  /** A writable copy, optionally with another clock. */
  clone(options: { clock?: Clock } = {}): FunctionRegistry {
    const copy = new FunctionRegistry({ clock: options.clock ?? this.#clock });
    for (const [name, def] of this.#functions) copy.#functions.set(name, def);
    return copy;
  }

  /** A writable copy with `functions` registered on top. */
  extend(functions: Record<string, FunctionDef> = {}, options: { clock?: Clock } = {}): FunctionRegistry {
    const copy = this.clone(options);
    for (const [name, def] of Object.entries(functions)) copy.register(name, def);
    return copy;
  }

  /** Makes this registry read-only. Used for the shared `defaultFunctions`. */
  seal(): this {
    this.#sealed = true;
    return this;
  }
}

/**
 * The built-in functions, shared and read-only. Pass `defaultFunctions.extend({...})` (or a
 * `FunctionRegistry.defaults()`) to `compileExpression` to add your own.
 */
export const defaultFunctions: FunctionRegistry = FunctionRegistry.defaults().seal();
