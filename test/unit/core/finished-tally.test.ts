import { describe, expect, it } from 'vitest';
import { BatchLedger } from '../../../src/core/batch-ledger.js';
import { FinishedTally } from '../../../src/core/finished-tally.js';
import type { FinishFacts } from '../../../src/core/ledger-facts.js';

function facts(over: Partial<FinishFacts> = {}): FinishFacts {
  return {
    classification: 'completed',
    started_at: '2026-01-01T00:00:00.000Z',
    finished_at: '2026-01-01T00:00:10.000Z',
    gpu_peak_mib: null,
    ...over,
  };
}

describe('FinishedTally', () => {
  it('removing the pair with the largest GPU peak finds the next largest among those still counted', () => {
    const tally = new FinishedTally();
    const big = facts({ gpu_peak_mib: 40_000 });
    const small = facts({ gpu_peak_mib: 20_000 });
    tally.add('a', big);
    tally.add('b', small);
    expect(tally.gpuPeaks()).toEqual([40_000]);
    tally.remove('a', big, [small]);
    expect(tally.gpuPeaks()).toEqual([20_000]);
    expect(tally.basisFields().gpu_peaks).toBe(1);
    tally.remove('b', small, []);
    expect(tally.gpuPeaks()).toEqual([]);
  });

  it('takes a removed failure out of the counts, the durations and the recent failures', () => {
    const tally = new FinishedTally();
    const failed = facts({
      classification: 'fatal',
      first_reason: 'oom',
      finished_at: '2026-01-01T00:00:30.000Z',
    });
    tally.add('a', facts());
    tally.add('b', failed);
    expect(tally.count('fatal')).toBe(1);
    expect(tally.failedRecent().map((f) => [f.job_id, f.reason])).toEqual([['b', 'oom']]);
    expect(tally.meanDuration()).toEqual({ meanSec: 20, basisPairs: 2 });
    tally.remove('b', failed, [facts()]);
    expect(tally.count('fatal')).toBe(0);
    expect(tally.total()).toBe(1);
    expect(tally.failedRecent()).toEqual([]);
    expect(tally.meanDuration()).toEqual({ meanSec: 10, basisPairs: 1 });
  });

  it("the ledger's peak follows a job its files show unfinished after all (settle replaces what it had)", () => {
    const ledger = BatchLedger.forJobs([
      { job_id: 'a', timeout_seconds: 60 },
      { job_id: 'b', timeout_seconds: 60 },
    ]);
    const receipt = { claim_id: 'c', claimed_at: '2026-01-01T00:00:00.000Z', container_id: null };
    ledger.settle('a', receipt, facts({ gpu_peak_mib: 40_000 }));
    ledger.settle('b', receipt, facts({ gpu_peak_mib: 20_000 }));
    expect(ledger.gpuPeaks()).toEqual([40_000]);
    ledger.settle('a', receipt, null);
    expect(ledger.gpuPeaks()).toEqual([20_000]);
    expect(ledger.basis()).toMatchObject({ claimed: 2, gpu_peak_mib: 20_000, gpu_peaks: 1, timed: 1 });
    expect(ledger.open().map((c) => c.job_id)).toEqual(['a']);
  });
});
