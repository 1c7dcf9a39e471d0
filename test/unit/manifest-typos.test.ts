import { describe, expect, it } from 'vitest';
import { parseManifest, parsePairSpec } from '../../src/core/manifest/parse.js';
import { closestKey, editDistance } from '../../src/core/manifest/typo-hints.js';

const job = (extra: Record<string, unknown> = {}) => ({
  job_id: 'pair-0001',
  argv: ['/opt/driver/run'],
  cwd: '/work',
  outcome_path: '/out/pair-0001.json',
  ...extra,
});
const issuesOf = (m: unknown) => {
  const parsed = parseManifest(JSON.stringify(m));
  return parsed.ok ? [] : parsed.issues;
};

describe('unknown keys: did you mean, and no follow-on errors from one typo', () => {
  it('names the key a misspelled job key meant (timeout_second → timeout_seconds)', () => {
    expect(
      issuesOf({
        schema: 'roboguide.e1.batch/v0.1',
        image: 'my-eval:1',
        jobs: [job({ timeout_second: 600 })],
      }),
    ).toEqual([{ path: 'jobs[0]', rule: 'unknown key "timeout_second" (did you mean "timeout_seconds"?)' }]);
  });

  it('a misspelled top-level image is one error, not one more per job', () => {
    const jobs = [1, 2, 3, 4].map((i) => job({ job_id: `pair-000${i}`, outcome_path: `/out/${i}.json` }));
    expect(issuesOf({ schema: 'roboguide.e1.batch/v0.1', imgae: 'my-eval:1', jobs })).toEqual([
      { path: '$', rule: 'unknown key "imgae" (did you mean "image"?)' },
    ]);
  });

  it('a misspelled jobs is one error, without "jobs is required"', () => {
    expect(issuesOf({ schema: 'roboguide.e1.batch/v0.1', image: 'my-eval:1', job: [job()] })).toEqual([
      { path: '$', rule: 'unknown key "job" (did you mean "jobs"?)' },
    ]);
  });

  it('a key far from every allowed one gets no guess, and a real missing field is still reported', () => {
    const { job_id: _id, ...noId } = job();
    expect(issuesOf({ schema: 'roboguide.e1.batch/v0.1', image: 'i', jobs: [noId], colour: 'blue' })).toEqual(
      expect.arrayContaining([
        { path: '$', rule: 'unknown key "colour"' },
        { path: 'jobs[0].job_id', rule: 'is required' },
      ]),
    );
  });

  it('a typo of a key that is also present keeps the other errors (it cannot have been meant)', () => {
    const issues = issuesOf({ schema: 'roboguide.e1.batch/v0.1', image: 'i', imag: 'j', jobs: [job()] });
    expect(issues).toEqual([{ path: '$', rule: 'unknown key "imag" (did you mean "image"?)' }]);
  });

  it('pair run specs get the same hints', () => {
    const parsed = parsePairSpec({ ...job(), image: 'my-eval:1', argvv: ['/x'] });
    expect(parsed.ok ? [] : parsed.issues).toEqual([
      { path: '$', rule: 'unknown key "argvv" (did you mean "argv"?)' },
    ]);
  });

  it('edit distance counts an adjacent swap as one edit; closestKey wants at most 2 edits and under half the length', () => {
    expect([
      editDistance('jbos', 'jobs'),
      editDistance('timeout_second', 'timeout_seconds'),
      editDistance('abc', 'xyz'),
    ]).toEqual([1, 1, 3]);
    expect(closestKey('gpu', ['gpus', 'gpu_mib'])).toBe('gpus');
    expect(closestKey('id', ['job_id'])).toBeNull();
    expect(closestKey('xy', ['ab'])).toBeNull();
  });
});
