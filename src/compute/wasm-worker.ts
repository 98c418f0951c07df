/**
 * The WASM worker: runs one Extism plugin off the stream's thread, so a plugin that never returns
 * can be abandoned (see wasm-step.ts). Started by the step with
 * `new Worker(new URL("./wasm-worker.ts", import.meta.url), { type: "module" })`.
 */
import type { FromPluginHost, ToPluginHost } from "./plugin-protocol.ts";
import { createPluginServer } from "./plugin-server.ts";

const scope = globalThis as unknown as {
  postMessage(message: FromPluginHost): void;
  onmessage: ((event: MessageEvent<ToPluginHost>) => void) | null;
};

const handle = createPluginServer((message) => scope.postMessage(message));
let queue: Promise<void> = Promise.resolve();
scope.onmessage = (event) => {
  queue = queue.then(() => handle(event.data));
};
scope.postMessage({ type: "hello" });
