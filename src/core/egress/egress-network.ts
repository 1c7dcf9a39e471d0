/**
 * The network of allowlisted pairs and the firewall rules that make our proxy the only thing they reach
 * (docs/spec.md §5.6). Pure: names, rules as argument lists. Kept apart from the guarded pairs network's chain
 * (src/core/pair-network.ts): its own network, bridge and chains, so the two never edit each other's rules.
 *
 * For packets arriving from the egress bridge:
 * - nat `ROBOGUIDE-EGRESS-NAT` (from PREROUTING): a TCP connection to the proxy's port on the gateway is left as
 *   is; every other TCP connection and every UDP datagram (DNS included) is rewritten to the proxy's sink on the
 *   gateway, which records where it was going (the kernel's connection table) and refuses it;
 * - filter `ROBOGUIDE-EGRESS` (from INPUT and the engine's DOCKER-USER): replies pass; the proxy's and the sink's
 *   ports on the gateway are accepted; everything else (ICMP, other protocols, any other port of the host, anything
 *   forwarded) is rejected. IPv6 (the network has none; link-local to the host only): everything rejected.
 * When the proxy is down its ports answer with a reset: a pair reaches nothing (fail closed, never open).
 */
import { EGRESS_ENGINE_NETWORK, type IpFamily } from '../pair-network.js';

export const EGRESS_NETWORK = EGRESS_ENGINE_NETWORK;
export const EGRESS_BRIDGE = 'rg-egress0';
export const EGRESS_CHAIN = 'ROBOGUIDE-EGRESS';
export const EGRESS_NAT_CHAIN = 'ROBOGUIDE-EGRESS-NAT';
export const EGRESS_NETWORK_LABELS: Readonly<Record<string, string>> = { 'roboguide.network': 'egress' };
export const EGRESS_NETWORK_OPTIONS: Readonly<Record<string, string>> = {
  'com.docker.network.bridge.name': EGRESS_BRIDGE,
  'com.docker.network.bridge.enable_icc': 'false',
  'com.docker.network.bridge.enable_ip_masquerade': 'true',
};
export const DEFAULT_PROXY_PORT = 3128;
export const DEFAULT_SINK_PORT = 3129;

export interface EgressPorts {
  readonly proxy: number;
  readonly sink: number;
}

export type Table = 'filter' | 'nat';

/** One chain of ours: its table, family, the built-in chains that jump to it (inserted first), its rules. */
export interface ChainPlan {
  readonly family: IpFamily;
  readonly table: Table;
  readonly chain: string;
  readonly jumpsFrom: readonly string[];
  readonly rules: readonly (readonly string[])[];
}

export function egressChains(gateway: string, ports: EgressPorts): readonly ChainPlan[] {
  const gw = `${gateway}/32`;
  return [
    {
      family: 'ipv4',
      table: 'nat',
      chain: EGRESS_NAT_CHAIN,
      jumpsFrom: ['PREROUTING'],
      rules: [
        ['-d', gw, '-p', 'tcp', '-m', 'tcp', '--dport', String(ports.proxy), '-j', 'RETURN'],
        ['-p', 'tcp', '-j', 'DNAT', '--to-destination', `${gateway}:${ports.sink}`],
        ['-p', 'udp', '-j', 'DNAT', '--to-destination', `${gateway}:${ports.sink}`],
      ],
    },
    {
      family: 'ipv4',
      table: 'filter',
      chain: EGRESS_CHAIN,
      jumpsFrom: ['INPUT', 'DOCKER-USER'],
      rules: [
        ['-m', 'conntrack', '--ctstate', 'RELATED,ESTABLISHED', '-j', 'RETURN'],
        [
          '-d',
          gw,
          '-p',
          'tcp',
          '-m',
          'multiport',
          '--dports',
          `${ports.proxy},${ports.sink}`,
          '-j',
          'ACCEPT',
        ],
        ['-d', gw, '-p', 'udp', '-m', 'udp', '--dport', String(ports.sink), '-j', 'ACCEPT'],
        ['-j', 'REJECT', '--reject-with', 'icmp-port-unreachable'],
      ],
    },
    {
      family: 'ipv6',
      table: 'filter',
      chain: EGRESS_CHAIN,
      jumpsFrom: ['INPUT', 'FORWARD'],
      rules: [['-j', 'REJECT', '--reject-with', 'icmp6-port-unreachable']],
    },
  ];
}

export function egressJumpRule(chain: string): readonly string[] {
  return ['-i', EGRESS_BRIDGE, '-j', chain];
}

/** `iptables -t TABLE -S CHAIN` as it reads when the chain holds exactly the plan's rules. */
export function chainMatches(plan: ChainPlan, listing: string): boolean {
  const lines = listing
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '');
  const expected = [`-N ${plan.chain}`, ...plan.rules.map((r) => `-A ${plan.chain} ${r.join(' ')}`)];
  return lines.length === expected.length && lines.every((l, i) => l === expected[i]);
}

/** The proxy's address for a pair: the variables every common client reads (curl, Python, Node, Go). */
export function proxyEnvironment(gateway: string, port: number, token: string): Record<string, string> {
  const url = `http://rg:${token}@${gateway}:${port}`;
  return {
    HTTP_PROXY: url,
    HTTPS_PROXY: url,
    http_proxy: url,
    https_proxy: url,
    ALL_PROXY: url,
    NO_PROXY: 'localhost,127.0.0.1,::1',
    no_proxy: 'localhost,127.0.0.1,::1',
  };
}

/** The token in a proxy URL of `proxyEnvironment` (`http://rg:TOKEN@host:port`); null when there is none. */
export function tokenOfProxyUrl(url: string | undefined): string | null {
  const match = /^http:\/\/rg:([A-Za-z0-9]{16,})@[^@/]+$/.exec(url ?? '');
  return match?.[1] ?? null;
}
