/**
 * A WASM plugin in its own process (isolation = "process"): the messages of
 * src/compute/plugin-protocol.ts as JSON lines on stdin and stdout. SIGKILL always stops it, even
 * when the plugin spins inside WebAssembly, which Worker.terminate() cannot stop on Bun and Deno.
 *
 * Run by the step as `bun runtime/compute/wasm-process.ts` or `deno run -A ...`.
 */
import process from "node:process";
import { createInterface } from "node:readline";
import { SerialQueue } from "../../src/async.ts";
import type { FromPluginHost, ToPluginHost } from "../../src/compute/plugin-protocol.ts";
import { createPluginServer } from "../../src/compute/plugin-server.ts";

function send(message: FromPluginHost): void {
  // Results go out parsed, so the stream parses each line once.
  if (message.type === "result" && message.output !== undefined) {
    let value: unknown;
    try {
      value = message.output === "" ? null : JSON.parse(message.output);
    } catch {
      process.stdout.write(`${JSON.stringify(message)}\n`); // the stream finds it is not JSON
      return;
    }
    process.stdout.write(`${JSON.stringify({ type: "result", id: message.id, value })}\n`);
    return;
  }
  process.stdout.write(`${JSON.stringify(message)}\n`);
}

const handle = createPluginServer(send);
const messages = new SerialQueue();
const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
lines.on("line", (line) => {
  if (line.length === 0) return;
  const message = JSON.parse(line) as ToPluginHost;
  void messages.run(() => handle(message));
});
// The stream stops this process in order: end of stdin (then it exits 0), or SIGKILL. A SIGINT or
// SIGTERM meant for the stream and sent to every process of its unit (systemd's default
// KillMode=control-group) must not end the plugin mid-stop, while the stream still needs it.
process.on("SIGINT", () => {});
process.on("SIGTERM", () => {});
lines.on("close", () => {
  void messages.run(async () => process.exit(0));
});
send({ type: "hello" });
