/**
 * The transform registry: every `transform.toml` under the FV_TRANSFORMS_DIR roots, by
 * `id@version`. Loaded once at startup; a bad manifest fails the load even when no pipeline uses
 * it, so a broken drop-in is found before it is needed.
 */
import { parse as parseToml } from "smol-toml";
import { FvError } from "../errors.ts";
import type { TransformFs } from "./host.ts";
import { checkManifest, joinPath, type TransformManifest } from "./manifest.ts";

/** The environment variable that lists the roots, colon-separated. */
export const TRANSFORMS_DIR_ENV = "FV_TRANSFORMS_DIR";

/** The manifest file each transform folder holds. */
export const MANIFEST_FILE = "transform.toml";

/** Compares versions segment by segment, numerically where both segments are numbers. */
export function compareVersions(a: string, b: string): number {
  const pa = a.split(/[.+-]/);
  const pb = b.split(/[.+-]/);
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    const x = pa[i];
    const y = pb[i];
    if (x === undefined) return -1;
    if (y === undefined) return 1;
    const nx = /^\d+$/.test(x) ? Number(x) : NaN;
    const ny = /^\d+$/.test(y) ? Number(y) : NaN;
    const c = !Number.isNaN(nx) && !Number.isNaN(ny) ? nx - ny : x < y ? -1 : x > y ? 1 : 0;
    if (c !== 0) return c;
  }
  return 0;
}

/** Splits a ref: `id` or `id@version`. */
export function parseRef(ref: string): { id: string; version?: string } {
  const at = ref.lastIndexOf("@");
  return at > 0 ? { id: ref.slice(0, at), version: ref.slice(at + 1) } : { id: ref };
}

function invalid(message: string, context: Record<string, unknown>, cause?: unknown): FvError {
  return new FvError("INVALID_TOPOLOGY", message, { context, cause });
}

/**
 * Transforms by `id@version`.
 *
 * @example
 * const registry = await TransformRegistry.load(process.env.FV_TRANSFORMS_DIR, nodeTransformFs);
 * registry.resolve("enrich-order");        // the highest version
 * registry.resolve("enrich-order@1.0.0");  // exactly this one
 */
export class TransformRegistry {
  readonly #byKey: Map<string, TransformManifest>;
  readonly #roots: readonly string[] | undefined;

  private constructor(roots: readonly string[] | undefined, byKey: Map<string, TransformManifest>) {
    this.#roots = roots;
    this.#byKey = byKey;
  }

  /** A registry with no roots: every resolve fails, saying to set FV_TRANSFORMS_DIR. */
  static empty(): TransformRegistry {
    return new TransformRegistry(undefined, new Map());
  }

  /**
   * Reads every `<root>/<folder>/transform.toml`. `roots` is the FV_TRANSFORMS_DIR value
   * (colon-separated; undefined or empty gives the empty registry). Later roots override earlier
   * ones by `id@version`. Throws FvError INVALID_TOPOLOGY naming the file for a manifest that
   * does not parse or check, or whose WASM module is missing, and FvError INVALID_SETTINGS for
   * a root that does not exist.
   */
  static async load(roots: string | undefined, fs: TransformFs): Promise<TransformRegistry> {
    const list = (roots ?? "").split(":").map((r) => r.trim()).filter((r) => r.length > 0);
    if (list.length === 0) return TransformRegistry.empty();
    const byKey = new Map<string, TransformManifest>();
    for (const root of list) {
      const inThisRoot = new Map<string, string>();
      const folders = await fs.listFolders(root);
      if (folders === null) {
        throw new FvError("INVALID_SETTINGS", `${TRANSFORMS_DIR_ENV}: the root ${root} does not exist. Fix the path, or leave it out of the list`, {
          context: { field: TRANSFORMS_DIR_ENV, root },
        });
      }
      for (const folder of folders.sort()) {
        const dir = joinPath(root, folder);
        const file = joinPath(dir, MANIFEST_FILE);
        const text = await fs.readText(file);
        if (text === null) continue;
        const manifest = await readManifest(text, { dir, file, root }, fs);
        const key = `${manifest.id}@${manifest.version}`;
        const twin = inThisRoot.get(key);
        if (twin) throw invalid(`bad transform manifest ${file}: ${key} is also defined by ${twin} in the same root; give one of them another version`, { file, transform: key });
        inThisRoot.set(key, file);
        byKey.set(key, manifest);
      }
    }
    return new TransformRegistry(list, byKey);
  }

  /** The roots it was loaded from; undefined when FV_TRANSFORMS_DIR was unset. */
  get roots(): readonly string[] | undefined {
    return this.#roots;
  }

  /** Every transform, sorted by id then version. */
  list(): TransformManifest[] {
    return [...this.#byKey.values()].sort((a, b) => (a.id === b.id ? compareVersions(a.version, b.version) : a.id < b.id ? -1 : 1));
  }

  /**
   * The manifest a ref names: `id@version` exactly, or the highest version of `id`. Throws
   * FvError INVALID_TOPOLOGY saying what is missing and how to fix it.
   */
  resolve(ref: string): TransformManifest {
    if (this.#roots === undefined) {
      throw invalid(
        `transform "${ref}" cannot be resolved: no transform registry is configured. Set ${TRANSFORMS_DIR_ENV} to a colon-separated list of folders holding transforms (one folder each, with a ${MANIFEST_FILE})`,
        { ref },
      );
    }
    const { id, version } = parseRef(ref);
    const versions = this.list().filter((m) => m.id === id);
    if (version !== undefined) {
      const found = this.#byKey.get(`${id}@${version}`);
      if (found) return found;
    } else if (versions.length > 0) {
      return versions[versions.length - 1]!;
    }
    const roots = this.#roots.join(":");
    const known = versions.length > 0
      ? `; versions of "${id}": ${versions.map((m) => m.version).join(", ")}`
      : `; known transforms: ${[...new Set(this.list().map((m) => m.id))].join(", ") || "none"}`;
    throw invalid(
      `transform "${ref}" not found in ${TRANSFORMS_DIR_ENV}=${roots}${known}. Fix the ref, or add a folder with a ${MANIFEST_FILE} for it under one of the roots`,
      { ref },
    );
  }
}

async function readManifest(text: string, where: { dir: string; file: string; root: string }, fs: TransformFs): Promise<TransformManifest> {
  let raw: unknown;
  try {
    raw = parseToml(text);
  } catch (error) {
    const detail = error instanceof Error ? error.message.split("\n")[0] : String(error);
    throw invalid(`bad transform manifest ${where.file}: not valid TOML: ${detail}`, { file: where.file }, error);
  }
  const checked = checkManifest(raw, where);
  if (!checked.ok) {
    const field = checked.field ? `field "${checked.field}": ` : "";
    throw invalid(`bad transform manifest ${where.file}: ${field}${checked.message}`, { file: where.file, field: checked.field });
  }
  const manifest = checked.manifest;
  if (manifest.wasmPath && !(await fs.exists(manifest.wasmPath))) {
    throw invalid(`bad transform manifest ${where.file}: field "entry": ${manifest.wasmPath} does not exist; build the transform (see its build script) or fix entry`, {
      file: where.file,
      field: "entry",
    });
  }
  return manifest;
}
