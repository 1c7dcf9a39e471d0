import { isCredentialLikePath } from './manifest/secrets.js';

/**
 * Which host paths a pair or session may bind-mount (the hostile-pair rules). Pure: the caller passes
 * paths already resolved (realpath) so a symlink cannot smuggle a protected path past these checks.
 *
 * NOTE: minimal version written for the `serve` branch; the hostile-pair branch owns the full one with the
 * same API, which replaces this file at merge.
 */
export interface ProtectedPaths {
  readonly outputDir?: string;
  readonly registryPath?: string;
  readonly homeDir?: string;
  readonly engineSocketPaths?: readonly string[];
}

export interface MountRequest {
  readonly field: string;
  readonly hostPath: string;
}

export interface MountIssue {
  readonly field: string;
  readonly message: string;
}

function normalize(path: string): string {
  const parts: string[] = [];
  for (const part of path.split('/')) {
    if (part === '' || part === '.') continue;
    if (part === '..') parts.pop();
    else parts.push(part);
  }
  return `/${parts.join('/')}`;
}

/** `a` equals `b` or lies inside it. */
function within(a: string, b: string): boolean {
  return a === b || b === '/' || a.startsWith(`${b}/`);
}

export function checkMounts(mounts: readonly MountRequest[], protectedPaths: ProtectedPaths): MountIssue[] {
  const issues: MountIssue[] = [];
  const guarded: { path: string; what: string; insideAllowed: boolean }[] = [];
  if (protectedPaths.outputDir !== undefined) guarded.push({ path: normalize(protectedPaths.outputDir), what: 'the evidence directory', insideAllowed: false });
  if (protectedPaths.registryPath !== undefined) guarded.push({ path: normalize(protectedPaths.registryPath), what: 'the host registry', insideAllowed: false });
  // Inside the home directory is fine (a project checkout); the home directory itself or a parent is not.
  if (protectedPaths.homeDir !== undefined) guarded.push({ path: normalize(protectedPaths.homeDir), what: 'the home directory', insideAllowed: true });
  for (const socket of protectedPaths.engineSocketPaths ?? []) guarded.push({ path: normalize(socket), what: 'the Docker engine socket', insideAllowed: false });
  for (const mount of mounts) {
    if (!mount.hostPath.startsWith('/')) {
      issues.push({ field: mount.field, message: 'must be an absolute path' });
      continue;
    }
    const path = normalize(mount.hostPath);
    if (path === '/') {
      issues.push({ field: mount.field, message: 'must not be the root directory' });
      continue;
    }
    if (isCredentialLikePath(path)) {
      issues.push({ field: mount.field, message: 'looks like a credential file; it may not be mounted' });
      continue;
    }
    for (const g of guarded) {
      const exposes = within(g.path, path) || (!g.insideAllowed && within(path, g.path));
      if (exposes) {
        issues.push({ field: mount.field, message: `must not expose ${g.what}` });
        break;
      }
    }
  }
  return issues;
}
