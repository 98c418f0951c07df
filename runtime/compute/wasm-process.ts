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
import { framedLine, type FromPluginHost, readFramedLine, type ToPluginHost } from "../../src/compute/plugin-protocol.ts";
import { createPluginServer } from "../../src/compute/plugin-server.ts";

function send(message: FromPluginHost): void {
  if (message.type === "result" && message.output !== undefined) {
    // The output as the plugin wrote it, after the message and a tab: the stream parses it once.
    const line = message.output === "" ? undefined : framedLine({ type: "result", id: message.id }, message.output);
    if (line !== undefined) {
      process.stdout.write(`${line}\n`);
      return;
    }
    // A line break in it (or no output): parsed here and sent inside the message.
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
  const { message, payload } = readFramedLine(line);
  // A call's input rides after a tab, as the text the plugin is called with.
  if (payload !== undefined) message.input = payload;
  void messages.run(() => handle(message as unknown as ToPluginHost));
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
