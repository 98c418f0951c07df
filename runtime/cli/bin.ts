#!/usr/bin/env node
/**
 * The `fv-streams` command of the published package (package.json `bin` → dist/runtime/cli/bin.js):
 * the CLI on Node, from the tsc build. Bun and Deno run runtime/cli/main.ts from source.
 */
import "./main.ts";
