/** Every built-in function, by name. `FunctionRegistry.defaults()` starts from this table. */
import type { FunctionDef } from "./function-def.ts";
import { collectionFunctions } from "./functions/collections.ts";
import { conversionFunctions } from "./functions/conversions.ts";
import { mathFunctions } from "./functions/math.ts";
import { nullFunctions } from "./functions/nulls.ts";
import { textFunctions } from "./functions/text.ts";
import { timeFunctions } from "./functions/time.ts";

export const builtinFunctions: Readonly<Record<string, FunctionDef>> = Object.freeze({
  ...mathFunctions,
  ...textFunctions,
  ...collectionFunctions,
  ...nullFunctions,
  ...conversionFunctions,
  ...timeFunctions,
});
