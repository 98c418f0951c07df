/**
 * The plugin host's side of the protocol (see plugin-protocol.ts): owns one Extism plugin and
 * answers one message at a time. Runs inside the WASM worker (wasm-worker.ts) or a plugin process
 * (runtime/compute/wasm-process.ts); it never runs on the stream's own thread.
 */
import createPlugin, { type Plugin } from "@extism/extism";
import type { FromPluginHost, PluginOptions, ToPluginHost } from "./plugin-protocol.ts";

function decodeBase64(text: string): Uint8Array {
  const bin = atob(text);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return bytes;
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * Returns the message handler. `send` posts a message back to the step.
 *
 * @example
 * const handle = createPluginServer((m) => postMessage(m));
 * onmessage = (e) => handle(e.data);
 */
export function createPluginServer(send: (message: FromPluginHost) => void): (message: ToPluginHost) => Promise<void> {
  let module: WebAssembly.Module | undefined;
  let options: PluginOptions | undefined;
  let plugin: Plugin | undefined;
  let overLimit: string | undefined;
  const logger = {
    trace: (m: string) => send({ type: "log", level: "debug", message: String(m) }),
    debug: (m: string) => send({ type: "log", level: "debug", message: String(m) }),
    info: (m: string) => send({ type: "log", level: "info", message: String(m) }),
    log: (m: string) => send({ type: "log", level: "info", message: String(m) }),
    warn: (m: string) => send({ type: "log", level: "warn", message: String(m) }),
    error: (m: string) => {
      // The SDK refuses a buffer over maxPages by logging this and handing the plugin a null block.
      if (String(m).startsWith("memory limit exceeded")) overLimit = String(m);
      send({ type: "log", level: "error", message: String(m) });
    },
  } as unknown as Console;

  const instantiate = async (): Promise<Plugin> => {
    const o = options!;
    return await createPlugin(
      {
        wasm: [{ module: module! }],
        ...(o.memoryMaxPages !== undefined ? { memory: { maxPages: o.memoryMaxPages } } : {}),
      },
      {
        useWasi: o.wasi,
        config: o.config,
        allowedHosts: o.allowedHosts.length > 0 ? o.allowedHosts : undefined,
        allowedPaths: Object.keys(o.allowedPaths).length > 0 ? o.allowedPaths : undefined,
        enableWasiOutput: false,
        logger,
        logLevel: "info",
      },
    );
  };

  return async (message) => {
    if (message.type === "init") {
      try {
        const bytes = typeof message.wasm === "string" ? decodeBase64(message.wasm) : message.wasm;
        module = await WebAssembly.compile(bytes as BufferSource);
        options = message.options;
        plugin = await instantiate();
        send({ type: "ready", exports: WebAssembly.Module.exports(module).filter((e) => e.kind === "function").map((e) => e.name) });
      } catch (error) {
        send({ type: "init-failed", message: messageOf(error) });
      }
      return;
    }
    if (message.type === "call") {
      try {
        if (!plugin) plugin = await instantiate();
        const input = typeof message.input === "string" ? message.input : JSON.stringify(message.input);
        overLimit = undefined;
        const output = await plugin.call(message.fn, input);
        // The SDK's maxPages only bounds its own buffers; the module's linear memory is checked
        // here, after the call: over the limit, the call fails and the instance is replaced.
        const limit = options!.memoryMaxPages;
        if (limit !== undefined) {
          const memory = (await plugin.getInstance()).exports.memory;
          const pages = memory instanceof WebAssembly.Memory ? memory.buffer.byteLength / 65_536 : 0;
          if (pages > limit) {
            await plugin.close().catch(() => {});
            plugin = undefined;
            send({ type: "failed", id: message.id, message: `the plugin grew its memory to ${pages} pages of 64 KiB, over memoryMaxPages = ${limit}`, trap: false, reason: "memory_limit" });
            return;
          }
        }
        send({ type: "result", id: message.id, output: output === null ? "" : output.text() });
      } catch (error) {
        // A trap (WebAssembly.RuntimeError) can leave the instance's memory half-written:
        // replace the instance. An error the plugin set itself leaves it usable.
        const trap = error instanceof WebAssembly.RuntimeError || !messageOf(error).startsWith("Plugin-originated error");
        if (trap) {
          await plugin?.close().catch(() => {});
          plugin = undefined;
        }
        if (overLimit) send({ type: "failed", id: message.id, message: `${overLimit} (memoryMaxPages): ${messageOf(error)}`, trap, reason: "memory_limit" });
        else send({ type: "failed", id: message.id, message: messageOf(error), trap });
      }
    }
  };
}
