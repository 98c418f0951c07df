/**
 * The ComputeHost and TransformFs on node:fs/promises and node:child_process, which Bun, Deno
 * and Node all provide.
 */
import { spawn as spawnProcess } from "node:child_process";
import { constants } from "node:fs";
import { access, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import type { ChildProcessLike, ComputeHost, ProcessExit, SpawnOptions, TransformFs } from "../../src/compute/index.ts";
import type { Logger } from "../../src/index.ts";
import { packageRoot } from "../package-root.ts";

/** Transform folders on the local file system. */
export const nodeTransformFs: TransformFs = {
  async listFolders(path) {
    try {
      const entries = await readdir(path, { withFileTypes: true });
      return entries.filter((e) => e.isDirectory()).map((e) => e.name);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
      throw error;
    }
  },
  async readText(path) {
    try {
      return await readFile(path, "utf8");
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
      throw error;
    }
  },
  async exists(path) {
    try {
      await access(path, constants.F_OK);
      return true;
    } catch {
      return false;
    }
  },
};

/** Starts a process with Web streams for stdin, stdout and stderr. */
export function spawnChild(command: string[], options: SpawnOptions = {}): ChildProcessLike {
  const [file, ...args] = command;
  const child = spawnProcess(file!, args, {
    cwd: options.cwd,
    env: options.env ? { ...process.env, ...options.env } : process.env,
    stdio: ["pipe", "pipe", "pipe"],
    // A process group of its own: a stop signal to the stream's group (Ctrl-C in a terminal,
    // `kill -- -PGID`) reaches the stream only, which then stops its plugin and container
    // processes in order (end of stdin, then SIGKILL). In the stream's group they died of the
    // signal mid-stop and were started again. They still end with the stream: their stdin closes.
    detached: true,
  });
  const started = new Promise<void>((resolve, reject) => {
    child.once("spawn", () => resolve());
    child.once("error", (error) => reject(error));
  });
  started.catch(() => {});
  const exited = new Promise<ProcessExit>((resolve) => {
    child.once("close", (code, signal) => resolve({ code, signal }));
    child.once("error", () => resolve({ code: null, signal: null }));
  });
  const readable = (stream: NodeJS.ReadableStream | null): ReadableStream<Uint8Array> =>
    new ReadableStream<Uint8Array>({
      start(controller) {
        if (!stream) return controller.close();
        stream.on("data", (chunk: Uint8Array) => controller.enqueue(new Uint8Array(chunk)));
        stream.on("end", () => controller.close());
        stream.on("error", (error) => controller.error(error));
      },
    });
  const stdin = new WritableStream<Uint8Array>({
    write(chunk) {
      return new Promise<void>((resolve, reject) => {
        if (!child.stdin || child.stdin.destroyed) return reject(new Error("stdin is closed"));
        child.stdin.write(chunk, (error) => (error ? reject(error) : resolve()));
      });
    },
    close() {
      child.stdin?.end();
    },
  });
  child.stdin?.on("error", () => {}); // EPIPE after the process died: its exit is reported
  return {
    get pid() {
      return child.pid;
    },
    started,
    stdin,
    stdout: readable(child.stdout),
    stderr: readable(child.stderr),
    exited,
    kill(signal = "SIGTERM") {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
    },
  };
}

/** Where `name` is on PATH, or null. */
export async function findExecutable(name: string): Promise<string | null> {
  for (const dir of (process.env.PATH ?? "").split(delimiter)) {
    if (!dir) continue;
    const candidate = join(dir, name);
    try {
      await access(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return null;
}

/** The command that runs runtime/compute/wasm-process.ts with the current runtime. */
export function pluginProcessCommand(): string[] | undefined {
  const script = fileURLToPath(new URL(`./wasm-process${import.meta.url.slice(-3)}`, import.meta.url));
  const g = globalThis as { Bun?: unknown; Deno?: unknown };
  if (g.Deno) return [process.execPath, "run", "-A", script];
  if (g.Bun) return [process.execPath, script];
  // Node runs the tsc build in dist/ (.js); Node 20 cannot run the .ts source
  return script.endsWith(".js") ? [process.execPath, script] : undefined;
}

/**
 * A ComputeHost for Bun, Deno and Node. Plugin processes (isolation = "process") are available
 * on Bun and Deno, and on Node when it runs the build in dist/. Node 20 has no global `Worker`,
 * so there the process is the only isolation a `wasm` step can use.
 *
 * @example
 * const host = createNodeComputeHost({ logger: (level, message, context) => console.error(level, message, context) });
 */
export function createNodeComputeHost(options: { logger?: Logger } = {}): ComputeHost {
  const logger = options.logger ?? (() => {});
  const processCommand = pluginProcessCommand();
  return {
    readFile: async (path) => new Uint8Array(await readFile(path)),
    spawn: spawnChild,
    findExecutable,
    ...(processCommand ? { pluginProcessCommand: () => processCommand } : {}),
    log: (level, message, context) => logger(level, message, context),
  };
}

/**
 * OPA: `FV_OPA`, else the one scripts/setup.sh installs in .tools/bin, else `opa` on PATH.
 */
async function opaCommand(): Promise<string | null> {
  if (process.env.FV_OPA) return process.env.FV_OPA;
  const installed = fileURLToPath(new URL(".tools/bin/opa", packageRoot));
  try {
    await access(installed, constants.X_OK);
    return installed;
  } catch {
    return await findExecutable("opa");
  }
}

/**
 * Compiles a Rego policy to WebAssembly with OPA (`opa build -t wasm -e <entrypoint>`) and
 * returns the bundle's policy.wasm. A policy that does not compile throws OPA's message, which
 * names the line (`policy.rego:4: rego_parse_error: unexpected } token`).
 */
export async function compileRego(policy: string, entrypoint: string): Promise<Uint8Array> {
  const opa = await opaCommand();
  if (!opa) throw new Error("OPA is not installed: run bash scripts/setup.sh (it installs it with go install), or set FV_OPA to an opa binary");
  const dir = await mkdtemp(join(tmpdir(), "fv-rego-"));
  try {
    await writeFile(join(dir, "policy.rego"), policy);
    const build = await run(opa, ["build", "-t", "wasm", "-e", entrypoint, "policy.rego", "-o", "bundle.tar.gz"], dir);
    if (build.code !== 0) throw new Error(build.output.trim().replace(/^error: /, "") || `opa build exited ${build.code}`);
    const untar = await run("tar", ["-xzf", "bundle.tar.gz", "/policy.wasm"], dir);
    if (untar.code !== 0) throw new Error(`could not read policy.wasm from OPA's bundle: ${untar.output.trim()}`);
    return new Uint8Array(await readFile(join(dir, "policy.wasm")));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

function run(command: string, args: string[], cwd: string): Promise<{ code: number; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawnProcess(command, args, { cwd, stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    child.stdout!.on("data", (chunk: Buffer) => (output += chunk.toString()));
    child.stderr!.on("data", (chunk: Buffer) => (output += chunk.toString()));
    child.on("error", reject);
    child.on("close", (code) => resolve({ code: code ?? 1, output }));
  });
}
