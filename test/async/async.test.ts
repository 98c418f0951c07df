import { describe, expect, test } from "bun:test";
import { backoffMs, deadline, delay, SerialQueue } from "../../src/async.ts";

describe("delay", () => {
  test("resolves after the time has passed", async () => {
    const started = performance.now();
    await delay(30);
    expect(performance.now() - started).toBeGreaterThanOrEqual(25);
  });

  test("rejects with the signal's reason as soon as it aborts", async () => {
    const stop = new AbortController();
    const started = performance.now();
    const waiting = delay(10_000, stop.signal);
    stop.abort(new Error("stopped"));
    await expect(waiting).rejects.toThrow("stopped");
    expect(performance.now() - started).toBeLessThan(1_000);
  });

  test("rejects at once when the signal has already aborted", async () => {
    await expect(delay(10_000, AbortSignal.abort(new Error("already")))).rejects.toThrow("already");
  });
});

describe("backoffMs", () => {
  test("doubles from the base per attempt and stops at the cap", () => {
    expect([1, 2, 3, 4, 5, 6, 7].map((attempt) => backoffMs(attempt, { firstMs: 100, maxMs: 5_000 }))).toEqual([100, 200, 400, 800, 1_600, 3_200, 5_000]);
  });
});

describe("deadline", () => {
  test("settles as the promise does when it is in time", async () => {
    expect(await deadline(Promise.resolve(7), 1_000, "late")).toBe(7);
    await expect(deadline(Promise.reject(new Error("own failure")), 1_000, "late")).rejects.toThrow("own failure");
  });

  test("rejects with the message when the promise is late", async () => {
    await expect(deadline(new Promise(() => {}), 20, "the answer took longer than 20 ms")).rejects.toThrow("the answer took longer than 20 ms");
  });
});

describe("SerialQueue", () => {
  test("runs tasks one at a time, in the order they were given", async () => {
    const queue = new SerialQueue();
    const events: string[] = [];
    const task = (name: string, ms: number) => async () => {
      events.push(`${name} start`);
      await delay(ms);
      events.push(`${name} end`);
      return name;
    };
    expect(await Promise.all([queue.run(task("a", 30)), queue.run(task("b", 1)), queue.run(task("c", 10))])).toEqual(["a", "b", "c"]);
    expect(events).toEqual(["a start", "a end", "b start", "b end", "c start", "c end"]);
  });

  test("a failed task rejects its own run only; the tasks after it still run", async () => {
    const queue = new SerialQueue();
    const failed = queue.run(() => Promise.reject(new Error("first failed")));
    const next = queue.run(() => Promise.resolve("second ran"));
    await expect(failed).rejects.toThrow("first failed");
    expect(await next).toBe("second ran");
  });
});
