/** PauseDetector: a frozen process is told apart from a stalled consumer (fault soak, SIGSTOP). */
import { describe, expect, test } from "bun:test";
import { PauseDetector } from "../../src/loop/pause-detector.ts";

describe("PauseDetector", () => {
  test("ticks a second apart are no pause; a gap over the limit is one, reported once with its length", () => {
    let now = 0;
    const pauses = new PauseDetector(5000, () => now);
    for (let i = 0; i < 10; i++) {
      now += 1000;
      pauses.tick();
    }
    expect(pauses.takePause()).toBe(0);
    now += 20_000; // SIGSTOP for 20 s, then SIGCONT: the timer ticks late
    pauses.tick();
    now += 1000;
    pauses.tick();
    expect(pauses.takePause()).toBe(20_000);
    expect(pauses.takePause()).toBe(0);
  });

  test("a pause the timer has not ticked after yet is seen too (the loop can run before the timer does)", () => {
    let now = 0;
    const pauses = new PauseDetector(5000, () => now);
    now += 6000;
    expect(pauses.takePause()).toBe(6000);
    now += 1000;
    pauses.tick();
    expect(pauses.takePause()).toBe(0);
  });

  test("the real timer: a blocked event loop is a pause", async () => {
    const pauses = new PauseDetector(150).start(20);
    await new Promise((r) => setTimeout(r, 60));
    expect(pauses.takePause()).toBe(0);
    const until = Date.now() + 300;
    while (Date.now() < until) {
      // blocked: no timer runs
    }
    await new Promise((r) => setTimeout(r, 30));
    expect(pauses.takePause()).toBeGreaterThanOrEqual(280);
    pauses.stop();
  });
});
