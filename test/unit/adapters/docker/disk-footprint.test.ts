import { describe, expect, it } from 'vitest';
import { diskFootprintOf } from '../../../../src/adapters/docker/disk-footprint.js';

describe('diskFootprintOf (a container inspect with sizes)', () => {
  it("names its volumes' host folders (an image VOLUME's anonymous one), not its bind mounts; its pid while it runs", () => {
    const volume = '/var/lib/docker/volumes/9fa9f2/_data';
    expect(
      diskFootprintOf({
        SizeRw: 4096,
        State: { Pid: 17899, Running: true },
        Mounts: [
          { Type: 'volume', Source: volume },
          { Type: 'bind', Source: '/work/cwd' },
          { Type: 'volume', Source: 'relative/never' },
        ],
      }),
    ).toEqual({ layerBytes: 4096, volumeDirs: [volume], pid: 17899 });
    expect(diskFootprintOf({ State: { Pid: 0, Running: false }, Mounts: null })).toEqual({
      layerBytes: 0,
      volumeDirs: [],
      pid: null,
    });
  });

  it("names the engine's own files it binds writable into the container (/etc/hosts, resolv.conf, hostname)", () => {
    const dir = '/var/lib/docker/containers/abc';
    expect(
      diskFootprintOf({
        SizeRw: 0,
        Mounts: [],
        HostsPath: `${dir}/hosts`,
        ResolvConfPath: `${dir}/resolv.conf`,
        HostnamePath: `${dir}/hostname`,
      }).volumeDirs,
    ).toEqual([`${dir}/hosts`, `${dir}/resolv.conf`, `${dir}/hostname`]);
    expect(diskFootprintOf({ HostsPath: '', ResolvConfPath: 'relative' }).volumeDirs).toEqual([]);
  });
});
