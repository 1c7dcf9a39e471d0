import { describe, expect, it } from 'vitest';
import type { Counts } from '../../../src/core/batch-state.js';
import type { BatchState } from '../../../src/core/batch-state-name.js';
import { batchFailed, failedPairs } from '../../../src/core/batch-verdict.js';

const NONE: Counts = {
  total: 3,
  pending: 0,
  claimed: 0,
  running: 0,
  completed: 3,
  infrastructure_failure: 0,
  fatal: 0,
  provider_stop: 0,
  harness_failure: 0,
};

describe('batch verdict (`e1-batch status --exit-status`)', () => {
  it('counts every classification but completed as a failed pair', () => {
    expect(failedPairs(NONE)).toBe(0);
    expect(
      failedPairs({ ...NONE, infrastructure_failure: 1, fatal: 2, provider_stop: 4, harness_failure: 8 }),
    ).toBe(15);
  });

  const oneFailure = { ...NONE, completed: 2, harness_failure: 1 };
  const table: [BatchState, Counts, boolean][] = [
    ['running', oneFailure, false],
    ['stopping', oneFailure, false],
    ['stopped', oneFailure, false],
    ['paused', NONE, true],
    ['drained', NONE, false],
    ['drained', oneFailure, true],
    ['drained', { ...NONE, completed: 2, provider_stop: 1 }, true],
  ];
  for (const [state, counts, failed] of table) {
    it(`${state} with ${failedPairs(counts)} failed pair(s): ${failed ? 'failed' : 'not failed'}`, () => {
      expect(batchFailed({ state, counts })).toBe(failed);
    });
  }
});
