import { isIPv4, isIPv6 } from 'node:net';
import { networkInterfaces } from 'node:os';

/**
 * The addresses the proxy never connects to, whatever a name resolves to (DNS rebinding: an allowed name that
 * answers with the metadata service or a container's address): loopback, unspecified, link-local (the metadata
 * services among them), multicast, the cloud metadata addresses, every address of this host, and every address in
 * the subnets of the engine's bridges (other pairs and sessions). The proxy runs on the host, outside the pairs
 * network's guard (docs/spec.md §5.4), so it applies the same closures itself.
 *
 * IPv6 the same (issue 42): loopback, unspecified, link-local fe80::/10, site-local fec0::/10, unique local
 * fc00::/7 (AWS's fd00:ec2::254 among them), multicast ff00::/8, the host's own and its bridges' prefixes; and every
 * form that carries an IPv4 address is judged by that address: v4-mapped ::ffff:a.b.c.d (also written in hex,
 * ::ffff:7f00:1), v4-compatible ::a.b.c.d, NAT64 64:ff9b::/96 and 6to4 2002::/16.
 */
export function forbiddenAddresses(
  interfaces: ReturnType<typeof networkInterfaces> = networkInterfaces(),
): (address: string) => boolean {
  const own = new Set<string>();
  const subnets: { base: number; mask: number }[] = [];
  const subnets6: { base: bigint; bits: number }[] = [];
  for (const [name, entries] of Object.entries(interfaces)) {
    for (const entry of entries ?? []) {
      if (entry.family === 'IPv4') own.add(entry.address);
      else {
        const bits = v6Bits(entry.address);
        if (bits !== null) own.add(`v6:${bits}`);
      }
      if (!/^(docker|br-|rg-|veth)/.test(name)) continue;
      if (entry.family === 'IPv4') {
        const mask = toInt(entry.netmask);
        subnets.push({ base: toInt(entry.address) & mask, mask });
      } else if (entry.cidr !== null) {
        const prefix = Number(entry.cidr.split('/')[1]);
        const bits = v6Bits(entry.address);
        // Link-local prefixes are forbidden anyway; a bridge's global or ULA prefix is other pairs.
        if (bits !== null && prefix > 0) subnets6.push({ base: bits, bits: prefix });
      }
    }
  }
  const forbiddenV4 = (a: string): boolean => {
    if (own.has(a)) return true;
    const n = toInt(a);
    if (FIXED_V4.some(([base, bits]) => inCidr(n, toInt(base), bits))) return true;
    return subnets.some((s) => (n & s.mask) >>> 0 === s.base >>> 0);
  };
  return (address) => {
    const a = address.toLowerCase();
    if (isIPv4(a)) return forbiddenV4(a);
    if (!isIPv6(a)) return true;
    const bits = v6Bits(a);
    if (bits === null) return true;
    if (own.has(`v6:${bits}`)) return true;
    const embedded = embeddedV4(bits);
    if (embedded !== null) return forbiddenV4(embedded);
    if (FIXED_V6.some(([base, prefix]) => inCidr6(bits, base, prefix))) return true;
    return subnets6.some((s) => inCidr6(bits, s.base, s.bits));
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

const FIXED_V6: readonly (readonly [bigint, number])[] = (
  [
    ['::', 128],
    ['::1', 128],
    ['fe80::', 10],
    ['fec0::', 10],
    ['fc00::', 7],
    ['ff00::', 8],
  ] as const
).map(([text, prefix]) => [v6Bits(text) ?? 0n, prefix] as const);

/** The IPv4 address an IPv6 address carries (v4-mapped, v4-compatible, NAT64, 6to4), or null. */
export function embeddedV4(bits: bigint): string | null {
  const low32 = Number(bits & 0xffffffffn);
  const v4 = (n: number) => [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
  const top96 = bits >> 32n;
  if (top96 === 0xffffn) return v4(low32); // ::ffff:a.b.c.d
  if (top96 === 0n && bits > 1n) return v4(low32); // ::a.b.c.d (not :: nor ::1)
  if (top96 === 0x64ff9b0000000000000000n) return v4(low32); // 64:ff9b::a.b.c.d
  if (bits >> 112n === 0x2002n) return v4(Number((bits >> 80n) & 0xffffffffn)); // 2002:AABB:CCDD::
  return null;
}

/** An IPv6 address as a 128-bit number (a zone id ignored; a dotted IPv4 tail read), or null when malformed. */
export function v6Bits(text: string): bigint | null {
  let t = text.split('%')[0]?.toLowerCase() ?? '';
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(t);
  if (dotted !== null) {
    if (!isIPv4(dotted[1] ?? '')) return null;
    const n = toInt(dotted[1] ?? '');
    t = `${t.slice(0, dotted.index)}${(n >>> 16).toString(16)}:${(n & 0xffff).toString(16)}`;
  }
  const halves = t.split('::');
  if (halves.length > 2) return null;
  const parse = (s: string) => (s === '' ? [] : s.split(':'));
  const head = parse(halves[0] ?? '');
  const tail = halves.length === 2 ? parse(halves[1] ?? '') : [];
  const fill = 8 - head.length - tail.length;
  if (halves.length === 2 ? fill < 1 : fill !== 0) return null;
  const groups = [...head, ...Array<string>(halves.length === 2 ? fill : 0).fill('0'), ...tail];
  let bits = 0n;
  for (const g of groups) {
    if (!/^[0-9a-f]{1,4}$/.test(g)) return null;
    bits = (bits << 16n) | BigInt(parseInt(g, 16));
  }
  return bits;
}

function inCidr6(bits: bigint, base: bigint, prefix: number): boolean {
  const shift = BigInt(128 - prefix);
  return bits >> shift === base >> shift;
}

function toInt(address: string): number {
  return address.split('.').reduce((acc, part) => ((acc << 8) | Number(part)) >>> 0, 0) >>> 0;
}

function inCidr(n: number, base: number, bits: number): boolean {
  const mask = bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0;
  return (n & mask) >>> 0 === (base & mask) >>> 0;
}
