/**
 * A scoring service for http step tests and the bench: `GET|POST /score/:id` answers
 * `{ "id": id, "score": id * 2 }` after `latencyMs`. It records every call (id, order, the body
 * it got) and can fail on purpose: `failEvery` fails that share of calls with 503, `status`
 * overrides the answer per id, and `down` answers 503 to everything.
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

export interface ScoreServiceOptions {
  latencyMs?: number;
  /** 0..1: this share of calls (chosen by a counter, not at random) answer 503. */
  failShare?: number;
  /** A fixed status (and body) for these ids. */
  status?: Record<string, { code: number; body?: string }>;
  /** Ids whose first N calls answer 503, then succeed. */
  failFirst?: Record<string, number>;
}

export interface ScoreCall {
  id: string;
  method: string;
  body: string;
  headers: Record<string, string | string[] | undefined>;
  /** When the call arrived and when it was answered (ms, performance.now()). */
  at: number;
  done: number;
}

export interface ScoreService {
  url: string;
  calls: ScoreCall[];
  /** Calls per id. */
  countOf(id: string | number): number;
  /** The most calls in flight at once so far. */
  maxInFlight(): number;
  options: ScoreServiceOptions;
  /** Every call answers 503 while true. */
  down: boolean;
  close(): Promise<void>;
}

/** Starts the service on 127.0.0.1 (a free port). */
export async function startScoreService(options: ScoreServiceOptions = {}): Promise<ScoreService> {
  const calls: ScoreCall[] = [];
  const counts = new Map<string, number>();
  let inFlight = 0;
  let maxInFlight = 0;
  let served = 0;
  const service = { down: false } as ScoreService;
  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    inFlight++;
    maxInFlight = Math.max(maxInFlight, inFlight);
    const at = performance.now();
    let body = "";
    for await (const chunk of req) body += chunk;
    const id = decodeURIComponent(new URL(req.url ?? "/", "http://x").pathname.split("/").pop() ?? "");
    const n = (counts.get(id) ?? 0) + 1;
    counts.set(id, n);
    const o = service.options;
    if (o.latencyMs) await new Promise((r) => setTimeout(r, o.latencyMs));
    served++;
    let code = 200;
    let answer = JSON.stringify({ id: Number.isNaN(Number(id)) ? id : Number(id), score: Number(id) * 2 });
    const fixed = o.status?.[id];
    if (service.down) [code, answer] = [503, "service down"];
    else if (fixed) [code, answer] = [fixed.code, fixed.body ?? `status ${fixed.code}`];
    else if ((o.failFirst?.[id] ?? 0) >= n) [code, answer] = [503, "try again"];
    else if (o.failShare && served % Math.round(1 / o.failShare) === 0) [code, answer] = [503, "unlucky"];
    calls.push({ id, method: req.method ?? "", body, headers: req.headers, at, done: performance.now() });
    inFlight--;
    res.writeHead(code, { "content-type": code === 200 ? "application/json" : "text/plain" });
    res.end(answer);
  };
  const server = createServer((req, res) => void handle(req, res));
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  return Object.assign(service, {
    url: `http://127.0.0.1:${port}`,
    calls,
    options,
    countOf: (id: string | number) => counts.get(String(id)) ?? 0,
    maxInFlight: () => maxInFlight,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections?.();
        server.close(() => resolve());
      }),
  });
}
