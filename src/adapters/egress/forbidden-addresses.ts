import { isIPv4, isIPv6 } from 'node:net';
import { networkInterfaces } from 'node:os';

/**
 * The addresses the proxy never connects to, whatever a name resolves to (DNS rebinding: an allowed name that
 * answers with the metadata service or a container's address): loopback, unspecified, link-local (the metadata
 * services among them), multicast, the cloud metadata addresses, every address of this host, and every address in
 * the subnets of the engine's bridges (other pairs and sessions). The proxy runs on the host, outside the pairs
 * network's guard (docs/spec.md §5.4), so it applies the same closures itself.
 */
export function forbiddenAddresses(
  interfaces: ReturnType<typeof networkInterfaces> = networkInterfaces(),
): (address: string) => boolean {
  const own = new Set<string>();
  const subnets: { base: number; mask: number }[] = [];
  for (const [name, entries] of Object.entries(interfaces)) {
    for (const entry of entries ?? []) {
      own.add(entry.address.toLowerCase());
      if (entry.family === 'IPv4' && /^(docker|br-|rg-|veth)/.test(name)) {
        const mask = toInt(entry.netmask);
        subnets.push({ base: toInt(entry.address) & mask, mask });
      }
    }
  }
  return (address) => {
    const a = address.toLowerCase();
    if (own.has(a)) return true;
    if (isIPv4(a)) {
      const n = toInt(a);
      if (FIXED_V4.some(([base, bits]) => inCidr(n, toInt(base), bits))) return true;
      return subnets.some((s) => (n & s.mask) >>> 0 === s.base >>> 0);
    }
    if (isIPv6(a)) {
      if (a === '::1' || a === '::' || /^fe[89ab]/.test(a) || a.startsWith('ff') || a === 'fd00:ec2::254')
        return true;
      const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(a);
      return mapped !== null ? forbiddenAddresses(interfaces)(mapped[1] ?? '') : false;
    }
    return true;
  };
}

const FIXED_V4: readonly (readonly [string, number])[] = [
  ['0.0.0.0', 8],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
  ['100.100.100.200', 32],
];

function toInt(address: string): number {
  return address.split('.').reduce((acc, part) => ((acc << 8) | Number(part)) >>> 0, 0) >>> 0;
}

function inCidr(n: number, base: number, bits: number): boolean {
  const mask = bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0;
  return (n & mask) >>> 0 === (base & mask) >>> 0;
}
