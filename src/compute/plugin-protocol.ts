/**
 * Messages between a WASM step and the plugin host that runs its Extism plugin (a Worker, or a
 * process speaking the same messages as JSON lines).
 *
 * 1. The host says `hello` once it listens (messages sent before would be lost).
 * 2. The step sends `init`; the host creates the plugin and answers `ready` with the module's
 *    exports, or `init-failed`.
 * 3. The step sends `call`s, several before the first is answered; the host runs them one after
 *    another and answers each with `result` or `failed`, in order. After a trap the host creates a
 *    fresh instance before the next call (linear memory may be half-written).
 */

/** Plugin options, as the manifest gives them. */
export interface PluginOptions {
  wasi: boolean;
  config: Record<string, string>;
  memoryMaxPages?: number;
  allowedHosts: string[];
  allowedPaths: Record<string, string>;
}

export type ToPluginHost =
  /** `wasm` is the module's bytes; base64 text over a process's stdin. */
  | { type: "init"; wasm: Uint8Array | string; options: PluginOptions }
  /** `input` is the batch as JSON text, or as a value the host turns into JSON text. */
  | { type: "call"; id: number; fn: string; input: string | { rows: unknown[] } };

export type FromPluginHost =
  | { type: "hello" }
  | { type: "ready"; exports: string[] }
  | { type: "init-failed"; message: string }
  /** `output` is the plugin's output text; over a process's pipe it arrives parsed, as `value`. */
  | { type: "result"; id: number; output?: string; value?: unknown }
  /** `reason`: the poison reason when it is not "plugin_error" (e.g. "memory_limit"). */
  | { type: "failed"; id: number; message: string; trap: boolean; reason?: string }
  | { type: "log"; level: "debug" | "info" | "warn" | "error"; message: string };

/**
 * Over a process's pipes every message is one line of JSON. A call's input and a result's output
 * are JSON text already: they ride after the message's own JSON and a tab, as they are, so
 * neither side parses and serializes them again on the way (JSON.stringify never writes a raw
 * tab, so the first tab ends the message). A payload with a line break in it (a plugin may
 * pretty-print its output) cannot ride on the line: the caller sends it inside the message.
 */
export function framedLine(message: object, payload: string): string | undefined {
  return payload.includes("\n") || payload.includes("\r") ? undefined : `${JSON.stringify(message)}\t${payload}`;
}

/** A line as framedLine writes it, or a plain JSON message: the message, and the payload after its tab if any. */
export function readFramedLine(line: string): { message: Record<string, unknown>; payload?: string } {
  const tab = line.indexOf("\t");
  if (tab < 0) return { message: JSON.parse(line) };
  // A tab inside the message's JSON would be escaped: the first raw tab is the frame's.
  return { message: JSON.parse(line.slice(0, tab)), payload: line.slice(tab + 1) };
}
