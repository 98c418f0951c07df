/**
 * What compute steps need from the runtime, as small interfaces: the engine never reaches for
 * Bun, Deno or node: itself. `runtime/compute/node-host.ts` implements them with node:fs and
 * node:child_process, which work on Bun, Deno and Node.
 */
import type { LogLevel } from "../logger.ts";

/** Reads transform folders. Paths are plain strings joined with "/". */
export interface TransformFs {
  /** The names of the sub-folders of a folder; null when the folder does not exist. */
  listFolders(path: string): Promise<string[] | null>;
  /** The text of a file, or null when it does not exist. */
  readText(path: string): Promise<string | null>;
  /** True when a file exists at the path. */
  exists(path: string): Promise<boolean>;
}

/** How a child process is started. */
export interface SpawnOptions {
  /** Working folder: the transform's folder, so a command can name its files relatively. */
  cwd?: string;
  env?: Record<string, string>;
}

/** How a child process ended. */
export interface ProcessExit {
  code: number | null;
  signal: string | null;
}

/** A running child process, with Web streams for its standard streams. */
export interface ChildProcessLike {
  readonly pid: number | undefined;
  /** Resolves once the process runs; rejects when it could not start (command not found). */
  readonly started: Promise<void>;
  readonly stdin: WritableStream<Uint8Array>;
  readonly stdout: ReadableStream<Uint8Array>;
  readonly stderr: ReadableStream<Uint8Array>;
  /** Resolves when the process has exited, for whatever reason. */
  readonly exited: Promise<ProcessExit>;
  kill(signal?: "SIGTERM" | "SIGKILL"): void;
}

/** The part of a Web Worker the WASM runner uses. */
export interface WorkerLike {
  postMessage(message: unknown, transfer?: Transferable[]): void;
  onmessage: ((event: MessageEvent) => void) | null;
  onerror: ((event: Event) => void) | null;
  terminate(): void;
}

/** The host services compute steps use. */
export interface ComputeHost {
  /** Bytes of a file (a .wasm module). */
  readFile(path: string): Promise<Uint8Array>;
  /** Starts a process; `command[0]` is looked up on PATH. */
  spawn(command: string[], options: SpawnOptions): ChildProcessLike;
  /** Where `command` is on PATH, or null. Used to find docker or podman for `image` transforms. */
  findExecutable?(name: string): Promise<string | null>;
  /**
   * Starts the WASM worker script (`src/compute/wasm-worker.ts`). Defaults to the global
   * `Worker` with `{ type: "module" }`.
   */
  createWorker?(url: URL): WorkerLike;
  /**
   * The command that runs a WASM plugin in its own process (`runtime/compute/wasm-process.ts`
   * with the current runtime). Without it, `isolation = "process"` is not available.
   */
  pluginProcessCommand?(): string[];
  log(level: LogLevel, message: string, context?: Record<string, unknown>): void;
}
