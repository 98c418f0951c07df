/**
 * `npm start` / `bun run start -- FILE` / `deno task start FILE`.
 * With no arguments, runs the demo; with a FILE, runs that pipeline; otherwise passes the
 * arguments to the CLI (`run FILE`, `validate FILE`).
 */
import process from "node:process";
import { packageRoot } from "../package-root.ts";

// `npm start` runs with the example transforms unless told otherwise.
process.env.FV_TRANSFORMS_DIR ??= new URL("functions", packageRoot).pathname;
const args = process.argv.slice(2);
if (args.length === 0) {
  await import("./demo.ts");
} else {
  if (args[0] !== "run" && args[0] !== "validate" && !args[0]!.startsWith("-")) process.argv.splice(2, 0, "run");
  await import("./main.ts");
}
