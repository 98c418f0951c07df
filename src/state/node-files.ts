/**
 * Files for a `FileStateStore` through `node:fs/promises`, which Bun, Deno and Node all have.
 *
 * @example
 * const store = new FileStateStore("/var/lib/fv/checkpoints", nodeFiles());
 * await store.put("dedup/000001", bytes);
 */
import { appendFileSync, mkdirSync } from "node:fs";
import { mkdir, readdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { dirname } from "node:path";
import type { TextFiles } from "../ops/file-state-store.ts";

const missing = (error: unknown) => (error as NodeJS.ErrnoException).code === "ENOENT";

/** Every file access a FileStateStore uses; writes create the folder when it is missing. */
export function nodeFiles(): Required<TextFiles> {
  const write = async (path: string, data: string | Uint8Array) => {
    await mkdir(dirname(path), { recursive: true });
    await writeFile(path, data);
  };
  return {
    readFile: (path) => readFile(path, "utf8").catch((error) => (missing(error) ? undefined : Promise.reject(error))),
    writeFile: write,
    rename: (from, to) => rename(from, to),
    readBytes: (path) => readFile(path).then((b) => new Uint8Array(b.buffer, b.byteOffset, b.byteLength), (error) => (missing(error) ? undefined : Promise.reject(error))),
    writeBytes: write,
    listFiles: (directory) => readdir(directory).catch((error) => (missing(error) ? [] : Promise.reject(error))),
    removeFile: (path) => rm(path, { force: true }),
    appendBytesNow: (path, data) => {
      mkdirSync(dirname(path), { recursive: true });
      appendFileSync(path, data);
    },
  };
}
