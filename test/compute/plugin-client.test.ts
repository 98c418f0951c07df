/**
 * PluginClient against a plugin host in memory (a fake Worker): which calls the host holds, and
 * where they go when it dies. The real plugin hosts are in wasm.test.ts.
 */
import { describe, expect, test } from "bun:test";
import type { ComputeHost, WorkerLike } from "../../src/compute/host.ts";
import type { ToPluginHost } from "../../src/compute/plugin-protocol.ts";
import { PluginClient } from "../../src/compute/wasm-step.ts";

/** A plugin host that answers init at once and calls only when told to. */
class FakeHost implements WorkerLike {
  onmessage: ((event: MessageEvent) => void) | null = null;
  onerror: ((event: Event) => void) | null = null;
  readonly calls: Array<{ id: number; input: unknown }> = [];
  terminated = false;
  constructor() {
    setTimeout(() => this.#reply({ type: "hello" }), 0);
  }
  postMessage(message: unknown): void {
    const m = message as ToPluginHost;
    if (m.type === "init") setTimeout(() => this.#reply({ type: "ready", exports: ["transform"] }), 0);
    else this.calls.push({ id: m.id, input: m.input });
  }
  terminate(): void {
    this.terminated = true;
  }
  /** Answers the oldest call it holds with one output row per input row. */
  answer(): void {
    const call = this.calls.shift()!;
    const rows = (JSON.parse(call.input as string) as { rows: unknown[] }).rows;
    this.#reply({ type: "result", id: call.id, output: JSON.stringify({ results: rows.map((r) => [r]) }) });
  }
  die(): void {
    this.onerror?.({ message: "the plugin thread crashed" } as unknown as Event);
  }
  #reply(data: unknown): void {
    this.onmessage?.({ data } as MessageEvent);
  }
}

function client() {
  const hosts: FakeHost[] = [];
  const host = {
    createWorker: () => {
      const h = new FakeHost();
      hosts.push(h);
      return h;
    },
    log: () => {},
  } as unknown as ComputeHost;
  const plugin = new PluginClient(new Uint8Array(), { wasi: false, config: {}, allowedHosts: [], allowedPaths: {} }, "worker", host, {});
  return { plugin, hosts };
}

const settle = () => new Promise((resolve) => setTimeout(resolve, 5));
const idsOf = (host: FakeHost) => host.calls.map((c) => (JSON.parse(c.input as string) as { rows: Array<{ n: number }> }).rows[0]!.n);

describe("the WASM plugin client", () => {
  test("sends up to 8 calls before the first is answered; each answer lets one more go", async () => {
    const { plugin, hosts } = client();
    await plugin.ready();
    const outcomes = Array.from({ length: 10 }, (_, n) => plugin.call("transform", [{ n }], 2000));
    await settle();
    expect(idsOf(hosts[0]!)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    hosts[0]!.answer();
    await settle();
    expect(idsOf(hosts[0]!)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    for (let i = 0; i < 9; i++) hosts[0]!.answer(), await settle();
    expect((await Promise.all(outcomes)).map((o) => (o.ok ? (o.output as { results: unknown[] }).results : o.reason))).toEqual(
      Array.from({ length: 10 }, (_, n) => [[{ n }]]),
    );
    plugin.close();
  });

  test("a host that dies takes only the call it ran: the calls waiting in it go to the next host, in order", async () => {
    const { plugin, hosts } = client();
    await plugin.ready();
    const outcomes = [0, 1, 2].map((n) => plugin.call("transform", [{ n }], 2000));
    await settle();
    expect(idsOf(hosts[0]!)).toEqual([0, 1, 2]);
    hosts[0]!.die();
    await settle();
    expect(hosts).toHaveLength(2);
    expect(idsOf(hosts[1]!)).toEqual([1, 2]);
    hosts[1]!.answer();
    hosts[1]!.answer();
    const [first, ...rest] = await Promise.all(outcomes);
    expect(first).toMatchObject({ ok: false, reason: "plugin_crash" });
    expect(rest.map((o) => o.ok && (o.output as { results: unknown[] }).results)).toEqual([[[{ n: 1 }]], [[{ n: 2 }]]]);
    expect(plugin.counters).toMatchObject({ calls: 3, restarts: 1, failedCalls: 1 });
    plugin.close();
  });

  test("a call that times out takes only itself: the call waiting behind it in that host goes to the next one", async () => {
    const { plugin, hosts } = client();
    await plugin.ready();
    const stuck = plugin.call("transform", [{ n: 0 }], 50);
    const next = plugin.call("transform", [{ n: 1 }], 50);
    await settle();
    expect(idsOf(hosts[0]!)).toEqual([0, 1]);
    expect(await stuck).toMatchObject({ ok: false, reason: "timeout" });
    expect(hosts[0]!.terminated).toBe(true);
    await settle();
    expect(idsOf(hosts[1]!)).toEqual([1]);
    hosts[1]!.answer();
    expect(await next).toMatchObject({ ok: true });
    expect(plugin.counters).toMatchObject({ timeouts: 1, restarts: 1 });
    plugin.close();
  });
});
