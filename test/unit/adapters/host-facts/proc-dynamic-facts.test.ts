import { describe, expect, it } from 'vitest';
import { mountEntries, procMemory } from '../../../../src/adapters/host-facts/proc-dynamic-facts.js';
import { mountOf } from '../../../../src/core/host-facts.js';

describe('host facts read from /proc (issue 39: no child process for the dynamic facts)', () => {
  it('mountinfo: escaped points decoded, the last mount stacked on a point wins, optional fields skipped', () => {
    const text = [
      '22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw',
      '30 22 0:26 / /tmp rw,nosuid shared:5 - tmpfs tmpfs rw',
      '31 30 254:2 / /tmp rw,relatime shared:9 master:2 - xfs /dev/vdb rw',
      '40 22 0:40 / /mnt/with\\040space rw - nfs4 server:/export\\040x rw',
      '',
    ].join('\n');
    const entries = mountEntries(text);
    expect(entries).toEqual([
      { mount: '/', type: 'ext4', fs: '/dev/vda1' },
      { mount: '/tmp', type: 'xfs', fs: '/dev/vdb' },
      { mount: '/mnt/with space', type: 'nfs4', fs: 'server:/export x' },
    ]);
    const withSizes = entries.map((e) => ({ ...e, size_bytes: 0, free_bytes: 0 }));
    expect(mountOf('/tmp/a/b', withSizes)?.fs).toBe('/dev/vdb');
    expect(mountOf('/mnt/with space/x', withSizes)?.type).toBe('nfs4');
    expect(mountOf('/tmpx', withSizes)?.mount).toBe('/');
  });

  it('meminfo: MemTotal and MemAvailable in bytes; a missing line is an error naming it', async () => {
    const text = 'MemTotal:       24576000 kB\nMemFree:         1000 kB\nMemAvailable:   12288000 kB\n';
    expect(await procMemory(text)).toEqual({
      total_bytes: 24576000 * 1024,
      available_bytes: 12288000 * 1024,
    });
    await expect(procMemory('MemTotal: 10 kB\n')).rejects.toThrow('MemAvailable');
  });
});
