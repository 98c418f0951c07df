import { FvError } from "../errors.ts";
import type { OperatorSnapshot } from "./operator.ts";
import type { StateStore } from "./state-store.ts";
import { nonJsonPath } from "./state-values.ts";

/**
 * The file access a `FileStateStore` needs, passed in by the host so the engine stays free of
 * runtime globals (Bun, Deno and Node each have their own file API).
 */
export interface TextFiles {
  /** The file's text, or undefined when it does not exist. */
  readFile(path: string): Promise<string | undefined>;
  writeFile(path: string, text: string): Promise<void>;
  /** Optional: when given, a save writes `<file>.tmp` and renames it over the file, so a crash never leaves half a snapshot. */
  rename?(from: string, to: string): Promise<void>;
  /** For the AsyncStateStore methods (get, put, delete, list): bytes in and out, a folder's file names, removal. */
  readBytes?(path: string): Promise<Uint8Array | undefined>;
  writeBytes?(path: string, data: Uint8Array): Promise<void>;
  /** The names of the files in a folder ([] when it does not exist). */
  listFiles?(directory: string): Promise<string[]>;
  /** Removes a file; one that does not exist is not an error. */
  removeFile?(path: string): Promise<void>;
  /** For `appendNow`: appends to a file (created when missing) synchronously, in one write. */
  appendBytesNow?(path: string, data: Uint8Array): void;
}

type ByteFiles = Required<Pick<TextFiles, "readBytes" | "writeBytes" | "listFiles" | "removeFile">>;

/**
 * Snapshots as JSON files, one per key, in one directory: `<directory>/<encoded key>.json`.
 * Keys are percent-encoded, so any key is a safe file name. It is also an `AsyncStateStore`
 * (src/state/async-store.ts; by its shape: get, put, delete, list, appendNow; values as
 * `<encoded key>.bin`) when the host's files can read bytes, list and remove
 * (`nodeFiles()` in src/state/node-files.ts does all of it).
 *
 * @example
 * // In the host, with Node's fs/promises (readFile, writeFile, rename):
 * const store = new FileStateStore("/var/lib/fv/checkpoints", {
 *   readFile: (p) => readFile(p, "utf8").catch((e) => e.code === "ENOENT" ? undefined : Promise.reject(e)),
 *   writeFile: (p, text) => writeFile(p, text),
 *   rename,
 * });
 * await store.save("sma/partition-0", op.snapshot());
 */
export class FileStateStore implements StateStore {
  readonly #directory: string;
  readonly #files: TextFiles;

  constructor(directory: string, files: TextFiles) {
    this.#directory = directory.replace(/\/+$/, "") || "/";
    this.#files = files;
  }

  /** The file a key's snapshot lives in. */
  pathOf(key: string, extension = ".json"): string {
    const name = encodeURIComponent(key).replace(/\./g, "%2E");
    return this.#directory === "/" ? `/${name}${extension}` : `${this.#directory}/${name}${extension}`;
  }

  async get(key: string): Promise<Uint8Array | undefined> {
    return await this.#bytes("get").readBytes(this.pathOf(key, ".bin"));
  }

  async put(key: string, value: Uint8Array): Promise<void> {
    const files = this.#bytes("put");
    const path = this.pathOf(key, ".bin");
    if (this.#files.rename === undefined) return await files.writeBytes(path, value);
    await files.writeBytes(`${path}.tmp`, value);
    await this.#files.rename(`${path}.tmp`, path);
  }

  /** Appends to a value, synchronously (when the files can: `appendBytesNow`, as `nodeFiles()` gives). */
  get appendNow(): ((key: string, value: Uint8Array) => void) | undefined {
    const { appendBytesNow } = this.#files;
    if (!appendBytesNow) return undefined;
    return (key, value) => appendBytesNow(this.pathOf(key, ".bin"), value);
  }

  async delete(key: string): Promise<void> {
    await this.#bytes("delete").removeFile(this.pathOf(key, ".bin"));
  }

  async list(prefix: string): Promise<string[]> {
    const names = await this.#bytes("list").listFiles(this.#directory);
    return names
      .filter((name) => name.endsWith(".bin"))
      .map((name) => decodeURIComponent(name.slice(0, -".bin".length)))
      .filter((key) => key.startsWith(prefix))
      .sort();
  }

  #bytes(method: string): ByteFiles {
    const { readBytes, writeBytes, listFiles, removeFile } = this.#files;
    if (!readBytes || !writeBytes || !listFiles || !removeFile) {
      throw new FvError("INVALID_SETTINGS", `FileStateStore.${method} needs files that read and write bytes, list and remove (readBytes, writeBytes, listFiles, removeFile): pass nodeFiles() from src/state/node-files.ts`);
    }
    return { readBytes, writeBytes, listFiles, removeFile };
  }

  async save(key: string, snapshot: OperatorSnapshot): Promise<void> {
    // JSON.stringify would quietly turn NaN into null: refuse instead of writing a wrong snapshot.
    const bad = nonJsonPath(snapshot);
    if (bad !== undefined) {
      throw new FvError("STATE_CORRUPTED", `cannot save snapshot ${JSON.stringify(key)}: it holds ${bad.what} at ${bad.path || "the top"}, which JSON cannot carry`, {
        context: { key, path: bad.path },
      });
    }
    const path = this.pathOf(key);
    const text = JSON.stringify(snapshot);
    if (this.#files.rename === undefined) {
      await this.#files.writeFile(path, text);
      return;
    }
    await this.#files.writeFile(`${path}.tmp`, text);
    await this.#files.rename(`${path}.tmp`, path);
  }

  async load(key: string): Promise<OperatorSnapshot | undefined> {
    const path = this.pathOf(key);
    const text = await this.#files.readFile(path);
    if (text === undefined) return undefined;
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch (error) {
      throw new FvError("STATE_CORRUPTED", `snapshot file ${path} is not valid JSON`, { cause: error, context: { key, path } });
    }
    const s = parsed as Partial<OperatorSnapshot> | null;
    if (typeof s !== "object" || s === null || typeof s.version !== "number" || typeof s.op !== "string" || !Array.isArray(s.entries)) {
      throw new FvError("STATE_CORRUPTED", `snapshot file ${path} is not a snapshot (it needs version, op and entries)`, { context: { key, path } });
    }
    return s as OperatorSnapshot;
  }
}
