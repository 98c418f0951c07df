import process from "node:process";
import type { ComputeConfig } from "../../src/loop/compute-runtime.ts";

/** Compute steps for the CLI: transforms from FV_TRANSFORMS_DIR, run with the Node-API host (Bun, Deno). */
export function computeConfig(): ComputeConfig {
  return {
    transformsDir: process.env.FV_TRANSFORMS_DIR || undefined,
    // The same extension as this module: .ts from source, .js from dist/ (Node).
    hostModule: new URL(`../compute/node-host${import.meta.url.slice(-3)}`, import.meta.url).href,
    // http steps' ${NAME} placeholders (url, headers) read these.
    env: { ...process.env },
  };
}
