import { networkInterfaces } from 'node:os';

/** Every IP address of this host's interfaces (loopback included). */
export function hostAddresses(): string[] {
  return Object.values(networkInterfaces()).flatMap((list) => (list ?? []).map((i) => i.address));
}

/**
 * The engine's Unix socket paths: DOCKER_HOST when it is `unix://…`, plus the default socket locations
 * (a pair must never get the engine's socket mounted, wherever the engine listens).
 */
export function engineSocketPaths(env: Readonly<Record<string, string | undefined>> = process.env): string[] {
  const paths = ['/var/run/docker.sock', '/run/docker.sock'];
  const host = env['DOCKER_HOST'];
  if (host?.startsWith('unix://') === true) paths.unshift(host.slice('unix://'.length));
  return paths;
}
