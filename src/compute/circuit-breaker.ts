/**
 * A circuit breaker for calls to a service: after `failures` failed calls in a row it opens and
 * refuses calls for `cooldownMs`; then one probe call goes (half-open). The probe's success
 * closes it; its failure opens it for another cool-down. Any answer from the service that is not
 * a failure (see HttpStep: 2xx, and 4xx other than 429) closes the count.
 *
 * States and their transitions:
 *   closed    → open       `failures` consecutive failures
 *   open      → half-open  the cool-down is over (a timer, so an idle stream shows it too); the
 *                          next caller becomes the probe
 *   half-open → closed     the probe succeeded
 *   half-open → open       the probe failed
 */
export type BreakerState = "closed" | "open" | "half-open";

/** What `admit` tells a caller: call now, or the breaker is open (with when it may try again). */
export type Admission = { call: true } | { call: false; retryAt: number };

export interface BreakerOptions {
  failures: number;
  cooldownMs: number;
  /** The clock, in ms (tests pass their own). */
  now?: () => number;
  /** Told every change of state. */
  onChange?: (state: BreakerState) => void;
}

/**
 * @example
 * const breaker = new CircuitBreaker({ failures: 5, cooldownMs: 10_000 });
 * const admission = await breaker.admit();
 * if (admission.call) { const ok = await callService(); ok ? breaker.succeeded() : breaker.failed(); }
 */
export class CircuitBreaker {
  readonly #options: BreakerOptions;
  readonly #now: () => number;
  #state: BreakerState = "closed";
  #consecutive = 0;
  #openUntil = 0;
  /** While half-open: callers other than the probe wait for its outcome. */
  #probe: { done: Promise<void>; settle: () => void } | undefined;
  #timer: ReturnType<typeof setTimeout> | undefined;
  /** Opened this many times. */
  opened = 0;

  constructor(options: BreakerOptions) {
    this.#options = options;
    this.#now = options.now ?? Date.now;
  }

  get state(): BreakerState {
    return this.#state;
  }

  /** When an open breaker lets its probe through (ms, on the breaker's clock). */
  get openUntil(): number {
    return this.#openUntil;
  }

  /**
   * May a call go now? Closed: yes. Open within its cool-down: no, with when to try again.
   * Open past it: yes, and this caller is the probe. Half-open: waits for the probe's outcome,
   * then answers again.
   */
  async admit(): Promise<Admission> {
    for (;;) {
      if (this.#state === "closed") return { call: true };
      if (this.#state === "open") {
        if (this.#now() < this.#openUntil) return { call: false, retryAt: this.#openUntil };
        this.#halfOpen();
      }
      if (!this.#probe) {
        let settle!: () => void;
        const done = new Promise<void>((resolve) => (settle = resolve));
        this.#probe = { done, settle };
        return { call: true };
      }
      await this.#probe.done;
    }
  }

  /** Stops the cool-down timer (the step is closing). */
  dispose(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  /** The service answered (a success, or a refusal that is the row's fault). */
  succeeded(): void {
    this.#consecutive = 0;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#state !== "closed") this.#to("closed");
    this.#endProbe();
  }

  /** A call failed: a timeout, a connection error, 5xx or 429. */
  failed(): void {
    this.#consecutive++;
    if (this.#state === "half-open" || (this.#state === "closed" && this.#consecutive >= this.#options.failures)) {
      this.#openUntil = this.#now() + this.#options.cooldownMs;
      this.opened++;
      this.#to("open");
      clearTimeout(this.#timer);
      this.#timer = setTimeout(() => this.#halfOpen(), this.#options.cooldownMs);
      // Not what keeps a process alive (Node and Bun; Deno's timers are numbers).
      (this.#timer as { unref?: () => void }).unref?.();
    }
    this.#endProbe();
  }

  /** The cool-down is over (its timer, or a caller that came first: then the timer goes too). */
  #halfOpen(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#state === "open") this.#to("half-open");
  }

  /** The probe's call was given up without an answer (the step is closing): the next caller probes instead. */
  abandoned(): void {
    this.#endProbe();
  }

  #endProbe(): void {
    const probe = this.#probe;
    this.#probe = undefined;
    probe?.settle();
  }

  #to(state: BreakerState): void {
    this.#state = state;
    this.#options.onChange?.(state);
  }
}
