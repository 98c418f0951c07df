/**
 * One HTTP/1.1 keep-alive connection (node:net, node:tls: Bun, Deno and Node have both) that
 * lets its caller act between "connected" and "the request's bytes are written": the http sink
 * makes a batch's ids durable there, so the request is written the moment they are.
 *
 * Why not fetch: with fetch the bytes leave some time after the call, on the client's own
 * schedule, and the sink could only remember the ids after the answer. A kill -9 between the
 * service's taking a request and that write sent the rows again (seen in the kill test, under
 * Node + librdkafka: 30 ids twice). Remembered first and written at once, the ids of a request
 * the process dies after are not sent again; what is left is a kill between the two calls (a
 * few microseconds), documented in docs/sinks.md.
 */
import { connect as tcpConnect, type Socket } from "node:net";
import { connect as tlsConnect } from "node:tls";

export interface HttpAnswer {
  status: number;
  body: string;
  /** The Location header of a redirect. */
  location?: string;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();
/** The most of an answer's body kept (the sink quotes 500 bytes of a refusal). */
const BODY_LIMIT = 64 * 1024;

export class HttpConnection {
  readonly #url: URL;
  #socket: Socket | undefined;
  /** Bytes of the answer read so far, and who waits for them. */
  #buffer = new Uint8Array(0);
  #waiter: (() => void) | undefined;
  #failure: Error | undefined;

  constructor(url: string) {
    this.#url = new URL(url);
  }

  /**
   * `method` with `body` and `headers`; `beforeWrite` runs once the connection is open and the
   * request's bytes are ready, and they are written as soon as it returns (in the same step when
   * it is synchronous) or resolves; `afterWrite` runs in the step that handed them on. Resolves
   * with the answer; throws when no answer came within `timeoutMs` or the connection failed (the
   * socket is then closed, and the next request opens a new one).
   */
  async request(
    method: string,
    headers: Record<string, string>,
    body: Uint8Array,
    timeoutMs: number,
    beforeWrite: () => void | Promise<void>,
    afterWrite: () => void = () => {},
  ): Promise<HttpAnswer> {
    const deadline = Date.now() + timeoutMs;
    const socket = await this.#open(timeoutMs);
    const url = this.#url;
    const head = [
      `${method} ${url.pathname}${url.search} HTTP/1.1`,
      `host: ${url.host}`,
      "connection: keep-alive",
      `content-length: ${body.byteLength}`,
      ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`),
      "",
      "",
    ].join("\r\n");
    const bytes = new Uint8Array(encoder.encode(head).byteLength + body.byteLength);
    bytes.set(encoder.encode(head), 0);
    bytes.set(body, bytes.byteLength - body.byteLength);
    this.#buffer = new Uint8Array(0);
    // A synchronous beforeWrite and the write are one step: nothing runs between them.
    const before = beforeWrite();
    if (before) await before;
    try {
      socket.write(bytes);
      afterWrite();
      return await this.#readAnswer(deadline);
    } catch (error) {
      this.close();
      throw error;
    }
  }

  close(): void {
    this.#socket?.destroy();
    this.#socket = undefined;
  }

  async #open(timeoutMs: number): Promise<Socket> {
    if (this.#socket && !this.#socket.destroyed && this.#failure === undefined) return this.#socket;
    this.close();
    this.#failure = undefined;
    const url = this.#url;
    const port = Number(url.port || (url.protocol === "https:" ? 443 : 80));
    const host = url.hostname.replace(/^\[|\]$/g, "");
    const socket: Socket = url.protocol === "https:" ? tlsConnect({ host, port, servername: host }) : tcpConnect({ host, port });
    this.#socket = socket;
    socket.setNoDelay?.(true);
    // Events of a connection given up (closed after a timeout) no longer concern this one.
    socket.on("data", (chunk: Uint8Array) => {
      if (this.#socket !== socket) return;
      const joined = new Uint8Array(this.#buffer.byteLength + chunk.byteLength);
      joined.set(this.#buffer, 0);
      joined.set(chunk, this.#buffer.byteLength);
      this.#buffer = joined;
      this.#wake();
    });
    socket.on("error", (error) => {
      if (this.#socket !== socket) return;
      this.#failure = error;
      this.#wake();
    });
    socket.on("close", () => {
      if (this.#socket !== socket) return;
      this.#failure ??= new Error("the service closed the connection");
      this.#wake();
    });
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`could not connect within ${timeoutMs} ms`)), timeoutMs);
      socket.once(url.protocol === "https:" ? "secureConnect" : "connect", () => (clearTimeout(timer), resolve()));
      socket.once("error", (error) => (clearTimeout(timer), reject(error)));
    }).catch((error) => {
      this.close();
      throw error;
    });
    return socket;
  }

  #wake(): void {
    const waiter = this.#waiter;
    this.#waiter = undefined;
    waiter?.();
  }

  /** Waits for more bytes (or the connection's end) until the deadline. */
  async #more(deadline: number): Promise<void> {
    if (this.#failure) throw this.#failure;
    const left = deadline - Date.now();
    if (left <= 0) throw Object.assign(new Error("no answer in time"), { name: "TimeoutError" });
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, left);
      this.#waiter = () => (clearTimeout(timer), resolve());
    });
  }

  async #readAnswer(deadline: number): Promise<HttpAnswer> {
    // Status line and headers; interim answers (100 Continue, 103 Early Hints) are skipped.
    let status: number;
    let headers: Map<string, string>;
    let version: string;
    do {
      let end: number;
      while ((end = indexOf(this.#buffer, "\r\n\r\n")) < 0) await this.#more(deadline);
      const lines = decoder.decode(this.#buffer.subarray(0, end)).split("\r\n");
      const statusLine = /^HTTP\/(1\.[01]) (\d{3})/.exec(lines[0] ?? "");
      if (!statusLine) throw new Error(`the service answered something that is not HTTP/1.1: ${JSON.stringify(lines[0]?.slice(0, 80))}`);
      version = statusLine[1]!;
      status = Number(statusLine[2]);
      headers = new Map(lines.slice(1).map((l) => [l.slice(0, l.indexOf(":")).trim().toLowerCase(), l.slice(l.indexOf(":") + 1).trim()]));
      this.#buffer = this.#buffer.subarray(end + 4);
    } while (status >= 100 && status < 200);
    let body: Uint8Array;
    if (/\bchunked\b/i.test(headers.get("transfer-encoding") ?? "")) {
      body = await this.#chunked(deadline);
    } else if (headers.has("content-length")) {
      const length = Number(headers.get("content-length"));
      while (this.#buffer.byteLength < length) await this.#more(deadline);
      body = this.#buffer.subarray(0, length);
      this.#buffer = this.#buffer.subarray(length);
    } else if (status === 204 || status === 304) {
      body = new Uint8Array(0);
    } else {
      // Delimited by the connection's end (a timeout ends the request, as anywhere else).
      while (this.#failure === undefined) {
        try {
          await this.#more(deadline);
        } catch (error) {
          if (this.#failure) break; // the connection's end: the body is complete
          throw error;
        }
      }
      body = this.#buffer;
      this.close();
    }
    // HTTP/1.0 closes unless told to keep alive; 1.1 keeps alive unless told to close.
    const connection = headers.get("connection") ?? "";
    if (/\bclose\b/i.test(connection) || (version === "1.0" && !/\bkeep-alive\b/i.test(connection))) this.close();
    const location = headers.get("location");
    return { status, body: decoder.decode(body.subarray(0, BODY_LIMIT)), ...(location ? { location } : {}) };
  }

  async #chunked(deadline: number): Promise<Uint8Array> {
    const parts: Uint8Array[] = [];
    for (;;) {
      let line: number;
      while ((line = indexOf(this.#buffer, "\r\n")) < 0) await this.#more(deadline);
      const size = parseInt(decoder.decode(this.#buffer.subarray(0, line)), 16);
      if (!Number.isFinite(size)) throw new Error("the service sent a malformed chunked body");
      while (this.#buffer.byteLength < line + 2 + size + 2) await this.#more(deadline);
      if (size === 0) {
        // The trailer section ends with an empty line.
        let trailerEnd: number;
        while ((trailerEnd = indexOf(this.#buffer, "\r\n\r\n", line)) < 0 && !(this.#buffer[line + 2] === 13 && this.#buffer[line + 3] === 10)) await this.#more(deadline);
        this.#buffer = this.#buffer.subarray(trailerEnd >= 0 ? trailerEnd + 4 : line + 4);
        break;
      }
      parts.push(this.#buffer.slice(line + 2, line + 2 + size));
      this.#buffer = this.#buffer.subarray(line + 2 + size + 2);
    }
    const total = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0));
    let at = 0;
    for (const part of parts) (total.set(part, at), (at += part.byteLength));
    return total;
  }
}

function indexOf(bytes: Uint8Array, text: string, from = 0): number {
  const needle = encoder.encode(text);
  outer: for (let i = from; i <= bytes.byteLength - needle.byteLength; i++) {
    for (let j = 0; j < needle.byteLength; j++) if (bytes[i + j] !== needle[j]) continue outer;
    return i;
  }
  return -1;
}
