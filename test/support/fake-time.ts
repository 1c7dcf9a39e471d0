/**
 * A clock that moves only when the code under test sleeps: waits, probes and polls end at once, and every moment
 * the code reads is the sum of the sleeps before it (no real time, no timing assertions).
 */
export interface FakeTime {
  readonly clock: { now(): Date };
  readonly sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  /** Moves the clock on by `ms` (as another party's wait would). */
  advance(ms: number): void;
  nowMs(): number;
}

export function fakeTime(startIso = '2026-12-02T00:00:00Z'): FakeTime {
  let nowMs = Date.parse(startIso);
  return {
    clock: { now: () => new Date(nowMs) },
    sleep: (ms, signal) => {
      if (signal?.aborted !== true) nowMs += Math.max(1, ms);
      return Promise.resolve();
    },
    advance: (ms) => {
      nowMs += ms;
    },
    nowMs: () => nowMs,
  };
}
