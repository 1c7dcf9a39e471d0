import { readFile } from 'node:fs/promises';

/**
 * The destination a packet had before our firewall rewrote it to the proxy's sink (docs/spec.md §5.6): read from the
 * kernel's connection table of the proxy's own network namespace (`/proc/net/nf_conntrack`). Null when the table
 * cannot be read or holds no such entry (then the attempt is still recorded, without its destination).
 */
export async function originalDestination(
  proto: 'tcp' | 'udp',
  source: string,
  sourcePort: number,
  sinkPort: number,
  table = '/proc/net/nf_conntrack',
): Promise<{ address: string; port: number } | null> {
  let text: string;
  try {
    text = await readFile(table, 'utf8');
  } catch {
    return null;
  }
  return findOriginal(text, proto, source, sourcePort, sinkPort);
}

export function findOriginal(
  text: string,
  proto: 'tcp' | 'udp',
  source: string,
  sourcePort: number,
  sinkPort: number,
): { address: string; port: number } | null {
  for (const line of text.split('\n')) {
    const fields = line.trim().split(/\s+/);
    if (fields[2] !== proto) continue;
    const pairs = fields.filter((f) => f.includes('=')).map((f) => f.split('=') as [string, string]);
    const srcs = pairs.filter(([k]) => k === 'src').map(([, v]) => v);
    const dsts = pairs.filter(([k]) => k === 'dst').map(([, v]) => v);
    const sports = pairs.filter(([k]) => k === 'sport').map(([, v]) => Number(v));
    const dports = pairs.filter(([k]) => k === 'dport').map(([, v]) => Number(v));
    if (srcs[0] === source && sports[0] === sourcePort && sports[1] === sinkPort && dsts[0] !== undefined)
      return { address: dsts[0], port: dports[0] ?? 0 };
  }
  return null;
}

/** The first question's name of a DNS query (what a pair tried to resolve around the proxy); null if unreadable. */
export function dnsQuestion(message: Uint8Array): string | null {
  if (message.length < 13) return null;
  const labels: string[] = [];
  let at = 12;
  while (at < message.length) {
    const length = message[at] ?? 0;
    if (length === 0) return labels.length > 0 ? labels.join('.') : null;
    if (length > 63 || at + 1 + length > message.length) return null;
    labels.push(Buffer.from(message.subarray(at + 1, at + 1 + length)).toString('latin1'));
    at += 1 + length;
  }
  return null;
}
