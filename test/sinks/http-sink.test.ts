/**
 * The http sink against a local service: a checkpoint tried again after the service went away
 * neither sends nor dead-letters the rows it refused before; a redirect fails the stream naming
 * the url (the sink follows none); errors show the url as written, not its expanded secrets.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { FvError } from "../../src/errors.ts";
import type { OutboundRecord } from "../../src/kafka/port.ts";
import { FileStateStore } from "../../src/ops/file-state-store.ts";
import { withEnvironment } from "../../src/sinks/config.ts";
import type { HttpSinkConfig } from "../../src/sinks/config.ts";
import { HttpSink } from "../../src/sinks/http-sink.ts";
import type { SinkRow } from "../../src/sinks/sink.ts";
import { Deduplicator } from "../../src/state/deduplicator.ts";
import { nodeFiles } from "../../src/state/node-files.ts";
import type { Logger } from "../../src/logger.ts";

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

/** A service that answers each request with the next of `answers` (the last one repeats), recording the ids it got. */
async function service(answers: Array<{ status: number; headers?: Record<string, string> }>) {
  const requests: number[][] = [];
  const server: Server = createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      requests.push((JSON.parse(body) as Array<{ id: number }>).map((r) => r.id));
      const answer = answers[Math.min(requests.length - 1, answers.length - 1)]!;
      res.writeHead(answer.status, { "content-type": "text/plain", ...answer.headers }).end(`answer ${answer.status}`);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  cleanups.push(() => new Promise((r) => server.close(r)));
  return { url: `http://127.0.0.1:${(server.address() as { port: number }).port}`, requests };
}

function stateDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "fv-http-sink-"));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function sinkTo(url: string, extra: Partial<HttpSinkConfig> = {}, dir = stateDir(), log: Logger = () => {}) {
  const config: HttpSinkConfig = { kind: "http", url, method: "POST", headers: {}, batch: 2, timeoutMs: 2000, id: "id", window: 1000, ...extra };
  const sink = new HttpSink(config, { pipeline: "p", dataset: "out", log, store: new FileStateStore(dir, nodeFiles()) });
  cleanups.push(() => sink.close());
  return sink;
}

const row = (id: number | null): SinkRow => ({ row: { id, v: 1 }, key: null, partition: 0, stageLabel: "stage 1", deadLetterTopic: "dlq" });

describe("http sink", () => {
  test("a checkpoint tried again after the service went away sends and dead-letters the rows it refused before once", async () => {
    // 422 for the first request (ids 1, 2), 503 for the second (3, 4): the write is tried again; then 200.
    const { url, requests } = await service([{ status: 422 }, { status: 503 }, { status: 200 }]);
    const sink = sinkTo(url);
    const rows = [row(null), row(1), row(2), row(3), row(4)];
    const dead: OutboundRecord[] = [];
    const deadLetter = async (records: OutboundRecord[]) => void dead.push(...records);
    const first = await sink.write(rows, [], deadLetter).catch((e: FvError) => e);
    expect((first as FvError).code).toBe("SINK_UNAVAILABLE");
    const again = await sink.write(rows, [], deadLetter);
    expect(requests).toEqual([[1, 2], [3, 4], [3, 4]]);
    expect(again.written).toBe(2);
    expect(again.refused.map((r) => r.row.row.id)).toEqual([null, 1, 2]);
    // Each refused row's dead letter once: the id-less one and the two the 422 refused.
    expect(dead.map((d) => JSON.parse(d.value as string).id)).toEqual([null, 1, 2]);
  });

  test("a request a run stopped while writing: its rows are dead-lettered as sink_in_doubt when they come again, not sent; in doubt until that checkpoint commits", async () => {
    const { url, requests } = await service([{ status: 200 }]);
    const dir = stateDir();
    // The run before: ids 1 and 2 delivered (settled), 3 and 4 written ahead and never handed on.
    const before = new Deduplicator(new FileStateStore(dir, nodeFiles()), "p/out/p0");
    await before.open();
    before.rememberNow(["1", "2"]);
    before.settleNow();
    before.rememberNow(["3", "4"]);
    const logs: string[] = [];
    const sink = sinkTo(url, {}, dir, (level, message) => void logs.push(`${level} ${message}`));
    const dead: OutboundRecord[] = [];
    const written = await sink.write([row(1), row(2), row(3), row(4), row(5), row(6)], [], async (r) => void dead.push(...r));
    expect(requests).toEqual([[5, 6]]);
    expect(written.written).toBe(2);
    expect(written.duplicates).toBe(2);
    expect(written.refused.map((r) => [r.row.row.id, r.reason])).toEqual([[3, "sink_in_doubt"], [4, "sink_in_doubt"]]);
    expect(dead.map((d) => [JSON.parse(d.value as string).id, d.headers?.find(([k]) => k === "fv.error.reason")?.[1]])).toEqual([[3, "sink_in_doubt"], [4, "sink_in_doubt"]]);
    expect(logs.filter((l) => l.startsWith("warn"))).toEqual([
      `warn http sink "out" (POST ${url}): partition 0: a run stopped while writing a request of 2 rows, ids 3, 4; the service may or may not have them: they are not sent again, and are dead-lettered as sink_in_doubt when they come again`,
    ]);
    const reopened = async () => {
      const dedup = new Deduplicator(new FileStateStore(dir, nodeFiles()), "p/out/p0");
      await dedup.open();
      return dedup;
    };
    // Killed before the checkpoint commits (its dead letters may go with an aborted transaction): still in doubt.
    expect((await reopened()).inDoubt).toEqual(["3", "4"]);
    // Committed: resolved. The request this run handed on was settled, so nothing is in doubt.
    await sink.committed();
    expect((await reopened()).inDoubt).toEqual([]);
    // Rows in doubt that come again after that are duplicates, not dead-lettered again.
    const again = await sink.write([row(3), row(4)], [], async (r) => void dead.push(...r));
    expect([again.duplicates, again.refused.length, dead.length]).toEqual([2, 0, 2]);
  });

  test("a redirect fails the stream, naming the url to fix; no row is dead-lettered", async () => {
    const { url } = await service([{ status: 301, headers: { location: "https://elsewhere.example/in?token=s3cr3t" } }]);
    const dead: OutboundRecord[] = [];
    const failure = await sinkTo(url).write([row(1)], [], async (r) => void dead.push(...r)).catch((e: FvError) => e);
    expect((failure as FvError).code).toBe("SINK_FAILED");
    expect((failure as FvError).message).toContain("answered HTTP 301 to https://elsewhere.example/in: the sink does not follow redirects");
    expect((failure as FvError).message).not.toContain("s3cr3t");
    expect(dead).toEqual([]);
  });

  test("errors and dead letters show the url as written: a token from the environment stays out of them", async () => {
    const { url } = await service([{ status: 500 }]);
    const config = withEnvironment<HttpSinkConfig>({ kind: "http", url: `${url}/hook/\${HOOK_TOKEN}`, method: "POST", headers: {}, batch: 2, timeoutMs: 2000, id: "id", window: 1000 }, "out", { HOOK_TOKEN: "s3cr3t" });
    expect(config.url).toBe(`${url}/hook/s3cr3t`);
    const failure = await sinkTo(config.url, { shownUrl: config.shownUrl! }).write([row(1)], [], async () => {}).catch((e: FvError) => e);
    expect((failure as FvError).message).toContain(`POST ${url}/hook/\${HOOK_TOKEN}) answered HTTP 500`);
    expect((failure as FvError).message).not.toContain("s3cr3t");
  });
});
