/**
 * The egress policy of a pair or a session (docs/spec.md §5.6): what it may reach beyond its own container. Pure:
 * the parsed form, the matching of a requested host and port against the list, the decision for one attempt.
 *
 * - `none`: loopback only (network "none").
 * - `open`: the guarded pairs network as before (§5.4): any outside host, DNS included.
 * - `allowlist`: the pair joins the egress network, where the only thing it can reach is our filtering proxy; the
 *   proxy lets through requests to the listed hosts (and, where the request is visible, the listed methods).
 */

export type EgressMode = 'none' | 'open' | 'allowlist';
export const EGRESS_MODES: readonly EgressMode[] = ['none', 'open', 'allowlist'];

/** One entry of `allow`: an exact name, a `*.` wildcard (strict subdomains), or an address literal; one port or the defaults. */
export interface EgressRule {
  readonly kind: 'name' | 'wildcard' | 'ipv4' | 'ipv6';
  /** Lower case, no trailing dot; for a wildcard the suffix without `*.`; for ipv6 without brackets. */
  readonly host: string;
  /** Null: the default ports (80 and 443). */
  readonly port: number | null;
}

export interface EgressPolicy {
  readonly mode: EgressMode;
  readonly allow: readonly EgressRule[];
  /** Upper case; null: every method. Applies where the request is visible (plain HTTP; never inside CONNECT). */
  readonly methods: readonly string[] | null;
}

/** The policy as written in a manifest, a `pair run` spec or a session request (and frozen into the receipt). */
export interface EgressInput {
  readonly mode: EgressMode;
  readonly allow?: readonly string[] | undefined;
  readonly methods?: readonly string[] | undefined;
}

export const DEFAULT_EGRESS_PORTS: readonly number[] = [80, 443];
export const EGRESS_METHODS: readonly string[] = [
  'GET',
  'HEAD',
  'OPTIONS',
  'POST',
  'PUT',
  'PATCH',
  'DELETE',
  'CONNECT',
  'TRACE',
];
/** At most this many entries in `allow` (a policy is frozen into every receipt). */
export const MAX_ALLOW_ENTRIES = 256;

const LABEL = /^(?!-)[a-z0-9-]{1,63}(?<!-)$/;
const IPV4 = /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$/;

export type RuleParse =
  { readonly ok: true; readonly rule: EgressRule } | { readonly ok: false; readonly rule: string };

/** `api.openai.com`, `*.anthropic.com`, `pypi.internal:8443`, `203.0.113.7:8080`, `[2001:db8::1]:443`. */
export function parseAllowEntry(entry: string): RuleParse {
  const fail = (rule: string): RuleParse => ({ ok: false, rule });
  const text = entry.trim().toLowerCase();
  let host = text;
  let portText: string | null = null;
  if (text.startsWith('[')) {
    const close = text.indexOf(']');
    if (close < 0) return fail('an IPv6 address is written [ADDRESS] or [ADDRESS]:PORT');
    host = text.slice(1, close);
    const rest = text.slice(close + 1);
    if (rest !== '') {
      if (!rest.startsWith(':')) return fail('an IPv6 address is written [ADDRESS] or [ADDRESS]:PORT');
      portText = rest.slice(1);
    }
    if (!isIpv6(host)) return fail('not an IPv6 address between the brackets');
  } else {
    const colon = text.lastIndexOf(':');
    if (colon >= 0) {
      host = text.slice(0, colon);
      portText = text.slice(colon + 1);
    }
  }
  let port: number | null = null;
  if (portText !== null) {
    if (!/^\d{1,5}$/.test(portText) || Number(portText) < 1 || Number(portText) > 65_535)
      return fail('the port must be an integer 1..65535');
    port = Number(portText);
  }
  if (text.startsWith('[')) return { ok: true, rule: { kind: 'ipv6', host: canonicalIpv6(host), port } };
  if (host.endsWith('.')) host = host.slice(0, -1);
  if (IPV4.test(host)) return { ok: true, rule: { kind: 'ipv4', host, port } };
  const wildcard = host.startsWith('*.');
  const name = wildcard ? host.slice(2) : host;
  if (name.includes('*')) return fail('a wildcard is only "*." at the start ("*.example.com")');
  const labels = name.split('.');
  if (name.length > 253 || !labels.every((l) => LABEL.test(l)))
    return fail(
      'must be a host name (letters, digits, "-", "." between labels), "*.NAME", an IPv4 address or [IPv6], with an optional ":PORT"',
    );
  if (wildcard && labels.length < 2)
    return fail('a wildcard needs at least two labels after "*." ("*.example.com", not "*.com")');
  return { ok: true, rule: { kind: wildcard ? 'wildcard' : 'name', host: name, port } };
}

export type PolicyParse =
  | { readonly ok: true; readonly policy: EgressPolicy }
  | { readonly ok: false; readonly field: string; readonly rule: string };

/** The written policy, checked; `field` names the offending part relative to the policy (`allow[2]`, `methods[0]`). */
export function parseEgress(input: EgressInput): PolicyParse {
  if (!EGRESS_MODES.includes(input.mode))
    return { ok: false, field: 'mode', rule: 'must be "none", "open" or "allowlist"' };
  const allow = input.allow ?? [];
  if (input.mode !== 'allowlist' && (allow.length > 0 || input.methods !== undefined))
    return {
      ok: false,
      field: input.allow !== undefined ? 'allow' : 'methods',
      rule: 'only with mode "allowlist"',
    };
  if (allow.length > MAX_ALLOW_ENTRIES)
    return { ok: false, field: 'allow', rule: `at most ${MAX_ALLOW_ENTRIES} entries` };
  const rules: EgressRule[] = [];
  for (const [i, entry] of allow.entries()) {
    const parsed = parseAllowEntry(entry);
    if (!parsed.ok) return { ok: false, field: `allow[${i}]`, rule: parsed.rule };
    rules.push(parsed.rule);
  }
  let methods: string[] | null = null;
  if (input.methods !== undefined) {
    methods = [];
    for (const [i, m] of input.methods.entries()) {
      const upper = m.toUpperCase();
      if (!EGRESS_METHODS.includes(upper))
        return { ok: false, field: `methods[${i}]`, rule: `must be one of ${EGRESS_METHODS.join(', ')}` };
      if (!methods.includes(upper)) methods.push(upper);
    }
    if (methods.length === 0)
      return { ok: false, field: 'methods', rule: 'must list at least one method (omit it for all)' };
  }
  return { ok: true, policy: { mode: input.mode, allow: rules, methods } };
}

/** The written form again (what the receipt freezes and `GET` returns). */
export function egressInputOf(policy: EgressPolicy): EgressInput {
  if (policy.mode !== 'allowlist') return { mode: policy.mode };
  return {
    mode: policy.mode,
    allow: policy.allow.map(ruleText),
    ...(policy.methods !== null ? { methods: [...policy.methods] } : {}),
  };
}

export function ruleText(rule: EgressRule): string {
  const host =
    rule.kind === 'wildcard' ? `*.${rule.host}` : rule.kind === 'ipv6' ? `[${rule.host}]` : rule.host;
  return rule.port === null ? host : `${host}:${rule.port}`;
}

/** `network: none|bridge` as a policy: none is none, bridge is open (the guarded network, as before). */
export function egressOfNetwork(network: 'none' | 'bridge'): EgressPolicy {
  return { mode: network === 'none' ? 'none' : 'open', allow: [], methods: null };
}

/** A requested host in the form rules compare: lower case, no trailing dot, IPv6 without brackets, canonical. */
export function normalHost(host: string): string {
  let h = host.trim().toLowerCase();
  if (h.startsWith('[') && h.endsWith(']')) h = h.slice(1, -1);
  if (h.endsWith('.')) h = h.slice(0, -1);
  return isIpv6(h) ? canonicalIpv6(h) : h;
}

export function hostKind(host: string): 'ipv4' | 'ipv6' | 'name' {
  const h = normalHost(host);
  if (IPV4.test(h)) return 'ipv4';
  if (isIpv6(h)) return 'ipv6';
  return 'name';
}

/** Whether one rule lets `host:port` through. A wildcard never matches its own apex nor a sibling (`evil-x.com` vs `*.x.com`). */
export function ruleMatches(rule: EgressRule, host: string, port: number): boolean {
  const h = normalHost(host);
  const portOk = rule.port === null ? DEFAULT_EGRESS_PORTS.includes(port) : rule.port === port;
  if (!portOk) return false;
  const kind = hostKind(h);
  switch (rule.kind) {
    case 'name':
      return kind === 'name' && h === rule.host;
    case 'wildcard':
      return kind === 'name' && h.endsWith(`.${rule.host}`) && h.length > rule.host.length + 1;
    case 'ipv4':
    case 'ipv6':
      return kind === rule.kind && h === rule.host;
  }
}

export type EgressVerdict =
  { readonly allowed: true } | { readonly allowed: false; readonly reason: EgressRefusal };

export type EgressRefusal =
  | 'mode_none'
  | 'host_not_allowed'
  | 'method_not_allowed'
  | 'sni_mismatch'
  | 'host_header_mismatch'
  | 'not_tls'
  | 'not_through_proxy'
  | 'unknown_client'
  | 'forbidden_address'
  | 'bad_request'
  | 'resolve_failed';

/** The decision for one attempt; `method` null when it cannot be seen (inside CONNECT). */
export function decide(
  policy: EgressPolicy,
  host: string,
  port: number,
  method: string | null,
): EgressVerdict {
  if (policy.mode === 'open') return { allowed: true };
  if (policy.mode === 'none') return { allowed: false, reason: 'mode_none' };
  if (!policy.allow.some((r) => ruleMatches(r, host, port)))
    return { allowed: false, reason: 'host_not_allowed' };
  if (method !== null && policy.methods !== null && !policy.methods.includes(method.toUpperCase()))
    return { allowed: false, reason: 'method_not_allowed' };
  return { allowed: true };
}

function isIpv6(text: string): boolean {
  if (!text.includes(':') || !/^[0-9a-f:.]+$/.test(text)) return false;
  const double = text.split('::').length - 1;
  if (double > 1) return false;
  const groups = text.split(':').filter((g) => g !== '');
  return groups.length <= 8 && groups.every((g) => /^[0-9a-f]{1,4}$/.test(g) || IPV4.test(g));
}

/** The WHATWG URL parser's form of an IPv6 address (lower case, zeros compressed): one spelling per address. */
function canonicalIpv6(text: string): string {
  try {
    return new URL(`http://[${text}]/`).hostname.slice(1, -1);
  } catch {
    return text;
  }
}

/**
 * The policy a pair runs under: its own (or the manifest's), else its network's. A written policy decides the
 * network: none → "none", open → the guarded pairs network, allowlist → the egress network.
 */
export function effectiveEgress(
  network: 'none' | 'bridge' | 'allowlist' | undefined,
  written: EgressInput | undefined,
): EgressPolicy {
  if (written === undefined)
    return network === 'allowlist'
      ? { mode: 'none', allow: [], methods: null }
      : egressOfNetwork(network ?? 'bridge');
  const parsed = parseEgress(written);
  // Checked with the manifest already; a policy that fails here is refused, never widened.
  return parsed.ok ? parsed.policy : { mode: 'none', allow: [], methods: null };
}

export function networkOfEgress(policy: EgressPolicy): 'none' | 'bridge' | 'allowlist' {
  return policy.mode === 'none' ? 'none' : policy.mode === 'open' ? 'bridge' : 'allowlist';
}
