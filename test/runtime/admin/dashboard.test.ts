/**
 * The dashboard's script, run against a small stand-in DOM: it must render a status (counters,
 * partitions, the stage graph) without throwing, and keep polling after a failed fetch.
 */
import { expect, test } from "bun:test";
import { DASHBOARD_HTML } from "../../../runtime/admin/dashboard.ts";

class FakeNode {
  children: FakeNode[] = [];
  attributes: Record<string, string> = {};
  textContent = "";
  className = "";
  hidden = false;
  colSpan = 1;
  title = "";
  style: Record<string, string> = {};
  constructor(readonly tag: string) {}
  get firstChild(): FakeNode | null {
    return this.children[0] ?? null;
  }
  appendChild(child: FakeNode) {
    this.children.push(child);
    return child;
  }
  removeChild(child: FakeNode) {
    this.children = this.children.filter((c) => c !== child);
    return child;
  }
  setAttribute(name: string, value: string) {
    this.attributes[name] = value;
  }
  value = "";
  listeners: Record<string, Array<(event: unknown) => void>> = {};
  addEventListener(type: string, listener: (event: unknown) => void) {
    (this.listeners[type] ??= []).push(listener);
  }
  get options(): FakeNode[] {
    return this.children;
  }
  /** Every text below this node, depth first. */
  texts(): string[] {
    return [this.textContent, ...this.children.flatMap((c) => c.texts())].filter(Boolean);
  }
  find(tag: string): FakeNode[] {
    return [...(this.tag === tag ? [this] : []), ...this.children.flatMap((c) => c.find(tag))];
  }
}

/** An EventSource as the page opens one: its URL, and the listeners a test fires events at. */
class FakeEventSource {
  static opened: FakeEventSource[] = [];
  listeners: Record<string, Array<(event: { data: string }) => void>> = {};
  closed = false;
  constructor(readonly url: string) {
    FakeEventSource.opened.push(this);
  }
  addEventListener(type: string, listener: (event: { data: string }) => void) {
    (this.listeners[type] ??= []).push(listener);
  }
  fire(type: string, data: unknown) {
    for (const l of this.listeners[type] ?? []) l({ data: JSON.stringify(data) });
  }
  close() {
    this.closed = true;
  }
}

function runDashboard(responses: Array<() => Promise<unknown>>, search = "", state: unknown = { stages: [] }) {
  const script = /<script>([\s\S]*)<\/script>/.exec(DASHBOARD_HTML)![1]!;
  const byId = new Map<string, FakeNode>();
  const document = {
    title: "",
    getElementById: (id: string) => byId.get(id) ?? byId.set(id, new FakeNode(`#${id}`)).get(id)!,
    createElement: (tag: string) => new FakeNode(tag),
    createElementNS: (_ns: string, tag: string) => new FakeNode(tag),
  };
  const timers: Array<() => void> = [];
  let call = 0;
  const requests: Array<{ url: string; init: RequestInit }> = [];
  const stateRequests: Array<{ url: string; init: RequestInit }> = [];
  const fetch = (url: string, init: RequestInit) =>
    url === "state"
      ? (stateRequests.push({ url, init }), Promise.resolve({ ok: true, status: 200, json: async () => state }))
      : (requests.push({ url, init }), responses[Math.min(call++, responses.length - 1)]!());
  FakeEventSource.opened = [];
  new Function("document", "fetch", "setTimeout", "location", "EventSource", script)(document, fetch, (fn: () => void) => timers.push(fn), { search }, FakeEventSource);
  return { byId, document, timers, requests, stateRequests };
}

const flush = () => new Promise((r) => setTimeout(r, 10));
const STATUS = {
  record: {
    id: "b1", pipeline: "demo", kind: "stream", status: "RUNNING", startedAt: new Date(Date.now() - 90_000).toISOString(),
    metrics: { consumed: 2000, emitted: 900, dropped: 1000, poison: 100, poisonByReason: { invalid_json: 100 }, deadLettered: 100, commits: 4, consumers: 2, partitions: [], recordsPerSecond: 50 },
    stages: [
      { index: 0, inputs: ["trades"], output: "large", steps: ["filter", "applyExpression", "select"] },
      { index: 1, inputs: ["large", "quotes"], output: "joined", steps: [] },
    ],
  },
  partitions: [{ topic: "trades", partition: 1, offset: 900, lag: 3 }, { topic: "trades", partition: 0, offset: 1100, lag: 7, stateBytes: 2048, state: "running" }],
  stages: [{ index: 0, consumed: 2000, emitted: 900, poison: 100 }],
};

test("the dashboard renders counters, partitions and the stage graph from /status", async () => {
  const ok = async () => ({ ok: true, status: 200, json: async () => STATUS });
  const { byId, document, timers } = runDashboard([ok]);
  await flush();
  expect(byId.get("conn")!.textContent).toBe("live");
  expect(document.title).toBe("demo · RUNNING");
  expect(byId.get("consumed")!.textContent).toBe("2,000");
  expect(byId.get("poison")!.textContent).toBe("100");
  expect(byId.get("lag")!.textContent).toBe("10");
  expect(byId.get("owned")!.textContent).toBe("2");
  const rows = byId.get("partitions")!.find("tr").map((tr) => tr.texts());
  expect(rows).toEqual([["trades", "0", "1,100", "7", "2.0 KiB", "running"], ["trades", "1", "900", "3", "–"]]);
  const graph = byId.get("graph")!.texts();
  for (const label of ["trades", "large", "quotes", "joined", "stage 1", "1. filter", "3. select", "stage 2", "1. pass-through", "in 2,000 · out 900 · poison 100"]) {
    expect(graph).toContain(label);
  }
  // Datasets and stages are boxes, joined by arrows: 2 + 1 + 1 + 1 edges.
  expect(byId.get("graph")!.find("rect").length).toBe(6);
  expect(byId.get("graph")!.find("path").filter((p) => p.attributes.class === "edge").length).toBe(5);
  expect(timers.length).toBe(1); // the next poll is scheduled
});

test("a partition restoring its state shows a progress bar: records read of the changelog's end, the rate and an ETA", async () => {
  const restoring = {
    ...STATUS,
    partitions: [{ topic: "trades", partition: 0, state: "restoring", restore: { read: 450_000, total: 1_000_000, fromStore: 0, rate: 150_000, etaSeconds: 4 } }],
  };
  const { byId } = runDashboard([async () => ({ ok: true, status: 200, json: async () => restoring })]);
  await flush();
  const bar = byId.get("partitions")!.find("div").find((d) => d.className === "bar")!;
  expect(bar.find("span")[0]!.style.width).toBe("45%");
  expect(bar.texts()).toContain("restoring 45% · 450.0k / 1.0M · 150.0k/s · 4 s left");
});

test("the dashboard says it is disconnected and keeps polling when /status fails", async () => {
  const { byId, timers } = runDashboard([async () => Promise.reject(new Error("connection refused"))]);
  await flush();
  expect(byId.get("conn")!.textContent).toBe("disconnected (connection refused), retrying");
  expect(timers.length).toBe(1);
});

test("opened as /?token=…, the dashboard sends the token as a bearer token on its polls", async () => {
  const ok = async () => ({ ok: true, status: 200, json: async () => STATUS });
  const { requests } = runDashboard([ok], "?token=s3cret");
  await flush();
  expect(requests[0]!.url).toBe("status");
  expect(requests[0]!.init.headers).toEqual({ authorization: "Bearer s3cret" });
  const plain = runDashboard([ok]);
  await flush();
  expect(plain.requests[0]!.init.headers).toEqual({});
});

test("the state panel lists the readable stages, follows a key through its watch stream, and shows each value", async () => {
  const ok = async () => ({ ok: true, status: 200, json: async () => STATUS });
  const state = {
    stages: [
      { stage: 1, op: "windowedAggregate", keyColumns: ["sym"], queryable: true },
      { stage: 2, op: "streamJoin", keyColumns: ["id"], queryable: false },
    ],
  };
  const { document, stateRequests } = runDashboard([ok], "?token=s3cret", state);
  // Every element by id, made on first use (the page's script did not touch the key input yet).
  const byId = { get: (id: string) => document.getElementById(id) as FakeNode | undefined };
  await flush();
  expect(stateRequests[0]!.init.headers).toEqual({ authorization: "Bearer s3cret" });
  expect(byId.get("state-panel")!.hidden).toBe(false);
  expect(byId.get("state-stage")!.children.map((o) => [o.value, o.textContent])).toEqual([["1", "stage 1 · windowedAggregate by sym"]]);
  byId.get("state-stage")!.value = "1";
  byId.get("state-key")!.value = " AAPL ";
  for (const submit of byId.get("state-form")!.listeners.submit!) submit({ preventDefault: () => {} });
  const watch = FakeEventSource.opened[0]!;
  expect(watch.url).toBe("state/1/keys/AAPL/watch?token=s3cret");
  watch.fire("value", { windows: [{ windowStart: 0, windowEnd: 60000, sym: "AAPL", n: 3 }], partition: 2, position: 41, owner: { admin: "http://b:8686" }, stale: false });
  expect(JSON.parse(byId.get("state-value")!.textContent)).toEqual([{ windowStart: 0, windowEnd: 60000, sym: "AAPL", n: 3 }]);
  expect(byId.get("state-meta")!.textContent).toContain("partition 2 · position 41 · from http://b:8686");
  watch.fire("value", { value: { sym: "AAPL", last: [1, 2] }, partition: 2, position: 42, owner: { admin: "http://b:8686" }, stale: true });
  expect(JSON.parse(byId.get("state-value")!.textContent)).toEqual({ sym: "AAPL", last: [1, 2] });
  expect(byId.get("state-meta")!.textContent).toContain("stale");
  // Another key: the first stream is closed.
  byId.get("state-key")!.value = "MSFT";
  for (const submit of byId.get("state-form")!.listeners.submit!) submit({ preventDefault: () => {} });
  expect(watch.closed).toBe(true);
  expect(FakeEventSource.opened[1]!.url).toBe("state/1/keys/MSFT/watch?token=s3cret");
});

test("a pipeline without readable state shows no state panel", async () => {
  const ok = async () => ({ ok: true, status: 200, json: async () => STATUS });
  const { byId } = runDashboard([ok]);
  await flush();
  expect(byId.get("state-panel")!.hidden).toBe(true);
});
