/** Newline-delimited text over Web streams, for the JSON-lines protocols. */

/**
 * Calls `onLine` for each line of the stream (without its "\n"), then resolves when the stream
 * ends. A final line without "\n" is delivered too.
 */
export async function readLines(stream: ReadableStream<Uint8Array>, onLine: (line: string) => void): Promise<void> {
  const decoder = new TextDecoder();
  const reader = stream.getReader();
  let pending = "";
  try {
    while (true) {
      const { value, done } = await reader.read();
      if (done) break;
      pending += decoder.decode(value, { stream: true });
      let nl = pending.indexOf("\n");
      while (nl >= 0) {
        const line = pending.slice(0, nl);
        pending = pending.slice(nl + 1);
        onLine(line.endsWith("\r") ? line.slice(0, -1) : line);
        nl = pending.indexOf("\n");
      }
    }
    pending += decoder.decode();
    if (pending.length > 0) onLine(pending);
  } catch {
    // The stream broke because the process died: its exit is reported elsewhere.
  } finally {
    reader.releaseLock();
  }
}

/** Writes lines to a stream, in order; a write to a dead process is dropped (its exit is reported elsewhere). */
export class LineWriter {
  readonly #writer: WritableStreamDefaultWriter<Uint8Array>;
  readonly #encoder = new TextEncoder();

  constructor(stream: WritableStream<Uint8Array>) {
    this.#writer = stream.getWriter();
  }

  write(line: string): void {
    this.#writer.write(this.#encoder.encode(line.endsWith("\n") ? line : `${line}\n`)).catch(() => {});
  }

  close(): void {
    this.#writer.close().catch(() => {});
  }
}
