import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { boundedRefresher } from '../../src/app/batch/report.js';
import { clockAt } from '../support/fake-time.js';

/** The supervisor refreshes report.html at most every interval, and once more at the end. */
describe('boundedRefresher', () => {
  beforeEach(() => {
    vi.useFakeTimers({ now: new Date('2026-12-02T10:00:00Z') });
  });
  afterEach(() => {
    vi.useRealTimers();
  });
  const clock = clockAt(() => new Date());

  it('writes at once, then coalesces pokes within the interval into one later write', async () => {
    let writes = 0;
    const r = boundedRefresher(() => Promise.resolve(void writes++), clock, 2_000);
    r.poke();
    await vi.advanceTimersByTimeAsync(0);
    expect(writes).toBe(1);
    for (let i = 0; i < 50; i++) r.poke();
    await vi.advanceTimersByTimeAsync(1_999);
    expect(writes).toBe(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(writes).toBe(2);
    await vi.advanceTimersByTimeAsync(60_000);
    expect(writes).toBe(2);
  });

  it('flush writes once more, cancels the pending write, and ignores later pokes', async () => {
    let writes = 0;
    const r = boundedRefresher(() => Promise.resolve(void writes++), clock, 2_000);
    r.poke();
    r.poke();
    await r.flush();
    expect(writes).toBe(2);
    r.poke();
    await vi.advanceTimersByTimeAsync(10_000);
    expect(writes).toBe(2);
  });

  it('writes never overlap, and a failed write does not stop the next one', async () => {
    let active = 0;
    let maxActive = 0;
    let calls = 0;
    const gates: (() => void)[] = [];
    const r = boundedRefresher(
      () => {
        calls++;
        active++;
        maxActive = Math.max(maxActive, active);
        return new Promise<void>((resolve, reject) =>
          gates.push(() => (active--, calls === 1 ? reject(new Error('disk full')) : resolve())),
        );
      },
      clock,
      0,
    );
    r.poke();
    r.poke();
    await vi.advanceTimersByTimeAsync(0);
    expect(calls).toBe(1);
    gates.shift()!();
    await vi.advanceTimersByTimeAsync(0);
    expect(calls).toBe(2);
    gates.shift()!();
    const done = r.flush();
    await vi.advanceTimersByTimeAsync(0);
    gates.shift()!();
    await done;
    expect(calls).toBe(3);
    expect(maxActive).toBe(1);
  });
});

describe('boundedRefresher on a slow write', () => {
  beforeEach(() => {
    vi.useFakeTimers({ now: new Date('2026-12-02T10:00:00Z') });
  });
  afterEach(() => {
    vi.useRealTimers();
  });
  const clock = clockAt(() => new Date());

  it('waits four times the last write duration after it ended before the next (a huge batch never refreshes back to back)', async () => {
    const starts: number[] = [];
    const r = boundedRefresher(
      async () => {
        starts.push(Date.now());
        await new Promise((resolve) => setTimeout(resolve, 3_000)); // a 3 s write
      },
      clock,
      2_000,
    );
    const t0 = Date.now();
    r.poke();
    await vi.advanceTimersByTimeAsync(100);
    r.poke(); // during the write: remembered, not lost
    await vi.advanceTimersByTimeAsync(3_000 + 12_000 - 101);
    expect(starts.map((t) => t - t0)).toEqual([0]);
    await vi.advanceTimersByTimeAsync(1);
    expect(starts.map((t) => t - t0)).toEqual([0, 15_000]);
  });
});
