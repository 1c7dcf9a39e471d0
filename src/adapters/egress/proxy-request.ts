/** What the egress proxy reads off a request: the client's token, a CONNECT's authority, a Host header's match. */
import { normalHost } from '../../core/egress/policy.js';

/** The token of `Proxy-Authorization: Basic base64(user:token)`. */
export function tokenOf(header: string | undefined): string | undefined {
  if (header === undefined) return undefined;
  const match = /^Basic\s+([A-Za-z0-9+/=]+)$/i.exec(header.trim());
  if (match === null) return undefined;
  const decoded = Buffer.from(match[1] ?? '', 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  return colon < 0 ? undefined : decoded.slice(colon + 1);
}

/** `host:port` of a CONNECT (`[v6]:port` too); null when malformed. */
export function parseAuthority(text: string): { host: string; port: number } | null {
  const match = /^(\[[0-9a-fA-F:.]+\]|[^:[\]\s/]+):(\d{1,5})$/.exec(text);
  if (match === null) return null;
  const port = Number(match[2]);
  if (port < 1 || port > 65_535) return null;
  return { host: normalHost(match[1] ?? ''), port };
}

export function sameAuthority(hostHeader: string, host: string, port: number): boolean {
  const parsed = /^(\[[^\]]+\]|[^:]+)(?::(\d+))?$/.exec(hostHeader.trim());
  if (parsed === null) return false;
  const headerPort = parsed[2] !== undefined ? Number(parsed[2]) : 80;
  return normalHost(parsed[1] ?? '') === host && headerPort === port;
}

/** A plain request's absolute-form target (`http://host:port/path`): its URL, host and port (80 when absent). */
export function absoluteTarget(text: string): { url: URL; host: string; port: number } | null {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return null;
  }
  return { url, host: normalHost(url.hostname), port: Number(url.port || 80) };
}
