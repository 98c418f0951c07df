/**
 * The pure-JS client's delivery timeout: its idempotent producer retries a request without end,
 * so a send to brokers that never answer would wait for ever (a run that did not stop after
 * SIGTERM, once, in a fresh-clone npm test). The adapter gives the send up after the timeout.
 * A socket that accepts and never answers stands for such a broker.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createServer, type Server, type Socket } from "node:net";
import { FvError, recoveryOf } from "../../src/errors.ts";
import { PlatformaticProducer } from "../../src/kafka/platformatic/producer.ts";

let server: Server;
const sockets: Socket[] = [];
let port = 0;

beforeAll(async () => {
  server = createServer((socket) => void sockets.push(socket));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  port = (server.address() as { port: number }).port;
});

afterAll(async () => {
  for (const s of sockets) s.destroy();
  await new Promise((resolve) => server.close(resolve));
});

describe("a send no broker acknowledges", () => {
  test("fails after the delivery timeout as retryable, marked so that it is not retried on the same producer", async () => {
    const producer = new PlatformaticProducer([`127.0.0.1:${port}`], "fv-test-delivery", 1500);
    const started = performance.now();
    const error = await producer.send([{ topic: "t", key: "k", value: "v" }]).then(() => undefined, (e: unknown) => e);
    const took = performance.now() - started;
    void producer.close().catch(() => {});
    expect(error).toBeInstanceOf(FvError);
    expect((error as FvError).code).toBe("KAFKA_RETRYABLE");
    expect(recoveryOf(error)).toBe("retryable");
    expect((error as FvError).context.deliveryTimedOut).toBe(true);
    expect((error as FvError).message).toContain("did not acknowledge 1 record(s) within 1500 ms");
    // The socket was reached (the library did try), and the timeout, not a connection error, ended it.
    expect(sockets.length).toBeGreaterThan(0);
    expect(took).toBeGreaterThanOrEqual(1400);
    expect(took).toBeLessThan(10_000);
  }, 20_000);
});
