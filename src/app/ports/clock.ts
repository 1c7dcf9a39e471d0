/** The time of day, read by the use-cases only through this port (docs/architecture.md). */
export interface Clock {
  now(): Date;
}

/** A timer set through `Timers`; cancelling one that already fired does nothing. */
export interface TimerHandle {
  cancel(): void;
}

/** How a timer treats the process: `unref` lets it exit while the timer is pending (default: it keeps it alive). */
export interface TimerOptions {
  readonly unref?: boolean;
}

/**
 * Waiting, through the injected port like the clock, so that a test's fake moves time instead of waiting for it.
 * Function properties (not methods): `sleep` is handed on alone, e.g. as a lifecycle's `sleep`.
 */
export interface Timers {
  /** Resolves after `ms`, or sooner when `signal` aborts; never rejects (an abort ends the wait, it is no error). */
  readonly sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  /** Calls `fn` once after `ms` unless cancelled first. */
  readonly setTimer: (ms: number, fn: () => void, options?: TimerOptions) => TimerHandle;
  /** Calls `fn` every `ms` until cancelled. */
  readonly setInterval: (ms: number, fn: () => void, options?: TimerOptions) => TimerHandle;
}

/**
 * Sleeps `ms`, or less when the signal aborts first; never rejects. The real wait behind `systemClock.sleep`, also used alone by the engine adapters' polls. Kept here, beside the real
 * clock, because `src/core` is pure (no timers).
 */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted === true) return resolve();
    const timer = setTimeout(done, ms);
    function done(): void {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}

/** The real clock and timers: the one implementation the composition roots wire in. */
export const systemClock: Clock & Timers = {
  now: () => new Date(),
  sleep,
  setTimer: (ms, fn, options) => {
    const timer = setTimeout(fn, ms);
    if (options?.unref === true) timer.unref();
    return { cancel: () => clearTimeout(timer) };
  },
  setInterval: (ms, fn, options) => {
    const timer = setInterval(fn, ms);
    if (options?.unref === true) timer.unref();
    return { cancel: () => clearInterval(timer) };
  },
};
