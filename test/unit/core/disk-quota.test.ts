import { describe, expect, it } from 'vitest';
import { mountHolding, mountOptionsOf, parseMounts } from '../../../src/adapters/fs/proc-mounts.js';
import { diskEnforcementDetail, projectQuotaSupport } from '../../../src/core/disk-quota.js';

const MOUNTS = [
  '/dev/vda / ext4 rw,relatime,discard 0 0',
  '/dev/vdb /srv/xfs xfs rw,relatime,attr2,inode64,prjquota 0 0',
  '/dev/vdc /srv/xfs/acct xfs rw,pqnoenforce 0 0',
  '/dev/vdd /srv/with\\040space ext4 rw,prjquota 0 0',
  'tmpfs /tmp tmpfs rw 0 0',
].join('\n');

describe('project quota support (doctor: how a disk limit is enforced)', () => {
  const on = (path: string): ReturnType<typeof projectQuotaSupport> =>
    projectQuotaSupport(mountHolding(path, parseMounts(MOUNTS)));

  it('XFS with prjquota and ext4 with prjquota could carry one; accounting only, other options or types cannot', () => {
    expect(on('/srv/xfs/out')).toEqual({ supported: true, why: 'xfs on /srv/xfs, mounted with prjquota' });
    expect(on('/srv/with space/out')).toMatchObject({ supported: true });
    expect(on('/srv/xfs/acct/out')).toEqual({
      supported: false,
      why: 'xfs on /srv/xfs/acct, mounted without prjquota or pquota',
    });
    expect(on('/work/out')).toEqual({ supported: false, why: 'ext4 on /, mounted without prjquota' });
    expect(on('/tmp/x')).toEqual({ supported: false, why: 'tmpfs on /tmp: no project quotas on tmpfs' });
    expect(projectQuotaSupport(null)).toMatchObject({ supported: false });
  });

  it('doctor says the limit is enforced by measurement either way, and why no quota', () => {
    expect(diskEnforcementDetail(on('/work/out'))).toBe(
      'disk limits enforced by measurement (a walk every 10 s; no project quota: ext4 on /, mounted without prjquota)',
    );
    expect(diskEnforcementDetail(on('/srv/xfs/out'))).toContain('could carry a project quota');
  });

  it("reads this host's own mounts for a folder that does not exist yet (its nearest ancestor)", async () => {
    const mount = await mountOptionsOf('/proc/self/no/such/folder');
    expect(mount).toMatchObject({ mount: '/proc', type: 'proc' });
  });
});
