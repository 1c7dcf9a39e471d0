/**
 * The network a pair (or a serve session) joins, and the firewall rules that guard it (docs/spec.md §5.1,
 * "network"). Pure: names, the rules as argument lists, and the reading of what the engine and iptables report.
 *
 * `bridge` is a bridge network of ours, `roboguide-pairs`: outbound access (the pair calls its provider), no
 * traffic between its containers (ICC off, enforced by the engine's own rules), and a chain of ours that rejects
 * what a pair opens towards the cloud metadata addresses and the host's own addresses. `none`: no interface but
 * loopback.
 */

/** `allowlist`: the egress network of an allowlisted pair (src/core/egress/egress-network.ts); never written in a manifest's `network`. */
export type NetworkChoice = 'none' | 'bridge' | 'allowlist';

export const NETWORK_CHOICES: readonly NetworkChoice[] = ['none', 'bridge'];
/** The engine network of allowlisted pairs (src/core/egress/egress-network.ts has its rules). */
export const EGRESS_ENGINE_NETWORK = 'roboguide-egress';

/** The engine network of our pairs (a fixed name: `doctor` and `network remove` find it). */
export const PAIRS_NETWORK = 'roboguide-pairs';
/** Its Linux bridge (at most 15 characters): the interface the firewall rules match. */
export const PAIRS_BRIDGE = 'rg-pairs0';
/** Our iptables/ip6tables chain (filter table), jumped to from INPUT and DOCKER-USER for traffic from PAIRS_BRIDGE. */
export const PAIRS_CHAIN = 'ROBOGUIDE-PAIRS';
/** The label on the network: a network of that name without it is not ours and is never used nor removed. */
export const PAIRS_NETWORK_LABELS: Readonly<Record<string, string>> = { 'roboguide.network': 'pairs' };
/** Engine options of the network: our bridge name, no inter-container traffic, outbound through masquerade. */
export const PAIRS_NETWORK_OPTIONS: Readonly<Record<string, string>> = {
  'com.docker.network.bridge.name': PAIRS_BRIDGE,
  'com.docker.network.bridge.enable_icc': 'false',
  'com.docker.network.bridge.enable_ip_masquerade': 'true',
};

/**
 * Cloud metadata services a pair must not reach (instance credentials live there): 169.254.169.254 (AWS, GCP,
 * Azure, OpenStack, DigitalOcean, Oracle…), 169.254.170.2 (ECS task credentials), 100.100.100.200 (Alibaba);
 * fd00:ec2::254 (AWS over IPv6).
 */
export const METADATA_ADDRESSES_V4: readonly string[] = [
  '169.254.169.254/32',
  '169.254.170.2/32',
  '100.100.100.200/32',
];
export const METADATA_ADDRESSES_V6: readonly string[] = ['fd00:ec2::254/128'];

export type IpFamily = 'ipv4' | 'ipv6';

/** The built-in chains that jump to ours, per family. DOCKER-USER is the engine's chain for rules of the operator (FORWARD). */
export function jumpChains(family: IpFamily): readonly string[] {
  // The network has no IPv6: nothing of it is forwarded, only the host's own (link-local) addresses are reachable.
  return family === 'ipv4' ? ['INPUT', 'DOCKER-USER'] : ['INPUT'];
}

/** The rule of a jump, as `iptables -C/-I/-D <chain>` takes it after the chain name. */
export function jumpRule(): readonly string[] {
  return ['-i', PAIRS_BRIDGE, '-j', PAIRS_CHAIN];
}

/**
 * The chain's rules in order, each as `iptables -A PAIRS_CHAIN` takes it, written the way `iptables -S` prints them
 * (so the listing can be compared as text):
 * 1. replies of connections already open (a published port the host connected to, a provider's answers) pass;
 * 2. a new connection whose destination the host rewrote (another container's published port, reached at a host
 *    address) is rejected;
 * 3. the metadata addresses are rejected;
 * 4. every address of the host itself (addrtype LOCAL: any interface, including the bridges' gateways) is rejected.
 * Anything else returns to the engine's rules (outbound through masquerade; ICC off drops bridge-to-bridge).
 */
export function chainRules(family: IpFamily): readonly (readonly string[])[] {
  const reject = [
    '-j',
    'REJECT',
    '--reject-with',
    family === 'ipv4' ? 'icmp-port-unreachable' : 'icmp6-port-unreachable',
  ];
  const metadata = family === 'ipv4' ? METADATA_ADDRESSES_V4 : METADATA_ADDRESSES_V6;
  return [
    ['-m', 'conntrack', '--ctstate', 'RELATED,ESTABLISHED', '-j', 'RETURN'],
    ['-m', 'conntrack', '--ctstate', 'DNAT', ...reject],
    ...metadata.map((address) => ['-d', address, ...reject]),
    ['-m', 'addrtype', '--dst-type', 'LOCAL', ...reject],
  ];
}

/** `iptables -S PAIRS_CHAIN` as it reads when the chain holds exactly our rules. */
export function expectedChainListing(family: IpFamily): string[] {
  return [`-N ${PAIRS_CHAIN}`, ...chainRules(family).map((rule) => `-A ${PAIRS_CHAIN} ${rule.join(' ')}`)];
}

/** Whether `iptables -S PAIRS_CHAIN` output holds exactly our rules, in order. */
export function chainListingMatches(family: IpFamily, listing: string): boolean {
  const lines = listing
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '');
  const expected = expectedChainListing(family);
  return lines.length === expected.length && lines.every((line, index) => line === expected[index]);
}

/** What one `iptables -S` (the whole filter table) shows of ours: one call per family on every create. */
export interface FilterTableState {
  readonly chain: 'ok' | 'differs' | 'missing';
  /** Per chain of jumpChains(family): whether our jump is there. */
  readonly jumps: Readonly<Record<string, boolean>>;
  /** Every chain of the table (built-in and user-defined). */
  readonly chains: ReadonlySet<string>;
}

export function readFilterTable(family: IpFamily, listing: string): FilterTableState {
  const lines = listing
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '');
  const chains = new Set(
    lines.filter((l) => l.startsWith('-P ') || l.startsWith('-N ')).map((l) => l.split(' ')[1] ?? ''),
  );
  const ours = lines.filter((l) => l === `-N ${PAIRS_CHAIN}` || l.startsWith(`-A ${PAIRS_CHAIN} `));
  const chain = !chains.has(PAIRS_CHAIN)
    ? 'missing'
    : chainListingMatches(family, ours.join('\n'))
      ? 'ok'
      : 'differs';
  const jumps = Object.fromEntries(
    jumpChains(family).map((c) => [c, lines.includes(`-A ${c} ${jumpRule().join(' ')}`)]),
  );
  return { chain, jumps, chains };
}

/** The plain-words list of what is missing, for `doctor` and `network setup` (empty: all in place). */
export function missingOf(state: FilterTableState): string[] {
  const missing: string[] = [];
  if (state.chain === 'missing') missing.push(`chain ${PAIRS_CHAIN}`);
  if (state.chain === 'differs') missing.push(`the rules of ${PAIRS_CHAIN} (they differ)`);
  for (const [chain, present] of Object.entries(state.jumps))
    if (!present) missing.push(`the jump from ${chain}`);
  return missing;
}

/** What the engine says of the network named PAIRS_NETWORK. */
export interface PairsNetworkFacts {
  readonly driver: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly options: Readonly<Record<string, string>>;
}

/** Why an existing network of that name cannot be used as ours (null: it can). Never repaired in place: containers may be on it. */
export function pairsNetworkProblem(facts: PairsNetworkFacts): string | null {
  for (const [key, value] of Object.entries(PAIRS_NETWORK_LABELS)) {
    if (facts.labels[key] !== value)
      return `network ${PAIRS_NETWORK} exists but is not ours (no label ${key}=${value})`;
  }
  if (facts.driver !== 'bridge') return `network ${PAIRS_NETWORK} uses driver ${facts.driver}, not bridge`;
  if (facts.options['com.docker.network.bridge.enable_icc'] !== 'false')
    return `network ${PAIRS_NETWORK} lets its containers reach each other (enable_icc is not false)`;
  if (facts.options['com.docker.network.bridge.name'] !== PAIRS_BRIDGE)
    return `network ${PAIRS_NETWORK} is not on bridge ${PAIRS_BRIDGE}`;
  return null;
}

/** The engine's NetworkMode for a choice: our network, or none. */
export function networkModeFor(choice: NetworkChoice): string {
  return choice === 'none' ? 'none' : choice === 'allowlist' ? EGRESS_ENGINE_NETWORK : PAIRS_NETWORK;
}

/** What `doctor` and `network setup` report of the network and its rules. */
export interface PairsNetworkReport {
  /** `missing`: no network of that name; `foreign`: one that is not ours or not guarded (`problem` says why). */
  readonly network:
    { readonly state: 'ok' | 'missing' } | { readonly state: 'foreign'; readonly problem: string };
  /** Per family: the chain holds our rules and every jump is in place; else what is missing. */
  readonly rules: readonly {
    readonly family: IpFamily;
    readonly ok: boolean;
    readonly missing: readonly string[];
  }[];
}

/** A plain-words summary of a report, and whether pairs may run guarded as it stands. */
export function describePairsNetwork(report: PairsNetworkReport): {
  readonly ok: boolean;
  readonly detail: string;
} {
  const parts: string[] = [];
  if (report.network.state === 'ok') parts.push(`network ${PAIRS_NETWORK} (bridge ${PAIRS_BRIDGE}, ICC off)`);
  else if (report.network.state === 'foreign') parts.push(report.network.problem);
  else parts.push(`network ${PAIRS_NETWORK} not created yet`);
  const broken = report.rules.filter((r) => !r.ok);
  if (broken.length === 0)
    parts.push(`rules of ${PAIRS_CHAIN} in place (${report.rules.map((r) => r.family).join(', ')})`);
  for (const r of broken) parts.push(`${r.family}: missing ${r.missing.join(', ')}`);
  return { ok: report.network.state === 'ok' && broken.length === 0, detail: parts.join('; ') };
}

/**
 * `ROBOGUIDE_PAIRS_NETWORK`: unset (or `guarded`) puts network "bridge" on our guarded network; `engine-bridge` on
 * the engine's default bridge network instead, unguarded (no rules of ours: other containers, the metadata address
 * and the host are reachable). For a machine whose firewall is not ours to change, such as a test machine sharing
 * its engine; never for hostile pairs.
 */
export const PAIRS_NETWORK_VARIABLE = 'ROBOGUIDE_PAIRS_NETWORK';

export type PairsNetworkSetting = 'guarded' | 'engine-bridge';

export function pairsNetworkSetting(
  value: string | undefined,
):
  | { readonly ok: true; readonly setting: PairsNetworkSetting }
  | { readonly ok: false; readonly rule: string } {
  if (value === undefined || value === '' || value === 'guarded') return { ok: true, setting: 'guarded' };
  if (value === 'engine-bridge') return { ok: true, setting: 'engine-bridge' };
  return { ok: false, rule: 'must be "guarded" (the default) or "engine-bridge"' };
}
