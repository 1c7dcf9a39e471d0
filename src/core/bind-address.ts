/**
 * `--bind-address`: published ports bind to it, so it must be an IP address this host has (or the
 * unspecified address, 0.0.0.0 / ::, which binds every interface). Pure: the caller lists the host's addresses.
 */
/** `--bind-address` of every command when not given: loopback only. */
export const DEFAULT_BIND_ADDRESS = '127.0.0.1';

const IPV4 = /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$/;
const IPV6 = /^[0-9A-Fa-f:.]+$/;
const UNSPECIFIED = new Set(['0.0.0.0', '::']);

function looksLikeIp(value: string): boolean {
  return IPV4.test(value) || (value.includes(':') && IPV6.test(value));
}

/** The rule `value` breaks, or null when it is usable. */
export function bindAddressProblem(value: string, hostAddresses: readonly string[]): string | null {
  if (!looksLikeIp(value)) return 'must be an IP address (e.g. 127.0.0.1), not a host name';
  if (UNSPECIFIED.has(value)) return null;
  const wanted = value.toLowerCase();
  if (hostAddresses.some((a) => a.toLowerCase() === wanted)) return null;
  return `must be an address this host has (${hostAddresses.join(', ') || 'none found'})`;
}
