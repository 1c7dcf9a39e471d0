import type { RegistryAuth } from '../../app/ports/image-pulls.js';
import { registryHostOf, repositoryOf } from '../../core/image-plan.js';

/**
 * The compressed size of an image (its config and layers) as its registry's manifest states it (issue 43): what
 * the disk budget weighs before the image is pulled. Read over the registry's HTTP API v2 at the digest `start`
 * froze; the credentials go only to that registry (the Authorization header of these requests, or its token
 * service), never anywhere else. Null when it cannot be read (the budget then uses what pulls have measured).
 */
const ACCEPT = [
  'application/vnd.docker.distribution.manifest.v2+json',
  'application/vnd.docker.distribution.manifest.list.v2+json',
  'application/vnd.oci.image.manifest.v1+json',
  'application/vnd.oci.image.index.v1+json',
].join(', ');

const LOOPBACK = /^(localhost|127\.\d+\.\d+\.\d+|\[::1\])(:\d+)?$/;

export async function compressedBytes(
  image: string,
  digest: string,
  auth: RegistryAuth | undefined,
  timeoutMs = 10_000,
): Promise<number | null> {
  try {
    const host = registryHostOf(image);
    const base =
      host === 'docker.io'
        ? 'https://registry-1.docker.io'
        : `${LOOPBACK.test(host) ? 'http' : 'https'}://${host}`;
    let repo = repositoryOf(image);
    if (repo.startsWith(`${host}/`)) repo = repo.slice(host.length + 1);
    if (host === 'docker.io' && !repo.includes('/')) repo = `library/${repo}`;
    const get = (path: string): Promise<unknown> =>
      authedJson(`${base}/v2/${repo}${path}`, repo, auth, timeoutMs);
    let manifest = (await get(`/manifests/${digest}`)) as Manifest;
    if (manifest.manifests !== undefined) {
      const pick =
        manifest.manifests.find((m) => m.platform?.os === 'linux' && m.platform.architecture === 'amd64') ??
        manifest.manifests[0];
      if (pick?.digest === undefined) return null;
      manifest = (await get(`/manifests/${pick.digest}`)) as Manifest;
    }
    const layers = manifest.layers;
    if (layers === undefined) return null;
    return layers.reduce((sum, l) => sum + (l.size ?? 0), manifest.config?.size ?? 0);
  } catch {
    return null;
  }
}

interface Manifest {
  readonly config?: { readonly size?: number };
  readonly layers?: readonly { readonly size?: number }[];
  readonly manifests?: readonly {
    readonly digest?: string;
    readonly platform?: { os?: string; architecture?: string };
  }[];
}

async function authedJson(
  url: string,
  repo: string,
  auth: RegistryAuth | undefined,
  timeoutMs: number,
): Promise<unknown> {
  const headers: Record<string, string> = { accept: ACCEPT };
  let res = await fetch(url, { headers, signal: AbortSignal.timeout(timeoutMs) });
  if (res.status === 401) {
    const challenge = res.headers.get('www-authenticate') ?? '';
    await res.body?.cancel();
    headers['authorization'] = await authorization(challenge, repo, auth, timeoutMs);
    res = await fetch(url, { headers, signal: AbortSignal.timeout(timeoutMs) });
  }
  if (!res.ok) {
    await res.body?.cancel();
    throw new Error(`registry answered ${res.status}`);
  }
  return res.json();
}

function basicOf(auth: RegistryAuth | undefined): string | null {
  if (auth?.username === undefined || auth.password === undefined) return null;
  return `Basic ${Buffer.from(`${auth.username}:${auth.password}`).toString('base64')}`;
}

async function authorization(
  challenge: string,
  repo: string,
  auth: RegistryAuth | undefined,
  timeoutMs: number,
): Promise<string> {
  const basic = basicOf(auth);
  if (/^basic/i.test(challenge)) {
    if (basic === null) throw new Error('the registry asks for credentials');
    return basic;
  }
  const params = new Map<string, string>(
    [...challenge.matchAll(/(\w+)="([^"]*)"/g)].map((m): [string, string] => [m[1] ?? '', m[2] ?? '']),
  );
  const realm = params.get('realm');
  if (!/^bearer/i.test(challenge) || realm === undefined) throw new Error('unknown registry challenge');
  const tokenUrl = new URL(realm);
  const service = params.get('service');
  if (service !== undefined) tokenUrl.searchParams.set('service', service);
  tokenUrl.searchParams.set('scope', params.get('scope') ?? `repository:${repo}:pull`);
  const res = await fetch(tokenUrl, {
    headers: basic !== null ? { authorization: basic } : {},
    signal: AbortSignal.timeout(timeoutMs),
  });
  if (!res.ok) {
    await res.body?.cancel();
    throw new Error(`token service answered ${res.status}`);
  }
  const body = (await res.json()) as { token?: string; access_token?: string };
  const token = body.token ?? body.access_token;
  if (token === undefined) throw new Error('no token');
  return `Bearer ${token}`;
}
