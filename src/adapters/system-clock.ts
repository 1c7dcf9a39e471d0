import type { Clock } from '../app/ports/clock.js';

/**
 * Sleeps `ms`, or less when the signal aborts first; never rejects. The real wait behind `systemClock.sleep`, also
 * used alone by the engine adapters' polls.
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

/** The real clock and timers: the one implementation of the `Clock` port, wired in by the composition roots. */
export const systemClock: Clock = {
  now: () => new Date(),
  monotonicMs: () => performance.now(),
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
  nextTurn: () => new Promise((resolve) => setImmediate(resolve)),
};
