import { describe, expect, it } from 'vitest';
import { imageBudgetCheck } from '../../src/app/doctor/image-budget-check.js';
import type { FileSystemFact, HostFact } from '../../src/core/host-facts.js';

const GIB = 1024 ** 3;
const root = (free: number): HostFact<FileSystemFact> => ({
  kind: 'known',
  path: '/var/lib/docker',
  fs: '/dev/vda',
  type: 'ext4',
  mount: '/',
  size_bytes: 250 * GIB,
  free_bytes: free,
});

describe('doctor: the image budget (issue 43)', () => {
  it('warns about the default: the figure, the free space it is a share of, how to set capacity.image_disk_bytes', () => {
    const check = imageBudgetCheck(root(70 * GIB), null);
    expect(check.status).toBe('warn');
    expect(check.detail).toContain(
      "the default is 50 % of the engine data root's free space at start: 35.0 GiB now",
    );
    expect(check.detail).toContain('70.0 GiB free on the engine data root /var/lib/docker');
    expect(check.fix).toContain('capacity.image_disk_bytes');
    expect(check.fix).toContain('"capacity": {"image_disk_bytes": 21474836480}');
  });

  it('a manifest that sets it: ok with both figures; more than the free space: warned', () => {
    expect(imageBudgetCheck(root(70 * GIB), 10 * GIB)).toMatchObject({
      status: 'ok',
      detail:
        'capacity.image_disk_bytes 10.0 GiB (the manifest); 70.0 GiB free on the engine data root /var/lib/docker',
    });
    expect(imageBudgetCheck(root(5 * GIB), 10 * GIB)).toMatchObject({
      status: 'warn',
      detail: expect.stringContaining('the budget is more than the free space'),
    });
  });

  it('the data root unknown: said, with the fallback the batch uses', () => {
    const check = imageBudgetCheck({ kind: 'unknown', reason: 'the engine did not answer' });
    expect(check.status).toBe('warn');
    expect(check.detail).toContain('free space is unknown (the engine did not answer)');
    expect(check.detail).toContain("four times its images' compressed size");
  });
});
