import { isCredentialLikePath } from './manifest/secrets.js';

/**
 * Which host paths a pair may have bind-mounted (or have us write to): a pair is hostile, so no mount may
 * reach the evidence, the host registry, the engine's socket, the host's system folders or the home folder.
 * Pure: absolute path strings only; callers resolve real paths (symlinks) through the FileSystem port first.
 */

export interface ProtectedPaths {
  /** The output directory (evidence): a mount may neither contain it nor lie inside it. */
  readonly outputDir?: string;
  /** The registry database file: a mount may neither contain it nor be it. */
  readonly registryPath?: string;
  /** $HOME: a mount may lie inside it, but may not be it or contain it. */
  readonly homeDir?: string;
  /** The engine's Unix sockets: a mount may not contain one. */
  readonly engineSocketPaths?: readonly string[];
}

/** `field` names the manifest field, e.g. `jobs[0].cwd`; `hostPath` is absolute and already resolved (realpath). */
export interface MountRequest {
  readonly field: string;
  readonly hostPath: string;
}

export interface MountIssue {
  readonly field: string;
  readonly message: string;
}

/** Host folders whose contents belong to the system or the engine: never mounted, nor anything inside or above them. */
export const SYSTEM_PATHS: readonly string[] = ['/etc', '/proc', '/sys', '/dev', '/run', '/var/run', '/var/lib/docker'];

/** `/a//b/./c/../d/` → `/a/b/d`; the root stays `/`. */
export function normalizeAbsolute(path: string): string {
  const out: string[] = [];
  for (const segment of path.split('/')) {
    if (segment === '' || segment === '.') continue;
    if (segment === '..') out.pop();
    else out.push(segment);
  }
  return `/${out.join('/')}`;
}

/** True when `inner` is `outer` or lies below it (both normalized). */
export function isWithin(inner: string, outer: string): boolean {
  if (outer === '/') return true;
  return inner === outer || inner.startsWith(`${outer}/`);
}

/** Every rule each mount breaks; empty when all are allowed. */
export function checkMounts(mounts: readonly MountRequest[], protectedPaths: ProtectedPaths): MountIssue[] {
  const issues: MountIssue[] = [];
  for (const mount of mounts) {
    for (const message of mountProblems(mount.hostPath, protectedPaths)) issues.push({ field: mount.field, message });
  }
  return issues;
}

function mountProblems(hostPath: string, p: ProtectedPaths): string[] {
  if (!hostPath.startsWith('/')) return [`host path ${hostPath} must be absolute`];
  const path = normalizeAbsolute(hostPath);
  const problems: string[] = [];
  if (path === '/') problems.push('must not be / (the whole host file system)');
  else {
    const system = SYSTEM_PATHS.find((s) => isWithin(path, s) || isWithin(s, path));
    if (system !== undefined) problems.push(`must not be, contain or lie inside the system folder ${system}`);
  }
  if (p.outputDir !== undefined) {
    const output = normalizeAbsolute(p.outputDir);
    if (output === path) problems.push(`must not be the output directory ${output} (a pair could rewrite evidence)`);
    else if (isWithin(output, path)) problems.push(`must not contain the output directory ${output} (a pair could rewrite evidence)`);
    else if (isWithin(path, output)) problems.push(`must not lie inside the output directory ${output} (a pair could rewrite evidence)`);
  }
  if (p.registryPath !== undefined) {
    const registry = normalizeAbsolute(p.registryPath);
    if (isWithin(registry, path) || isWithin(path, registry)) {
      problems.push(`must not contain the registry database ${registry} (a pair could rewrite the host's capacity ledger)`);
    }
  }
  for (const socket of p.engineSocketPaths ?? []) {
    const normalized = normalizeAbsolute(socket);
    if (isWithin(normalized, path)) problems.push(`must not contain the engine socket ${normalized} (a pair could control the engine)`);
  }
  if (p.homeDir !== undefined) {
    const home = normalizeAbsolute(p.homeDir);
    if (home !== '/' && isWithin(home, path)) problems.push(`must not be or contain the home folder ${home} (use a folder inside it)`);
  }
  return problems;
}

/**
 * `checkMounts` for mounts a caller names freely (serve sessions): also refuses a credential-looking file or
 * folder (`.env`, `*.pem`, `id_rsa*`, `*credentials*`, …), which a pair could read and print.
 */
export function checkFreeMounts(mounts: readonly MountRequest[], protectedPaths: ProtectedPaths): MountIssue[] {
  const issues = checkMounts(mounts, protectedPaths);
  for (const mount of mounts) {
    if (isCredentialLikePath(mount.hostPath)) issues.push({ field: mount.field, message: 'looks like a credential file; it may not be mounted' });
  }
  return issues;
}

/**
 * The protected paths as real paths (symlinks resolved by `real`, e.g. `$HOME` → `/var/home/u`), so that they
 * compare with mounts that were resolved too; a path that cannot be resolved is kept normalized. Each engine
 * socket is kept both as named and as resolved.
 */
export async function resolveProtectedPaths(p: ProtectedPaths, real: (path: string) => Promise<string>): Promise<ProtectedPaths> {
  const resolve = (path: string | undefined): Promise<string | undefined> =>
    path === undefined ? Promise.resolve(undefined) : real(path).catch(() => normalizeAbsolute(path));
  const [outputDir, registryPath, homeDir] = await Promise.all([resolve(p.outputDir), resolve(p.registryPath), resolve(p.homeDir)]);
  const sockets = await Promise.all((p.engineSocketPaths ?? []).map(async (s) => [normalizeAbsolute(s), await resolve(s)]));
  return {
    ...(outputDir !== undefined ? { outputDir } : {}),
    ...(registryPath !== undefined ? { registryPath } : {}),
    ...(homeDir !== undefined ? { homeDir } : {}),
    engineSocketPaths: [...new Set(sockets.flat().filter((s): s is string => s !== undefined))],
  };
}
