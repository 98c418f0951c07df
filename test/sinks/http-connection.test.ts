import { afterEach, describe, expect, test } from "bun:test";
import { createServer, type Server } from "node:http";
import { createServer as createTcpServer, type Server as TcpServer } from "node:net";
import { HttpConnection } from "../../src/sinks/http-connection.ts";

const servers: Array<Server | TcpServer> = [];
afterEach(async () => {
  for (const server of servers.splice(0)) await new Promise((r) => server.close(r));
});

async function listen(server: Server | TcpServer): Promise<string> {
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(server.address() as { port: number }).port}`;
}

const body = (text: string) => new TextEncoder().encode(text);

describe("HttpConnection", () => {
  test("sends method, path, headers and body; reads content-length and chunked answers; keeps one connection", async () => {
    const seen: Array<{ method?: string; url?: string; type?: string; body: string; socket: unknown }> = [];
    const url = await listen(createServer((req, res) => {
      let text = "";
      req.on("data", (c) => (text += c));
      req.on("end", () => {
        seen.push({ method: req.method, url: req.url, type: req.headers["content-type"], body: text, socket: req.socket });
        if (req.url?.includes("chunked")) {
          res.writeHead(201, { "transfer-encoding": "chunked" });
          res.write("part one, ");
          res.end("part two");
        } else {
          res.writeHead(200, { "content-length": "2" }).end("ok");
        }
      });
    }));
    const connection = new HttpConnection(`${url}/in?x=1`);
    const order: string[] = [];
    const first = await connection.request("POST", { "content-type": "application/json" }, body('[{"id":1}]'), 2000, async () => void order.push("before write"));
    expect(first).toEqual({ status: 200, body: "ok" });
    expect(order).toEqual(["before write"]);
    const chunked = new HttpConnection(`${url}/chunked`);
    expect(await chunked.request("PUT", {}, body("x"), 2000, async () => {})).toEqual({ status: 201, body: "part one, part two" });
    expect(await connection.request("POST", {}, body("[]"), 2000, async () => {})).toEqual({ status: 200, body: "ok" });
    expect(seen.map((s) => [s.method, s.url, s.body])).toEqual([["POST", "/in?x=1", '[{"id":1}]'], ["PUT", "/chunked", "x"], ["POST", "/in?x=1", "[]"]]);
    expect(seen[0]!.type).toBe("application/json");
    // Keep-alive: the first and third request came over the same connection.
    expect(seen[0]!.socket).toBe(seen[2]!.socket);
    connection.close();
    chunked.close();
  });

  test("no answer in time fails as a timeout, and the next request opens a new connection", async () => {
    let calls = 0;
    const url = await listen(createServer((req, res) => {
      req.resume();
      if (++calls === 1) return; // never answers
      req.on("end", () => res.writeHead(204).end());
    }));
    const connection = new HttpConnection(url);
    const failure = await connection.request("POST", {}, body("a"), 200, async () => {}).catch((e: Error) => e);
    expect((failure as Error).name).toBe("TimeoutError");
    expect(await connection.request("POST", {}, body("b"), 2000, async () => {})).toEqual({ status: 204, body: "" });
    connection.close();
  });

  test("a service that cuts the connection, and one that is not there, fail the request; nothing is written when connecting fails", async () => {
    const url = await listen(createTcpServer((socket) => socket.once("data", () => socket.destroy())));
    const connection = new HttpConnection(url);
    await expect(connection.request("POST", {}, body("a"), 2000, async () => {})).rejects.toThrow();
    connection.close();
    const nobody = new HttpConnection("http://127.0.0.1:1");
    let wrote = false;
    await expect(nobody.request("POST", {}, body("a"), 2000, async () => void (wrote = true))).rejects.toThrow(/ECONNREFUSED|connect/);
    expect(wrote).toBe(false);
  });
});

describe("HttpConnection, answers of other shapes", () => {
  /** A TCP service that answers every request with `answer` (raw bytes), then maybe closes. */
  async function raw(answer: string, close: boolean) {
    return await listen(createTcpServer((socket) => socket.on("data", () => (close ? socket.end(answer) : socket.write(answer)))));
  }

  test("interim 1xx answers are skipped; an HTTP/1.0 body ends with the connection; one that never ends times out", async () => {
    const interim = new HttpConnection(await raw("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\ndone", false));
    expect(await interim.request("POST", {}, body("a"), 2000, () => {})).toEqual({ status: 200, body: "done" });
    interim.close();
    const old = new HttpConnection(await raw("HTTP/1.0 200 OK\r\n\r\nuntil the end", true));
    expect(await old.request("POST", {}, body("a"), 2000, () => {})).toEqual({ status: 200, body: "until the end" });
    const endless = new HttpConnection(await raw("HTTP/1.1 200 OK\r\n\r\nand more", false));
    const failure = await endless.request("POST", {}, body("a"), 300, () => {}).catch((e: Error) => e);
    expect((failure as Error).name).toBe("TimeoutError");
  });
});
