import { afterAll, describe, expect, test } from "bun:test";
import { compareVersions, createComputeStep, FvError, TransformRegistry } from "./imports.ts";
import { nodeTransformFs } from "../../runtime/compute/node-host.ts";
import { exampleFile, functionsDir, orderColumns, recordingHost, tempRoots, wasmManifest } from "./helpers.ts";

const roots = tempRoots();
afterAll(() => roots.cleanup());
const enrichWasm = exampleFile("enrich-order", "enrich-order.wasm");

async function failure(run: () => Promise<unknown>): Promise<FvError> {
  try {
    await run();
  } catch (error) {
    expect(error).toBeInstanceOf(FvError);
    return error as FvError;
  }
  throw new Error("expected a failure");
}

describe("transform registry", () => {
  test("loads every shipped example from functions/ and skips folders without a manifest", async () => {
    const registry = await TransformRegistry.load(functionsDir, nodeTransformFs);
    expect(registry.list().map((m) => `${m.id}@${m.version}`)).toEqual([
      "enrich-order@1.0.0",
      "notional-expr@1.0.0",
      "price-filter@1.0.0",
      "slugify-py@1.0.0",
      "spin@1.0.0",
      "text-stats-go@1.0.0",
    ]);
    const m = registry.resolve("enrich-order");
    expect(m.impl).toBe("wasm");
    expect(m.function).toBe("transform");
    expect(m.batchSize).toBe(64);
    expect(m.wasmPath).toBe(enrichWasm);
    expect(registry.resolve("slugify-py").command).toEqual(["python3", "-u", "slugify.py"]);
  });

  test("later roots override earlier ones by id@version, and a bare id resolves to the highest version", async () => {
    const first = roots.root({
      a: wasmManifest("orders", enrichWasm, 'description = "first 1.0.0"', "1.0.0"),
      b: wasmManifest("orders", enrichWasm, 'description = "first 1.9.0"', "1.9.0"),
    });
    const second = roots.root({
      a: wasmManifest("orders", enrichWasm, 'description = "second 1.0.0"', "1.0.0"),
      c: wasmManifest("orders", enrichWasm, 'description = "second 1.10.0"', "1.10.0"),
    });
    const registry = await TransformRegistry.load(`${first}:${second}`, nodeTransformFs);
    expect(registry.resolve("orders@1.0.0").description).toBe("second 1.0.0");
    expect(registry.resolve("orders@1.9.0").description).toBe("first 1.9.0");
    expect(registry.resolve("orders").description).toBe("second 1.10.0");
    expect(registry.resolve("orders@1.0.0").root).toBe(second);
    expect(compareVersions("1.10.0", "1.9.0")).toBeGreaterThan(0);
  });

  test("with FV_TRANSFORMS_DIR unset every ref fails closed, saying to set it", async () => {
    for (const unset of [undefined, "", " : "]) {
      const registry = await TransformRegistry.load(unset, nodeTransformFs);
      const error = await failure(async () => registry.resolve("enrich-order"));
      expect(error.code).toBe("INVALID_TOPOLOGY");
      expect(error.message).toContain("Set FV_TRANSFORMS_DIR");
    }
    const error = await failure(() => createComputeStep({ op: "wasm", ref: "enrich-order" }, TransformRegistry.empty(), recordingHost(), { stage: 0, step: 1 }));
    expect(error.message).toStartWith('invalid topology: stage 1, step 2 (op "wasm"), field "ref": transform "enrich-order" cannot be resolved');
    expect(error.message).toContain("Set FV_TRANSFORMS_DIR");
    expect(error.context).toMatchObject({ stage: 1, step: 2, field: "ref", ref: "enrich-order" });
  });

  test("a root that does not exist fails the load, naming it", async () => {
    const error = await failure(() => TransformRegistry.load(`${functionsDir}:/no/such/root`, nodeTransformFs));
    expect(error.code).toBe("INVALID_SETTINGS");
    expect(error.message).toBe("FV_TRANSFORMS_DIR: the root /no/such/root does not exist. Fix the path, or leave it out of the list");
  });

  test("a missing transform or version fails with the ref and the fix", async () => {
    const registry = await TransformRegistry.load(functionsDir, nodeTransformFs);
    expect(() => registry.resolve("enrich-order@9.9.9")).toThrow('transform "enrich-order@9.9.9" not found in FV_TRANSFORMS_DIR=');
    expect(() => registry.resolve("enrich-order@9.9.9")).toThrow('versions of "enrich-order": 1.0.0');
    expect(() => registry.resolve("nope")).toThrow("Fix the ref, or add a folder with a transform.toml");
  });

  test.each([
    ["TOML that does not parse", 'id = "x"\nversion = ', "not valid TOML"],
    ["a misspelt field", `${wasmManifest("x", enrichWasm)}batchsize = 3`, 'field "batchsize": unknown field "batchsize" (did you mean "batchSize"?)'],
    ["an unknown field", `${wasmManifest("x", enrichWasm)}colour = "red"`, 'field "colour": unknown field "colour"; known fields: "id", "version"'],
    ["a missing field", 'version = "1"\nimpl = "wasm"\nentry = "x.wasm"', 'field "id": missing field "id"'],
    ["an unknown column type", `${wasmManifest("x", enrichWasm)}[[inputs]]\ncolumns = [{ name = "a", type = "text" }]`, 'field "inputs.0.columns.0.type": type is one of string, number'],
    ["a missing module", wasmManifest("x", "missing.wasm"), 'field "entry":'],
    ["a wasm transform without entry", 'id = "x"\nversion = "1"\nimpl = "wasm"', 'a wasm transform needs entry = "<file>.wasm"'],
    ["an unknown impl", 'id = "x"\nversion = "1"\nimpl = "lua"\nentry = "x"', 'impl is "wasm", "container" or "expression"'],
    ["a protocol other than json", `${wasmManifest("x", enrichWasm).replace('protocol = "json"', 'protocol = "avro"')}`, 'protocol is "json"'],
    ["a container without command or image", 'id = "x"\nversion = "1"\nimpl = "container"', "needs a local command"],
    ["a zero batch size", `${wasmManifest("x", enrichWasm)}batchSize = 0`, "batchSize is at least 1"],
  ])("a manifest with %s fails the load, naming the file, even when no step uses it", async (_what, toml, expected) => {
    const good = roots.root({ fine: wasmManifest("fine", enrichWasm) });
    const bad = roots.root({ broken: toml });
    const error = await failure(() => TransformRegistry.load(`${good}:${bad}`, nodeTransformFs));
    expect(error.code).toBe("INVALID_TOPOLOGY");
    expect(error.message).toStartWith(`bad transform manifest ${bad}/broken/transform.toml: `);
    expect(error.message).toContain(expected);
  });

  test("a plugin without the exported function fails validation naming stage, step, ref and the fix", async () => {
    const root = roots.root({ x: wasmManifest("no-export", enrichWasm, 'function = "enrich"') });
    const registry = await TransformRegistry.load(root, nodeTransformFs);
    const error = await failure(() => createComputeStep({ op: "wasm", ref: "no-export@1.0.0" }, registry, recordingHost(), { stage: 1, step: 0 }));
    expect(error.code).toBe("INVALID_TOPOLOGY");
    expect(error.message).toStartWith('invalid topology: stage 2, step 1 (op "wasm"), field "ref": transform "no-export@1.0.0"');
    expect(error.message).toContain('does not export function "enrich" (it exports: ');
    expect(error.message).toContain("transform");
    expect(error.message).toContain('or set function = "<name>" in its transform.toml');
  }, 30_000);

  test("the step op must match the transform's impl, and the step takes only op and ref", async () => {
    const registry = await TransformRegistry.load(functionsDir, nodeTransformFs);
    const host = recordingHost();
    const mismatch = await failure(() => createComputeStep({ op: "container", ref: "enrich-order" }, registry, host, { stage: 0, step: 0 }));
    expect(mismatch.message).toContain('is impl = "wasm": write op = "wasm"');
    const extra = await failure(() => createComputeStep({ op: "wasm", ref: "enrich-order", batch: 3 } as { op: string; ref: string }, registry, host, { stage: 0, step: 0 }));
    expect(extra.message).toContain('field "batch": unknown field "batch" for wasm; known fields: "op", "ref"');
    const badRef = await failure(() => createComputeStep({ op: "wasm", ref: "enrich order" }, registry, host, { stage: 0, step: 0 }));
    expect(badRef.message).toContain('ref is "id" or "id@version"');
  });

  test("a transform declaring two [[inputs]] cannot feed a step", async () => {
    const root = roots.root({ x: wasmManifest("two", enrichWasm, `${orderColumns}${orderColumns}`) });
    const registry = await TransformRegistry.load(root, nodeTransformFs);
    const error = await failure(() => createComputeStep({ op: "wasm", ref: "two" }, registry, recordingHost(), { stage: 0, step: 0 }));
    expect(error.message).toContain("declares 2 [[inputs]]");
  });
});
