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

/** Lets the fake host's replies (each a timer away) and the client's answers to them run. */
const settle = async (until: () => boolean = () => true) => {
  for (let i = 0; i < 200; i++) {
    await new Promise((resolve) => setTimeout(resolve, 5));
    if (until()) return;
  }
};
const idsOf = (host: FakeHost) => host.calls.map((c) => (JSON.parse(c.input as string) as { rows: Array<{ n: number }> }).rows[0]!.n);

/** A ready client with ten calls made: 0-7 sent to the host, 8 and 9 still queued in the client. */
async function tenCalls() {
  const { plugin, hosts } = client();
  await plugin.ready();
  const outcomes = Array.from({ length: 10 }, (_, n) => plugin.call("transform", [{ n }], 2000));
  await settle();
  expect(idsOf(hosts[0]!)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
  return { plugin, hosts, outcomes };
}

describe("the WASM plugin client", () => {
  test("sends up to 8 calls before the first is answered; each answer lets one more go", async () => {
    const { plugin, hosts, outcomes } = await tenCalls();
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
    const { plugin, hosts, outcomes } = await tenCalls();
    hosts[0]!.die();
    await settle(() => (hosts[1]?.calls.length ?? 0) === 8);
    expect(hosts).toHaveLength(2);
    // The calls that waited in the dead host go first, ahead of those that never left.
    expect(idsOf(hosts[1]!)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    for (let i = 0; i < 9; i++) hosts[1]!.answer(), await settle();
    const [first, ...rest] = await Promise.all(outcomes);
    expect(first).toMatchObject({ ok: false, reason: "plugin_crash" });
    expect(rest.map((o) => o.ok && (o.output as { results: unknown[] }).results)).toEqual(Array.from({ length: 9 }, (_, i) => [[{ n: i + 1 }]]));
    expect(plugin.counters).toMatchObject({ calls: 10, restarts: 1, failedCalls: 1 });
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
    await settle(() => (hosts[1]?.calls.length ?? 0) === 1);
    expect(idsOf(hosts[1]!)).toEqual([1]);
    hosts[1]!.answer();
    expect(await next).toMatchObject({ ok: true });
    expect(plugin.counters).toMatchObject({ timeouts: 1, restarts: 1 });
    plugin.close();
  });

  test("close fails every call not answered yet, in the host or queued, and no timer goes off after it", async () => {
    const { plugin, hosts } = client();
    await plugin.ready();
    const outcomes = Array.from({ length: 10 }, (_, n) => plugin.call("transform", [{ n }], 30).then(() => "answered", (error: Error) => error.message));
    await settle(() => hosts[0]!.calls.length === 8);
    plugin.close();
    expect(await Promise.all(outcomes)).toEqual(Array.from({ length: 10 }, () => "the plugin is closed"));
    expect(hosts[0]!.terminated).toBe(true);
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(plugin.counters).toMatchObject({ timeouts: 0, restarts: 0 });
    expect(hosts).toHaveLength(1);
  });
});
