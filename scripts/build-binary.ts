#!/usr/bin/env bun
/**
 * Builds the single executable of fv-streams (docs/edge.md): Bun's runtime, the CLI, the engine
 * and every dependency in one file.
 *
 *   npm run build:binary                                    # → dist/fv-streams
 *   bun scripts/build-binary.ts --target bun-linux-arm64 --outfile dist/fv-streams-arm64
 *
 * `bun build --compile runtime/cli/main.ts …` alone makes a binary that starts but fails at the
 * first thing the program loads by URL at run time. Three steps make it whole:
 *
 * 1. Every module loaded by URL is an entry point of its own: the consumer Worker, the WASM
 *    Worker and the compute host module (imported by the Workers by URL). An unlisted one is
 *    simply not in the binary.
 * 2. Inside the binary those entry points sit at their paths from the repository root
 *    (`/$bunfs/root/src/loop/consumer-worker.js`), but every bundled module shares the URL of the
 *    main file (`/$bunfs/root/fv-streams`), so `new URL("./consumer-worker.ts", import.meta.url)`
 *    would point beside it. Our own modules get `import.meta.url` set to their place in the
 *    binary, which keeps every relative URL in the source pointing where it points on disk.
 * 3. @platformatic/wasm-utils (the Kafka client's CRC32C and compression) reads
 *    `dist/native.wasm` from disk next to itself; its `bundled` build has the wasm inlined.
 * 4. lmdb (the local state store) finds its native addon at run time by searching the disk
 *    (node-gyp-build-optional-packages), which finds nothing inside the binary. A `require` of
 *    the addon's path is something Bun embeds, so its loader is rewritten to require the N-API
 *    build of the target's `@lmdb/lmdb-<os>-<arch>` package. When that package is not installed
 *    (a cross-compile), the binary runs with the local store off and says so at start
 *    (src/state/local-store.ts loads lmdb lazily).
 */
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import process from "node:process";

const ROOT = resolve(import.meta.dir, "..");

/** The CLI first; then every module the program starts or imports by URL (step 1). */
export const ENTRY_POINTS = [
  "runtime/cli/main.ts",
  "src/loop/consumer-worker.ts",
  "src/compute/wasm-worker.ts",
  "runtime/compute/node-host.ts",
];

function flag(name: string): string | undefined {
  const at = process.argv.indexOf(name);
  if (at < 0) return undefined;
  const value = process.argv[at + 1];
  if (!value || value.startsWith("--")) throw new Error(`${name} needs a value`);
  return value;
}

const target = flag("--target");
const outfile = resolve(flag("--outfile") ?? join(ROOT, "dist/fv-streams"));
/** Where the binary's embedded files live, as Bun names it on each platform. */
const embeddedRoot = target?.includes("windows") ? "file:///B:/~BUN/root/" : "file:///$bunfs/root/";

/** The N-API build of lmdb's addon for the target (step 4), or undefined when not installed. */
function lmdbAddon(): string | undefined {
  const [, os = process.platform, arch = process.arch, libc] = (target ?? "").split("-");
  const dir = join(ROOT, "node_modules/@lmdb", `lmdb-${os === "windows" ? "win32" : os}-${arch}`);
  const file = join(dir, os === "linux" ? `node.napi.${libc === "musl" ? "musl" : "glibc"}.node` : "node.napi.node");
  return existsSync(file) ? file : undefined;
}
const addon = lmdbAddon();

const ownSource = new RegExp(`^${ROOT.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}[\\\\/](src|runtime)[\\\\/].*\\.ts$`);

mkdirSync(dirname(outfile), { recursive: true });
const result = await Bun.build({
  entrypoints: ENTRY_POINTS.map((p) => join(ROOT, p)),
  root: ROOT,
  compile: target ? { target: target as Bun.Build.CompileTarget, outfile } : { outfile },
  plugins: [
    {
      name: "fv-streams-binary",
      setup(build) {
        // Step 3.
        build.onResolve({ filter: /^@platformatic\/wasm-utils$/ }, (args) => ({ path: Bun.resolveSync("@platformatic/wasm-utils/bundled", dirname(args.importer)) }));
        // Step 4.
        build.onLoad({ filter: /[\\/]node_modules[\\/]lmdb[\\/]native\.js$/ }, (args) => {
          const text = readFileSync(args.path, "utf8");
          if (!addon || !text.includes("loadNAPI(dirName)")) return undefined;
          return { contents: text.replace("loadNAPI(dirName)", `require(${JSON.stringify(addon)})`), loader: "js" };
        });
        // Step 2.
        build.onLoad({ filter: ownSource }, (args) => {
          const text = readFileSync(args.path, "utf8");
          if (!text.includes("import.meta.url")) return undefined;
          const url = embeddedRoot + relative(ROOT, args.path).split(sep).join("/");
          return { contents: text.replaceAll("import.meta.url", JSON.stringify(url)), loader: "ts" };
        });
      },
    },
  ],
});

if (!result.success) {
  for (const log of result.logs) process.stderr.write(`${log}\n`);
  process.exit(1);
}
process.stderr.write(`built ${relative(process.cwd(), outfile) || outfile}${target ? ` for ${target}` : ""}${addon ? "" : " (no lmdb addon for this target: the local state store is off in it)"}\n`);
