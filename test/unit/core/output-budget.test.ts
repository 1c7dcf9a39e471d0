import { describe, expect, it } from 'vitest';
import { batchOutputNeedBytes, outputSpaceWarning } from '../../../src/core/output-budget.js';

const GIB = 1024 ** 3;

describe('output budget', () => {
  it('counts both logs at their cap (plus the marker) and the sessions limit for every job', () => {
    const need = batchOutputNeedBytes(
      [
        { job_id: 'a', log_limit_bytes: GIB },
        { job_id: 'b', log_limit_bytes: 64 * 1024 ** 2 },
      ],
      GIB,
    );
    expect(need).toBe(2 * (GIB + 256) + GIB + 2 * (64 * 1024 ** 2 + 256) + GIB);
  });

  it('warns only when the free space is below the need, naming the path and both figures', () => {
    expect(outputSpaceWarning(3 * GIB, { path: '/data', freeBytes: 3 * GIB })).toBeNull();
    expect(outputSpaceWarning(3 * GIB, { path: '/data', freeBytes: 2 * GIB })).toMatch(
      /\(\/data\) has 2\.0 GiB free, less than the 3\.0 GiB/,
    );
  });
});
