/**
 * Where a WASM plugin runs: a Worker (fast to call; on Bun 1.4 and Deno 2.9 `terminate()` does
 * not stop a thread spinning inside WebAssembly, so a runaway plugin keeps burning that core) or
 * a child process (each message a JSON line; SIGKILL always stops it).
 */
import type { ComputeHost, WorkerLike } from "./host.ts";
import { LineWriter, readLines } from "./lines.ts";
import { framedLine, type FromPluginHost, readFramedLine, type ToPluginHost } from "./plugin-protocol.ts";

export type Isolation = "worker" | "process";

export interface PluginChannel {
  readonly isolation: Isolation;
  send(message: ToPluginHost): void;
  /** Stops the plugin host for good. */
  kill(): void;
}

export interface ChannelEvents {
  onMessage(message: FromPluginHost): void;
  /** The host died on its own (worker error, process exit). */
  onDeath(reason: string): void;
}

/** The worker script, next to this file (.ts from source, .js from dist/). */
export const wasmWorkerUrl = new URL(`./wasm-worker${import.meta.url.slice(-3)}`, import.meta.url);

function toBase64(bytes: Uint8Array): string {
  let bin = "";
  const chunk = 0x8000;
  for (let i = 0; i < bytes.length; i += chunk) bin += String.fromCharCode(...bytes.subarray(i, i + chunk));
  return btoa(bin);
}

export function openChannel(isolation: Isolation, host: ComputeHost, events: ChannelEvents, context: Record<string, unknown>): PluginChannel {
  return isolation === "worker" ? openWorker(host, events) : openProcess(host, events, context);
}

function openWorker(host: ComputeHost, events: ChannelEvents): PluginChannel {
  const worker = host.createWorker ? host.createWorker(wasmWorkerUrl) : (new Worker(wasmWorkerUrl.href, { type: "module" }) as unknown as WorkerLike);
  let dead = false;
  worker.onmessage = (event) => events.onMessage(event.data as FromPluginHost);
  worker.onerror = (event) => {
    if (dead) return;
    dead = true;
    const message = (event as ErrorEvent).message ?? "worker error";
    events.onDeath(`the WASM worker failed: ${message}`);
  };
  return {
    isolation: "worker",
    send(message) {
      if (message.type === "init" && message.wasm instanceof Uint8Array) {
        const copy = message.wasm.slice();
        worker.postMessage({ ...message, wasm: copy }, [copy.buffer]);
      } else worker.postMessage(message);
    },
    kill() {
      dead = true;
      worker.terminate();
    },
  };
}

function openProcess(host: ComputeHost, events: ChannelEvents, context: Record<string, unknown>): PluginChannel {
  const command = host.pluginProcessCommand?.();
  if (!command) throw new Error('this host cannot start plugin processes (no pluginProcessCommand); use isolation = "worker"');
  const child = host.spawn(command, {});
  let dead = false;
  const die = (reason: string) => {
    if (dead) return;
    dead = true;
    events.onDeath(reason);
  };
  child.started.catch((error) => die(`the plugin process could not start: ${error instanceof Error ? error.message : String(error)}`));
  child.exited.then((exit) => die(`the plugin process exited (code ${exit.code}, signal ${exit.signal})`));
  void readLines(child.stdout, (line) => {
    if (line.length === 0) return;
    try {
      const { message, payload } = readFramedLine(line);
      if (payload !== undefined && message.type === "result") {
        // The plugin's output as it wrote it: parsed here once; if it is not JSON, the step reports that.
        try {
          message.value = JSON.parse(payload);
        } catch {
          message.output = payload;
        }
      }
      events.onMessage(message as FromPluginHost);
    } catch {
      host.log("warn", `plugin process wrote a line that is not JSON: ${line.slice(0, 200)}`, context);
    }
  });
  void readLines(child.stderr, (line) => host.log("info", line, { ...context, stream: "stderr", pid: child.pid }));
  const writer = new LineWriter(child.stdin);
  return {
    isolation: "process",
    send(message) {
      if (message.type === "init" && message.wasm instanceof Uint8Array) writer.write(JSON.stringify({ ...message, wasm: toBase64(message.wasm) }));
      else if (message.type === "call") {
        const { input, ...call } = message;
        writer.write(framedLine(call, typeof input === "string" ? input : JSON.stringify(input)) ?? JSON.stringify(message));
      } else writer.write(JSON.stringify(message));
    },
    kill() {
      dead = true;
      child.kill("SIGKILL");
    },
  };
}
