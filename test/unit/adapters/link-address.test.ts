import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { findLinkAddress, linkAddressOf } from '../../../src/adapters/egress/link-address.js';

const BR = 'br-92182344fd6d';
const TABLE = [
  'IP address       HW type     Flags       HW address            Mask     Device',
  '172.26.0.2       0x1         0x2         02:42:DE:AD:00:07     *        br-92182344fd6d',
  '172.26.0.3       0x1         0x0         00:00:00:00:00:00     *        br-92182344fd6d',
  '172.26.0.4       0x1         0x2         02:aa:bb:cc:dd:04     *        br-92182344fd6d',
  '172.26.0.5       0x1         0x2         02:aa:bb:cc:dd:05     *        eth0',
  '',
].join('\n');

describe("the sink's link-layer addresses (/proc/net/arp)", () => {
  it("finds a complete entry by its IPv4 address, lower-cased; an incomplete one, another address, a partial match or another device's is none", () => {
    expect(findLinkAddress(TABLE, '172.26.0.2', BR)).toBe('02:42:de:ad:00:07');
    expect(findLinkAddress(TABLE, '172.26.0.4', BR)).toBe('02:aa:bb:cc:dd:04');
    expect(findLinkAddress(TABLE, '172.26.0.3', BR)).toBeNull();
    expect(findLinkAddress(TABLE, '172.26.0.20', BR)).toBeNull();
    expect(findLinkAddress(TABLE, '172.26.0', BR)).toBeNull();
    expect(findLinkAddress('', '172.26.0.2', BR)).toBeNull();
    expect(findLinkAddress(TABLE, '172.26.0.5', BR), 'on another device').toBeNull();
    expect(findLinkAddress(TABLE, '172.26.0.5', 'eth0')).toBe('02:aa:bb:cc:dd:05');
  });

  it('reads the table given, and a table that cannot be read is none', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'rg-arp-'));
    try {
      await writeFile(join(dir, 'arp'), TABLE);
      expect(linkAddressOf('172.26.0.4', BR, join(dir, 'arp'))).toBe('02:aa:bb:cc:dd:04');
      expect(linkAddressOf('172.26.0.4', BR, join(dir, 'missing'))).toBeNull();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
