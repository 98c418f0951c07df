import { afterEach, describe, expect, test } from "bun:test";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parsePlatformStore } from "../../../runtime/platform/catalog.ts";
import { createPlatformApp } from "../../../runtime/platform/server.ts";
import { HttpHost } from "../../../runtime/hosts/http-host.ts";
import { BUN, DENO, ROOT } from "../../helpers/cli.ts";

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function pipelineDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "fv-platform-"));
  writeFileSync(join(dir, "demo.toml"), `name = "demo"\n[[transforms]]\ninputs = ["a"]\noutput = "b"\n[[transforms.steps]]\nop = "select"\ncolumns = ["x"]\n`);
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

describe("the reference platform", () => {
  test("serves pipelines and datasets from a JSON store before the folder", async () => {
    const store = parsePlatformStore(
      {
        pipelines: { stored: { stages: [{ inputs: ["in"], output: "out", steps: [] }] } },
        datasets: { in: { topic: "in-v3", brokers: "k:9093", policy: { deadLetter: "in-dlq" } } },
      },
      "store.json",
    );
    const app = createPlatformApp({ store, dir: pipelineDir() });
    expect(await (await app.request("/pipelines/stored/topology")).json()).toEqual({ stages: [{ inputs: ["in"], output: "out", steps: [] }] });
    expect(await (await app.request("/pipelines/demo/topology")).json()).toMatchObject({ stages: [{ inputs: ["a"], output: "b" }] });
    expect(await (await app.request("/datasets/in")).json()).toEqual({
      apiName: "in", topic: "in-v3", brokers: "k:9093", policy: { deadLetter: "in-dlq" }, source: "kafka", sink: "kafka",
    });
    expect(((await (await app.request("/pipelines")).json()) as { pipelines: string[] }).pipelines.sort()).toEqual(["demo", "stored"]);
  });

  test("a sink dataset is answered with its fields beside the binding's, and the HTTP host reads them back", async () => {
    const dir = pipelineDir();
    writeFileSync(join(dir, "sinks.toml"), `name = "sinks"\n[datasets.totals]\nsink = "postgres"\nurl = "postgres://postgres@db:5432/app"\ntable = "totals"\nkey = ["id"]\n[[transforms]]\ninputs = ["a"]\noutput = "totals"\n[[transforms.steps]]\nop = "select"\ncolumns = ["id"]\n`);
    const app = createPlatformApp({ dir, brokers: "k:9092" });
    expect(await (await app.request("/datasets/totals")).json()).toEqual({
      apiName: "totals", topic: "totals", brokers: "k:9092", policy: {}, source: "kafka", sink: "postgres", url: "postgres://postgres@db:5432/app", table: "totals", key: ["id"],
    });
    const host = new HttpHost({ baseUrl: "http://platform", fetch: async (request) => await app.request(request) });
    expect((await host.resolveTopic("totals")).sinkConfig).toEqual({ kind: "postgres", url: "postgres://postgres@db:5432/app", table: "totals", key: ["id"] });
  });

  test("a store with a bad dataset is refused naming the field", () => {
    expect(() => parsePlatformStore({ datasets: { in: { brokers: "no port" } } }, "store.json")).toThrow(/store.json: field "datasets.in.brokers": use host:port/);
  });

  test("a build record that is not one is refused with 422 naming the field", async () => {
    const app = createPlatformApp({ dir: pipelineDir() });
    const put = (body: unknown) => app.request("/builds/b1/record", { method: "PUT", body: JSON.stringify(body), headers: { "content-type": "application/json" } });
    const bad = await put({ pipeline: "demo", kind: "batch", status: "RUNNING" });
    expect(bad.status).toBe(422);
    expect(await bad.json()).toEqual({ error: 'invalid build record: field "kind": must be "stream"' });
    expect((await put({ id: "b1", pipeline: "demo", kind: "stream", status: "RUNNING" })).status).toBe(204);
    expect(await (await app.request("/builds")).json()).toMatchObject({ builds: [{ id: "b1", pipeline: "demo", status: "RUNNING", records: 1 }] });
    expect((await app.request("/builds/other/record")).status).toBe(404);
  });

  for (const runtime of ["bun", "deno"] as const) {
    test(`runs as a program on ${runtime}: --dir and --port, Ctrl-C ends it`, async () => {
      const script = join(ROOT, "runtime/platform/server.ts");
      const args = ["--dir", pipelineDir(), "--port", "0"];
      const child = spawn(runtime === "bun" ? BUN : DENO, runtime === "bun" ? [script, ...args] : ["run", "-A", script, ...args], {
        cwd: ROOT,
        stdio: ["ignore", "ignore", "pipe"],
        env: { ...process.env, NO_COLOR: "1" },
      });
      cleanups.push(() => child.kill("SIGKILL"));
      const url = await new Promise<string>((resolve, reject) => {
        let err = "";
        child.stderr!.on("data", (chunk: Buffer) => {
          err += chunk.toString();
          const found = /platform on (http:\/\/\S+)/.exec(err);
          if (found) resolve(found[1]!);
        });
        child.on("exit", (code) => reject(new Error(`exited ${code}: ${err}`)));
      });
      const res = await fetch(`${url}/pipelines/demo/topology`);
      expect(res.status).toBe(200);
      expect(await res.json()).toMatchObject({ stages: [{ inputs: ["a"], output: "b" }] });
      const exited = new Promise((resolve) => child.on("exit", (code) => resolve(code)));
      child.kill("SIGINT");
      expect(await exited).toBe(0);
    }, 30_000);
  }
});
