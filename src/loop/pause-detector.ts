/**
 * Tells when this process itself was frozen (SIGSTOP, a suspended VM) or its event loop blocked:
 * a 1 s timer stops ticking meanwhile. Time the process missed says nothing about its consumer,
 * so the stall watchdog starts its clock again instead of calling the consumer stalled: the fault
 * soak's paused processes were restarted as "stalled" the moment they were continued.
 */
export class PauseDetector {
  readonly #pauseMs: number;
  readonly #now: () => number;
  #lastTick: number;
  /** The longest gap seen since the last `takePause`, in ms (0: none over `pauseMs`). */
  #pausedMs = 0;
  #timer: ReturnType<typeof setInterval> | undefined;

  /** A gap of more than `pauseMs` between ticks is a pause. */
  constructor(pauseMs = 5000, now: () => number = Date.now) {
    this.#pauseMs = pauseMs;
    this.#now = now;
    this.#lastTick = now();
  }

  start(tickMs = 1000): this {
    this.#timer = setInterval(() => this.tick(), tickMs);
    (this.#timer as { unref?: () => void }).unref?.();
    return this;
  }

  stop(): void {
    clearInterval(this.#timer);
  }

  /** One tick of the timer (called by it; tests call it directly). */
  tick(): void {
    const now = this.#now();
    if (now - this.#lastTick > this.#pauseMs) this.#pausedMs = Math.max(this.#pausedMs, now - this.#lastTick);
    this.#lastTick = now;
  }

  /**
   * How long the process was paused since the last call, in ms (0: not paused): the longest gap
   * the timer saw, or one it has not seen yet (it has not ticked since the process came back).
   */
  takePause(): number {
    const now = this.#now();
    const unseen = now - this.#lastTick > this.#pauseMs ? now - this.#lastTick : 0;
    const paused = Math.max(this.#pausedMs, unseen);
    this.#pausedMs = 0;
    if (paused > 0) this.#lastTick = now;
    return paused;
  }
}
