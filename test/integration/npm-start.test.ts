/**
 * `npm start -- FILE` under a process supervisor: the supervisor sends SIGTERM to npm's own pid,
 * and the stream must stop in order, with npm (what the shell or the supervisor sees) exiting 0.
 * Without `exec` in the script, npm's `sh -c` child died of the signal, npm exited by SIGTERM
 * (143 in a shell) and the stream ran on as an orphan.
 *
 * On the Node engines the same runs `npm run start:node -- FILE`.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { lastRecord, logsOf, ROOT, startCli, TEST_ENGINE, waitFor } from "../helpers/cli.ts";
import { createTopic, produce, uniqueName } from "../helpers/kafka.ts";
import { transformFile } from "../helpers/pipelines.ts";
import { alive, descendants } from "../helpers/processes.ts";

const dirs: string[] = [];
afterAll(() => dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })));

/**
 * A copy of the package whose scripts are the real ones, except that scripts/setup.sh (installs
 * packages and starts a broker when none answers) is a no-op, and so is `build` for start:node
 * (scripts/test.sh builds dist/ before the Node runs): a test must not install or start anything.
 */
function packageCopy(): string {
  const dir = mkdtempSync(join(tmpdir(), "fv-npm-start-"));
  dirs.push(dir);
  const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8"));
  pkg.scripts.build = "true";
  writeFileSync(join(dir, "package.json"), JSON.stringify(pkg, null, 2));
  mkdirSync(join(dir, "scripts"));
  writeFileSync(join(dir, "scripts/setup.sh"), "exit 0\n");
  for (const entry of ["node_modules", "runtime", "src", "functions", "examples", "dist"]) {
    if (existsSync(join(ROOT, entry))) symlinkSync(join(ROOT, entry), join(dir, entry));
  }
  return dir;
}

const script = TEST_ENGINE.runtime === "node" ? "start:node" : "start";

describe(`npm run ${script} -- FILE`, () => {
  test("SIGTERM to npm's own pid stops the stream in order, npm exits 0 and no process is left behind", async () => {
    const input = uniqueName("npm-in");
    const output = uniqueName("npm-out");
    await createTopic(input, 1);
    await produce([{ topic: input, key: null, value: JSON.stringify({ a: 1, b: 2 }) }]);
    const file = transformFile(uniqueName("npm-start"), input, output, { op: "select", columns: ["a"] });
    const env: Record<string, string> = TEST_ENGINE.kafkaClient ? { STREAM_KAFKA_CLIENT: TEST_ENGINE.kafkaClient } : {};
    const run = startCli(["run", "--silent", script, "--", file], { executable: "npm", cwd: packageCopy(), env });
    const npm = run.child.pid!;
    let stream: number[] = [];
    try {
      await waitFor(() => {
        if (run.child.exitCode !== null) throw new Error(`npm exited (${run.child.exitCode}):\n${run.lines.join("\n")}`);
        return lastRecord(run.records)?.status === "RUNNING";
      }, 90_000, "a RUNNING record");
      stream = descendants(npm);
      expect(stream.length).toBeGreaterThan(0);

      process.kill(npm, "SIGTERM");
      const code = await Promise.race([run.exited, new Promise((r) => setTimeout(() => r("still running after 60 s"), 60_000))]);
      expect({ code, logs: code === 0 ? "" : logsOf(run, 30) }).toEqual({ code: 0, logs: "" });
      expect(run.lines).toContain("info SIGTERM received: stopping in order");
      expect(lastRecord(run.records)?.status).toBe("STOPPED");
      await waitFor(() => !stream.some(alive), 10_000, `the stream's processes (${stream.join(", ")}) to end`);
    } finally {
      for (const pid of [npm, ...stream]) if (alive(pid)) process.kill(pid, "SIGKILL");
    }
  }, 180_000);
});
