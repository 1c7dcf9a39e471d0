import { describe, expect, it } from 'vitest';
import type { networkInterfaces } from 'node:os';
import {
  embeddedV4,
  forbiddenAddresses,
  v6Bits,
} from '../../../../src/adapters/egress/forbidden-addresses.js';
import { resolveAll } from '../../../../src/adapters/egress/resolve-all.js';

const interfaces = {
  lo: [{ address: '127.0.0.1', netmask: '255.0.0.0', family: 'IPv4', cidr: '127.0.0.1/8' }],
  eth0: [
    { address: '10.1.2.3', netmask: '255.255.255.0', family: 'IPv4', cidr: '10.1.2.3/24' },
    { address: '2a01:4f8::7', netmask: 'ffff:ffff::', family: 'IPv6', cidr: '2a01:4f8::7/64' },
  ],
  'br-abc': [
    { address: '172.20.0.1', netmask: '255.255.0.0', family: 'IPv4', cidr: '172.20.0.1/16' },
    { address: '2001:db8:77::1', netmask: 'ffff:ffff:ffff::', family: 'IPv6', cidr: '2001:db8:77::1/48' },
  ],
} as unknown as ReturnType<typeof networkInterfaces>;

describe('forbidden addresses (issue 42: IPv6 by the same closures)', () => {
  const forbidden = forbiddenAddresses(interfaces);

  it('refuses loopback, unspecified, link-local, site-local, unique local and multicast IPv6', () => {
    for (const a of [
      '::1',
      '::',
      '0:0:0:0:0:0:0:1',
      'fe80::1',
      'FE80::1%eth0',
      'febf::1',
      'fec0::1',
      'fc00::1',
      'fd00:ec2::254',
      'fdff:ffff::1',
      'ff02::1',
    ])
      expect(forbidden(a), a).toBe(true);
  });

  it('judges every IPv6 form that carries an IPv4 address by that address', () => {
    for (const a of [
      '::ffff:127.0.0.1',
      '::ffff:7f00:1',
      '::FFFF:169.254.169.254',
      '::ffff:a9fe:a9fe',
      '::127.0.0.1',
      '64:ff9b::169.254.169.254',
      '64:ff9b::a9fe:a9fe',
      '2002:7f00:1::',
      '2002:a9fe:a9fe::1',
      '::ffff:172.20.5.5',
      '::ffff:10.1.2.3',
    ])
      expect(forbidden(a), a).toBe(true);
    for (const a of ['::ffff:198.18.1.10', '64:ff9b::198.18.1.10', '2002:c612:10a::1'])
      expect(forbidden(a), a).toBe(false);
  });

  it("refuses the host's own IPv6 addresses (any spelling) and its bridges' prefixes; allows the rest", () => {
    expect(forbidden('2a01:4f8:0:0:0:0:0:7')).toBe(true);
    expect(forbidden('2001:db8:77:1::9')).toBe(true);
    expect(forbidden('2001:db8:78::9')).toBe(false);
    expect(forbidden('2606:4700::6810:85e5')).toBe(false);
    expect(forbidden('198.18.1.10')).toBe(false);
    expect(forbidden('172.20.9.9')).toBe(true);
    expect(forbidden('not an address')).toBe(true);
  });

  it('parses IPv6 text, refusing malformed forms', () => {
    expect(v6Bits('::1')).toBe(1n);
    expect(v6Bits('1:2:3:4:5:6:7:8')).toBe(0x00010002000300040005000600070008n);
    expect(v6Bits('1::2::3')).toBeNull();
    expect(v6Bits('1:2:3:4:5:6:7:8:9')).toBeNull();
    expect(v6Bits('::ffff:300.1.1.1')).toBeNull();
    expect(embeddedV4(v6Bits('::ffff:7f00:1') ?? 0n)).toBe('127.0.0.1');
    expect(embeddedV4(v6Bits('2001:db8::1') ?? 0n)).toBeNull();
  });
});

describe('resolveAll', () => {
  it('asks A and AAAA; an answer to either is enough; fails when neither answers', async () => {
    const fail = () => Promise.reject(Object.assign(new Error('ENOTFOUND'), { code: 'ENOTFOUND' }));
    expect(
      await resolveAll(
        { resolve4: () => Promise.resolve(['198.18.1.10']), resolve6: () => Promise.resolve(['fd00::1']) },
        'x',
      ),
    ).toEqual(['198.18.1.10', 'fd00::1']);
    expect(await resolveAll({ resolve4: fail, resolve6: () => Promise.resolve(['fd00::1']) }, 'x')).toEqual([
      'fd00::1',
    ]);
    expect(await resolveAll({ resolve4: () => Promise.resolve(['1.2.3.4']), resolve6: fail }, 'x')).toEqual([
      '1.2.3.4',
    ]);
    await expect(resolveAll({ resolve4: fail, resolve6: fail }, 'x')).rejects.toThrow('ENOTFOUND');
  });
});
