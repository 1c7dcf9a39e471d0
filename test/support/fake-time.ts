import type { Clock, TimerHandle } from '../../src/app/ports/clock.js';
import { systemClock } from '../../src/adapters/system-clock.js';

/**
 * A clock that moves only when the code under test sleeps (or the test advances it): waits, probes and polls end at
 * once, timers fire when the time they wait for is reached, and every moment the code reads is the sum of the
 * moves before it (no real time, no timing assertions).
 */
export interface FakeTime {
  readonly clock: Clock;
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
      monotonicMs: () => nowMs,
      sleep,
      setTimer: (ms, fn) => add(ms, fn, null),
      setInterval: (ms, fn) => add(ms, fn, ms),
      // A turn of the event loop is no wait for time: it runs for real (the I/O already pending goes first).
      nextTurn: systemClock.nextTurn,
    },
    sleep,
    advance,
    nowMs: () => nowMs,
    pending: () => timers.size,
  };
}

/**
 * A clock that reads `now` (a fixed instant, or the test's own function) and waits for real: for tests whose code
 * never waits long, or whose waits are real I/O (a log's hold timer over a real file), not moments to move.
 */
export function clockAt(now: Date | string | (() => Date)): Clock {
  const read = typeof now === 'function' ? now : () => new Date(now);
  return { ...systemClock, now: read };
}
