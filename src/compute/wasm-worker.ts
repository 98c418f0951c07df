/**
 * The WASM worker: runs one Extism plugin off the stream's thread, so a plugin that never returns
 * can be abandoned (see wasm-step.ts). Started by the step with
 * `new Worker(new URL("./wasm-worker.ts", import.meta.url), { type: "module" })`.
 */
import { SerialQueue } from "../async.ts";
import type { FromPluginHost, ToPluginHost } from "./plugin-protocol.ts";
import { createPluginServer } from "./plugin-server.ts";

const scope = globalThis as unknown as {
  postMessage(message: FromPluginHost): void;
  onmessage: ((event: MessageEvent<ToPluginHost>) => void) | null;
};

const handle = createPluginServer((message) => scope.postMessage(message));
const messages = new SerialQueue();
scope.onmessage = (event) => {
  void messages.run(() => handle(event.data));
};
scope.postMessage({ type: "hello" });
