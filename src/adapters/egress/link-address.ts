import { readFileSync } from 'node:fs';

/**
 * The link-layer (MAC) address the kernel holds for a neighbour's IPv4 address, from the neighbour table of the
 * reading process's network namespace (`/proc/net/arp`): the proxy's sink asks it as a connection or datagram
 * arrives, while the container that sent it is still on the network. An allowlisted pair's container is given an
 * address of ours at its create (EgressLease.mac), one no other container has had: its packets are known by it even
 * when the engine has given its IPv4 address to the next container. Null when the table cannot be read or has no
 * complete entry for that address. Read synchronously: the answer must be taken before anything else runs.
 */
export function linkAddressOf(ip: string, device: string, table = '/proc/net/arp'): string | null {
  let text: string;
  try {
    text = readFileSync(table, 'utf8');
  } catch {
    return null;
  }
  return findLinkAddress(text, ip, device);
}

/**
 * `IP address  HW type  Flags  HW address  Mask  Device`, a header line first; flag 0x2: complete. Only entries of
 * `device` (the egress network's bridge: a neighbour elsewhere is none of its containers).
 */
export function findLinkAddress(text: string, ip: string, device: string): string | null {
  for (const line of text.split('\n').slice(1)) {
    const [address, , flags, mac, , dev] = line.trim().split(/\s+/);
    if (address !== ip || dev !== device || mac === undefined || flags === undefined) continue;
    if ((Number.parseInt(flags, 16) & 0x2) === 0 || mac === '00:00:00:00:00:00') continue;
    return mac.toLowerCase();
  }
  return null;
}
