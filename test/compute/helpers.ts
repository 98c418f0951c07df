/** Fixtures for the compute tests: temporary transform roots, a host that keeps its log. */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { ComputeHost } from "../../src/compute/index.ts";
import { createNodeComputeHost } from "../../runtime/compute/node-host.ts";

/** The shipped examples. */
export const functionsDir = resolve(import.meta.dir, "../../functions");

/** An example's file, by folder and name. */
export const exampleFile = (folder: string, file: string) => join(functionsDir, folder, file);

/** Temporary roots, removed by `cleanup()` (call it in afterAll). */
export function tempRoots() {
  const made: string[] = [];
  return {
    /** A new root folder holding the given transforms: folder name → transform.toml text. */
    root(transforms: Record<string, string>): string {
      const root = mkdtempSync(join(tmpdir(), "fv-transforms-"));
      made.push(root);
      for (const [folder, toml] of Object.entries(transforms)) {
        mkdirSync(join(root, folder), { recursive: true });
        writeFileSync(join(root, folder, "transform.toml"), toml);
      }
      return root;
    },
    cleanup() {
      for (const root of made) rmSync(root, { recursive: true, force: true });
    },
  };
}

export interface LogLine {
  level: string;
  message: string;
  context?: Record<string, unknown>;
}

/** A node host whose log lines are kept in `lines`. */
export function recordingHost(): ComputeHost & { lines: LogLine[] } {
  const lines: LogLine[] = [];
  const host = createNodeComputeHost({ logger: (level, message, context) => lines.push({ level, message, context }) });
  return Object.assign(host, { lines });
}

/** The column tables the order examples declare. */
export const orderColumns = `
[[inputs]]
columns = [
  { name = "sku", type = "string" },
  { name = "customer", type = "string" },
  { name = "price", type = "number" },
  { name = "qty", type = "number" },
]
`;

/** A wasm manifest pointing at an example's module, with extra fields. */
export function wasmManifest(id: string, wasm: string, extra = "", version = "1.0.0"): string {
  return `id = "${id}"\nversion = "${version}"\nimpl = "wasm"\nentry = ${JSON.stringify(wasm)}\nprotocol = "json"\n${extra}\n`;
}

/** Rows in, the output rows of each result (or its poison reason). */
export function summarize(results: Array<{ rows: unknown[] } | { poison: { reason: string } }>): unknown[] {
  return results.map((r) => ("rows" in r ? r.rows : `poison:${r.poison.reason}`));
}

/** An example's transform.toml, with its entry made absolute and top-level fields added first. */
export function exampleManifest(folder: string, topLevel = "", edit: (toml: string) => string = (t) => t): string {
  const text = readFileSync(join(functionsDir, folder, "transform.toml"), "utf8");
  const absolute = text.replace(/^entry = "([^"]+)"$/m, (_, file: string) => `entry = ${JSON.stringify(join(functionsDir, folder, file))}`);
  return `${topLevel}\n${edit(absolute)}`;
}
