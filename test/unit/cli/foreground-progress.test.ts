import { describe, expect, it } from 'vitest';
import { progressLine } from '../../../src/cli/foreground-progress.js';

describe('start --foreground progress (issue 40 item 4)', () => {
  it('counts finished pairs (every failure class together) and names the running ones', () => {
    const counts = {
      total: 30,
      pending: 20,
      claimed: 0,
      running: 2,
      completed: 5,
      infrastructure_failure: 2,
      fatal: 0,
      provider_stop: 1,
      harness_failure: 0,
    };
    expect(progressLine({ counts, running: [{ job_id: 'p09' }, { job_id: 'p10' }] })).toBe(
      'progress: 8/30 finished (5 completed, 3 failed); running: p09, p10',
    );
    expect(progressLine({ counts, running: [] })).toMatch(/; running: none$/);
    expect(progressLine({})).toBeNull();
  });
});
