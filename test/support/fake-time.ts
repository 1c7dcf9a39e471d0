import type { Clock, TimerHandle, Timers } from '../../src/app/ports/clock.js';

/**
 * A clock that moves only when the code under test sleeps (or the test advances it): waits, probes and polls end at
 * once, timers fire when the time they wait for is reached, and every moment the code reads is the sum of the
 * moves before it (no real time, no timing assertions).
 */
export interface FakeTime {
  readonly clock: Clock & Timers;
  readonly sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  /** Moves the clock on by `ms` (as another party's wait would), firing the timers that come due, in order. */
  advance(ms: number): void;
  nowMs(): number;
  /** Timers set and not yet fired or cancelled. */
  pending(): number;
}

interface FakeTimer {
  dueMs: number;
  readonly everyMs: number | null;
  readonly fn: () => void;
}

export function fakeTime(startIso = '2026-12-02T00:00:00Z'): FakeTime {
  let nowMs = Date.parse(startIso);
  const timers = new Set<FakeTimer>();
  const add = (ms: number, fn: () => void, everyMs: number | null): TimerHandle => {
    const timer: FakeTimer = { dueMs: nowMs + Math.max(0, ms), everyMs, fn };
    timers.add(timer);
    return { cancel: () => void timers.delete(timer) };
  };
  const advance = (ms: number): void => {
    const target = nowMs + ms;
    for (;;) {
      const due = [...timers].filter((t) => t.dueMs <= target).sort((a, b) => a.dueMs - b.dueMs)[0];
      if (due === undefined) break;
      nowMs = Math.max(nowMs, due.dueMs);
      if (due.everyMs === null) timers.delete(due);
      else due.dueMs += Math.max(1, due.everyMs);
      due.fn();
    }
    nowMs = target;
  };
  const sleep = (ms: number, signal?: AbortSignal): Promise<void> => {
    if (signal?.aborted !== true) advance(Math.max(1, ms));
    return Promise.resolve();
  };
  return {
    clock: {
      now: () => new Date(nowMs),
      sleep,
      setTimer: (ms, fn) => add(ms, fn, null),
      setInterval: (ms, fn) => add(ms, fn, ms),
    },
    sleep,
    advance,
    nowMs: () => nowMs,
    pending: () => timers.size,
  };
}
