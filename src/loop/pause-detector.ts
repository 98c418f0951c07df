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
  #paused = false;
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
    if (now - this.#lastTick > this.#pauseMs) this.#paused = true;
    this.#lastTick = now;
  }

  /**
   * Whether the process was paused since the last call: a gap the timer saw, or one it has not
   * seen yet (it has not ticked since the process came back).
   */
  takePause(): boolean {
    const paused = this.#paused || this.#now() - this.#lastTick > this.#pauseMs;
    this.#paused = false;
    if (paused) this.#lastTick = this.#now();
    return paused;
  }
}
