import { afterAll, describe, expect, test } from "bun:test";
import { nodeTransformFs } from "../../runtime/compute/node-host.ts";
import { type ComputeStep, containerCommand, createComputeStep, TransformRegistry } from "./imports.ts";
import { exampleManifest, functionsDir, recordingHost, summarize, tempRoots } from "./helpers.ts";

const roots = tempRoots();
afterAll(() => roots.cleanup());

const titles = [
  { id: 1, title: "Crème Brûlée à la carte" },
  { id: 2, title: "Ünïcödé — 東京 2024!" },
  { id: 3, title: "#split" },
  { id: 4, title: "#drop" },
  { id: 5, title: 42 },
  { id: 6, title: "Hello, World", extra: "not declared" },
];

const expected = [
  [{ id: 1, title: "Crème Brûlée à la carte", slug: "creme-brulee-a-la-carte" }],
  [{ id: 2, title: "Ünïcödé — 東京 2024!", slug: "unicode-2024" }],
  [
    { id: 3, title: "#split", slug: "split-1" },
    { id: 3, title: "#split", slug: "split-2" },
  ],
  [],
  "poison:plugin_error",
  [{ id: 6, title: "Hello, World", slug: "hello-world" }],
];

/** The slugify example in a new root, its script path made absolute, with an edit. */
function slugifyRoot(edit: (toml: string) => string): string {
  const script = JSON.stringify(`${functionsDir}/slugify-py/slugify.py`);
  return roots.root({ slugify: exampleManifest("slugify-py", "", (t) => edit(t.replace('"slugify.py"', script))) });
}

async function slugify(root = functionsDir, host = recordingHost()): Promise<ComputeStep & { pid?: number }> {
  const registry = await TransformRegistry.load(root, nodeTransformFs);
  return (await createComputeStep({ op: "container", ref: "slugify-py" }, registry, host, { stage: 0, step: 0 })) as ComputeStep & { pid?: number };
}

describe("container transforms (local command)", () => {
  test("the python example gives exactly the expected rows: map, flat-map, filter and a per-row error", async () => {
    const host = recordingHost();
    const step = await slugify(functionsDir, host);
    try {
      expect(step.op).toBe("container");
      expect(summarize(await step.processBatch(titles))).toEqual(expected);
      expect(step.counters.poison).toBe(1);
      // Its stderr goes to the logger, line by line, with the pid.
      expect(host.lines).toContainEqual(expect.objectContaining({ level: "info", message: "slugify ready", context: expect.objectContaining({ stream: "stderr", ref: "slugify-py" }) }));
    } finally {
      await step.close();
    }
  }, 30_000);

  test("killing the process mid-batch loses nothing: it restarts and the batch is sent again", async () => {
    const step = await slugify();
    try {
      const firstPid = step.pid!;
      const rows = [{ id: 1, title: "one" }, { id: 2, title: "#slow" }, { id: 3, title: "three" }];
      const pending = step.processBatch(rows);
      await Bun.sleep(150); // the process is inside the #slow row
      process.kill(firstPid, "SIGKILL");
      expect(summarize(await pending)).toEqual([
        [{ id: 1, title: "one", slug: "one" }],
        [{ id: 2, title: "#slow", slug: "slow" }],
        [{ id: 3, title: "three", slug: "three" }],
      ]);
      expect(step.pid).not.toBe(firstPid);
      expect(step.counters).toMatchObject({ restarts: 1, poison: 0 });
      // Killed between batches: the next batch starts a new process.
      process.kill(step.pid!, "SIGKILL");
      await Bun.sleep(100);
      expect(summarize(await step.processBatch([{ id: 4, title: "four" }]))).toEqual([[{ id: 4, title: "four", slug: "four" }]]);
      expect(step.counters.restarts).toBe(2);
    } finally {
      await step.close();
    }
  }, 30_000);

  test("a row that kills the process every time is poison (container_crash); the rest of its batch goes on", async () => {
    const step = await slugify();
    try {
      const rows = [{ id: 1, title: "a" }, { id: 2, title: "b" }, { id: 3, title: "#exit" }, { id: 4, title: "d" }];
      expect(summarize(await step.processBatch(rows))).toEqual([
        [{ id: 1, title: "a", slug: "a" }],
        [{ id: 2, title: "b", slug: "b" }],
        "poison:container_crash",
        [{ id: 4, title: "d", slug: "d" }],
      ]);
      expect(summarize(await step.processBatch([{ id: 5, title: "after" }]))).toEqual([[{ id: 5, title: "after", slug: "after" }]]);
    } finally {
      await step.close();
    }
  }, 30_000);

  test("a batch that gets no answer within timeoutMs is poison (timeout); the process is replaced and the next batch flows", async () => {
    const fast = await slugify(slugifyRoot((t) => t.replace("timeoutMs = 5000", "timeoutMs = 1500")));
    try {
      const started = performance.now();
      expect(summarize(await fast.processBatch([{ id: 1, title: "x" }, { id: 2, title: "#hang" }]))).toEqual(["poison:timeout", "poison:timeout"]);
      expect(performance.now() - started).toBeLessThan(6000);
      expect(summarize(await fast.processBatch([{ id: 3, title: "y" }]))).toEqual([[{ id: 3, title: "y", slug: "y" }]]);
      expect(fast.counters).toMatchObject({ timeouts: 1, restarts: 1 });
    } finally {
      await fast.close();
    }
  }, 30_000);

  test("close ends the process", async () => {
    const step = await slugify();
    const pid = step.pid!;
    await step.close();
    await step.close(); // idempotent
    expect(() => process.kill(pid, 0)).toThrow();
  }, 30_000);
});

describe("container transforms (image)", () => {
  const imageManifest = (extra = "") => `id = "img"\nversion = "1.0.0"\nimpl = "container"\nimage = "registry.example/slugify:1"\nprotocol = "json"\n${extra}\n`;

  test("the command line runs the image with docker or podman, without network by default", async () => {
    const registry = await TransformRegistry.load(roots.root({ img: imageManifest('engine = "podman"\nallowedPaths = { "/data" = "/srv/data" }\n[config]\nlevel = 3') }), nodeTransformFs);
    const manifest = registry.resolve("img");
    expect(containerCommand(manifest, undefined)).toEqual([
      "podman", "run", "-i", "--rm", "--network", "none", "-v", "/srv/data:/data", "-e", "FV_CONFIG_level=3", "registry.example/slugify:1",
    ]);
    const open = await TransformRegistry.load(roots.root({ img: imageManifest('allowedHosts = ["api.example"]\ncommand = ["serve", "--json"]') }), nodeTransformFs);
    expect(containerCommand(open.resolve("img"), "docker")).toEqual(["docker", "run", "-i", "--rm", "registry.example/slugify:1", "serve", "--json"]);
  });

  test("without a container engine on the machine, validation fails saying what to install or use instead", async () => {
    const registry = await TransformRegistry.load(roots.root({ img: imageManifest() }), nodeTransformFs);
    const host = { ...recordingHost(), findExecutable: async () => null };
    const error = await createComputeStep({ op: "container", ref: "img" }, registry, host, { stage: 2, step: 0 }).then(() => null, (e: Error) => e);
    expect(error?.message).toStartWith('invalid topology: stage 3, step 1 (op "container"), field "ref": transform "img"');
    expect(error?.message).toContain("needs docker or podman, and none is on PATH");
    expect(error?.message).toContain("local command");
  });

  test("a local command that does not exist fails validation naming it", async () => {
    const registry = await TransformRegistry.load(roots.root({ x: `id = "x"\nversion = "1"\nimpl = "container"\nentry = "no-such-command-fv --serve"` }), nodeTransformFs);
    const error = await createComputeStep({ op: "container", ref: "x" }, registry, recordingHost(), { stage: 0, step: 0 }).then(() => null, (e: Error) => e);
    expect(error?.message).toContain("could not start `no-such-command-fv --serve`");
    expect(error?.message).toContain("Check that no-such-command-fv is installed");
  });
});
