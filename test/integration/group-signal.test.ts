/**
 * A stop signal sent to the whole process group (Ctrl-C in a terminal, `kill -- -PGID`): the
 * stream stops in order, and its WASM plugin processes and container transforms are stopped by
 * the stream, not killed by the signal and started again while it stops.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { OutboundRecord } from "../../src/kafka/port.ts";
import { lastRecord, logsOf, ROOT, startCli, waitFor } from "../helpers/cli.ts";
import { createTopic, produce, uniqueName } from "../helpers/kafka.ts";
import { pipelineFile } from "../helpers/pipelines.ts";
import { alive, descendants } from "../helpers/processes.ts";

const roots: string[] = [];
afterAll(() => roots.forEach((root) => rmSync(root, { recursive: true, force: true })));

/** enrich-order in a process of its own (isolation = "process"), and the slugify-py container. */
function transformsRoot(): string {
  const root = mkdtempSync(join(tmpdir(), "fv-transforms-"));
  roots.push(root);
  for (const name of ["enrich-order", "slugify-py"]) cpSync(join(ROOT, "functions", name), join(root, name), { recursive: true });
  const manifest = join(root, "enrich-order", "transform.toml");
  writeFileSync(manifest, readFileSync(manifest, "utf8").replace('timeoutMs = 2000', 'timeoutMs = 2000\nisolation = "process"'));
  return root;
}

describe("a stop signal to the whole process group", () => {
  test("SIGINT to the group stops the stream in order, and no plugin or container process is started again", async () => {
    const name = uniqueName("group-signal");
    const [orders, posts] = [`${name}-orders`, `${name}-posts`];
    await createTopic(orders, 1);
    await createTopic(posts, 1);
    await produce(Array.from({ length: 20 }, (_, i): OutboundRecord => ({ topic: orders, key: null, value: JSON.stringify({ sku: `AB-${i}`, customer: "Ann", price: 100 + i, qty: 1 }) })));
    await produce(Array.from({ length: 20 }, (_, i): OutboundRecord => ({ topic: posts, key: null, value: JSON.stringify({ id: i, title: `Hello ${i}` }) })));
    const file = pipelineFile({
      name,
      transforms: [
        { inputs: [orders], output: `${name}-enriched`, steps: [{ op: "wasm", ref: "enrich-order" }] },
        { inputs: [posts], output: `${name}-slugs`, steps: [{ op: "container", ref: "slugify-py" }] },
      ],
    });
    const run = startCli(["run", file], { env: { FV_TRANSFORMS_DIR: transformsRoot() }, detached: true });
    let children: number[] = [];
    try {
      await waitFor(() => {
        if (run.child.exitCode !== null) throw new Error(`the CLI exited (${run.child.exitCode}):\n${logsOf(run)}`);
        const metrics = lastRecord(run.records)?.metrics;
        return lastRecord(run.records)?.status === "RUNNING" && (metrics?.emitted ?? 0) >= 40;
      }, 90_000, "both stages to emit their rows");

      children = descendants(run.child.pid!);
      expect(children.length).toBeGreaterThanOrEqual(2); // the plugin process and the container

      process.kill(-run.child.pid!, "SIGINT");
      expect(await run.exited).toBe(0);
      expect(lastRecord(run.records)?.status).toBe("STOPPED");
      const logs = logsOf(run);
      expect(logs).toContain("SIGINT received: stopping in order");
      expect(logs).not.toContain("starting it again");
      expect(logs).not.toMatch(/exited \(code/);
      expect(lastRecord(run.records)?.metrics?.poison ?? 0).toBe(0);
      // Out of the stream's group, they still end with it.
      await waitFor(() => !children.some(alive), 10_000, `the plugin and container processes (${children.join(", ")}) to end`);
    } finally {
      if (run.child.exitCode === null) process.kill(-run.child.pid!, "SIGKILL");
      for (const pid of children) if (alive(pid)) process.kill(pid, "SIGKILL");
    }
  }, 180_000);
});
