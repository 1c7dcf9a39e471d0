import type { EgressRefusal } from './policy.js';

/**
 * One attempt a pair made to reach something beyond its container, as the egress proxy saw it: one line of its
 * `egress.jsonl` (docs/spec.md §5.6). `host` is the name as asked (null when only an address was seen: a packet that
 * bypassed the proxy); `address` the address we resolved or the packet's own destination.
 */
export interface EgressRecord {
  readonly time: string;
  /** `http`: a plain request through the proxy; `connect`: a tunnel; `tcp`/`udp`: a packet that bypassed the proxy. */
  readonly via: 'http' | 'connect' | 'tcp' | 'udp';
  readonly host: string | null;
  readonly address: string | null;
  readonly port: number | null;
  /** The HTTP method where visible (plain HTTP); null inside a tunnel and for raw packets. */
  readonly method: string | null;
  /** The TLS server name of a tunnel's ClientHello (null when none or not TLS). */
  readonly sni?: string | null;
  /** A plain request's URL (masked before it is written). */
  readonly target?: string;
  readonly decision: 'allowed' | 'refused';
  readonly reason?: EgressRefusal;
  /** The upstream's HTTP status (plain requests). */
  readonly status?: number;
  readonly bytes_up: number;
  readonly bytes_down: number;
  /** The pair's address on the egress network. */
  readonly source: string;
}

/**
 * A record as the proxy emits it: with the token that named the client, when one did, and for a packet that bypassed
 * the proxy the sender's link-layer address as the kernel had it when the packet came (neither is ever written).
 */
export interface EmittedRecord extends EgressRecord {
  readonly token?: string;
  readonly mac?: string;
}

/** The summary in result.json and the status: counts and the hosts asked (refused ones separately). */
export interface EgressSummary {
  readonly mode: 'none' | 'open' | 'allowlist';
  readonly allowed: number;
  readonly refused: number;
  readonly hosts: readonly string[];
  readonly refused_hosts: readonly string[];
  /** Records past the cap were counted, not kept. */
  readonly dropped?: number;
}

export function summarize(
  mode: EgressSummary['mode'],
  records: readonly EgressRecord[],
  dropped = 0,
): EgressSummary {
  const label = (r: EgressRecord) => `${r.host ?? r.address ?? '?'}${r.port !== null ? `:${r.port}` : ''}`;
  const allowed = records.filter((r) => r.decision === 'allowed');
  const refused = records.filter((r) => r.decision === 'refused');
  return {
    mode,
    allowed: allowed.length,
    refused: refused.length,
    hosts: [...new Set(allowed.map(label))].sort(),
    refused_hosts: [...new Set(refused.map(label))].sort(),
    ...(dropped > 0 ? { dropped } : {}),
  };
}
