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
  /**
   * Every user's home folder (from the password database) besides `homeDir`: a mount may lie inside one, but may not
   * be it, contain it, or lie in one of its hidden folders (`~/.config`, `~/.ssh`…).
   */
  readonly homeDirs?: readonly string[];
  /**
   * Folders that belong to the engine or to us, protected like the system folders (never be, contain or lie inside):
   * the engine's real data root (asked from the engine), the token file's folder, serve's data directory, other
   * output directories of ours.
   */
  readonly ownedDirs?: readonly string[];
  /**
   * The allowlist (real paths): every mount must lie under one of them. Absent or empty: the default roots
   * (`defaultMountRoots(homeDir)`); the CLI passes the compiled `--mount-root` list (default plus the operator's, or
   * the operator's only with `--mount-root-only`).
   */
  readonly mountRoots?: readonly string[];
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

/**
 * Host folders whose contents belong to the system or the engine: never mounted, nor anything inside or above them.
 * Every top-level folder whose name starts with `lib` (`/lib`, `/lib64`, `/libx32`…) counts too (`isSystemLib`).
 */
export const SYSTEM_PATHS: readonly string[] = [
  '/usr',
  '/bin',
  '/sbin',
  '/lib',
  '/boot',
  '/etc',
  '/proc',
  '/sys',
  '/dev',
  '/run',
  '/var/run',
  '/var/lib/docker',
  '/var/lib/containerd',
];

/**
 * Where host mounts may lie when the operator names no other roots (docs/spec.md 5.3): the folders an evaluation
 * operator keeps work in, and nothing that holds the system's or a service's state (`/var`, `/opt`, `/srv`, `/mnt`,
 * `/media` are not here: name such a folder with `--mount-root`). The invoking user's home folder is a default root
 * too (`defaultMountRoots`): the home rules still refuse the home itself and its hidden folders, so this allows its
 * non-hidden subfolders. Every other rule still applies inside a root.
 */
export const DEFAULT_MOUNT_ROOTS: readonly string[] = ['/tmp', '/work', '/data', '/scratch'];

/** The default allowlist: the invoking user's home folder (when known and not `/`) and DEFAULT_MOUNT_ROOTS. */
export function defaultMountRoots(homeDir: string | undefined): string[] {
  const home = homeDir !== undefined ? normalizeAbsolute(homeDir) : '/';
  return [...(home !== '/' ? [home] : []), ...DEFAULT_MOUNT_ROOTS];
}

/** Home folders protected even when the password database cannot be read: `/root` and the usual parent `/home`. */
export const DEFAULT_HOME_PATHS: readonly string[] = ['/root', '/home'];

/**
 * Folders that hold credentials wherever they are (`.ssh`, `.gnupg`, `.aws`, `.kube`, `.docker`, `gcloud` under
 * `.config`): a mount may be none of them and lie inside none of them, like a credential file.
 */
const CREDENTIAL_FOLDERS = new Set(['.ssh', '.gnupg', '.aws', '.kube', '.docker']);

/** The first component of `path` (normalized) that is a credential folder or looks like a credential file, or null. */
export function credentialComponent(path: string): string | null {
  const segments = normalizeAbsolute(path)
    .split('/')
    .filter((s) => s !== '');
  for (const [i, segment] of segments.entries()) {
    const lower = segment.toLowerCase();
    const prefix = `/${segments.slice(0, i + 1).join('/')}`;
    if (CREDENTIAL_FOLDERS.has(lower)) return prefix;
    if (lower === 'gcloud' && segments[i - 1]?.toLowerCase() === '.config') return prefix;
    if (isCredentialLikePath(segment)) return prefix;
  }
  return null;
}

/** `/lib`, `/lib64`, `/libx32`, `/lib32` and anything inside one: a top-level folder named `lib*`. */
function systemLibOf(path: string): string | null {
  const first = path.split('/')[1] ?? '';
  return first.startsWith('lib') ? `/${first}` : null;
}

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
    for (const message of mountProblems(mount.hostPath, protectedPaths))
      issues.push({ field: mount.field, message });
  }
  return issues;
}

function mountProblems(hostPath: string, p: ProtectedPaths): string[] {
  if (!hostPath.startsWith('/')) return [`host path ${hostPath} must be absolute`];
  const path = normalizeAbsolute(hostPath);
  const problems: string[] = [];
  if (path === '/') problems.push('must not be / (the whole host file system)');
  else {
    const system = SYSTEM_PATHS.find((s) => isWithin(path, s) || isWithin(s, path)) ?? systemLibOf(path);
    if (system !== undefined && system !== null)
      problems.push(`must not be, contain or lie inside the system folder ${system}`);
  }
  for (const owned of p.ownedDirs ?? []) {
    const dir = normalizeAbsolute(owned);
    if (dir !== '/' && (isWithin(path, dir) || isWithin(dir, path))) {
      problems.push(
        `must not be, contain or lie inside ${dir} (the engine's data, our own state or the code root runs: a pair could rewrite it)`,
      );
    }
  }
  const credential = credentialComponent(path);
  if (credential !== null)
    problems.push(
      `must not be or lie inside the credential-looking ${credential} (a pair could read and print it)`,
    );
  const homes = [
    ...new Set(
      [...(p.homeDir !== undefined ? [p.homeDir] : []), ...DEFAULT_HOME_PATHS, ...(p.homeDirs ?? [])].map(
        normalizeAbsolute,
      ),
    ),
  ];
  for (const home of homes) {
    if (home === '/') continue;
    if (isWithin(home, path))
      problems.push(`must not be or contain the home folder ${home} (use a folder inside it)`);
    else if (isWithin(path, home) && (path.slice(home.length + 1).split('/')[0] ?? '').startsWith('.')) {
      problems.push(
        `must not lie in a hidden folder of the home folder ${home} (configuration and credentials live there)`,
      );
    }
  }
  const given = (p.mountRoots ?? []).map(normalizeAbsolute);
  const roots = given.length > 0 ? given : defaultMountRoots(p.homeDir);
  if (!roots.some((root) => root !== '/' && isWithin(path, root))) {
    problems.push(
      `must lie under one of the allowed mount roots (${roots.join(', ')}; add one with --mount-root)`,
    );
  }
  if (p.outputDir !== undefined) {
    const output = normalizeAbsolute(p.outputDir);
    if (output === path)
      problems.push(`must not be the output directory ${output} (a pair could rewrite evidence)`);
    else if (isWithin(output, path))
      problems.push(`must not contain the output directory ${output} (a pair could rewrite evidence)`);
    else if (isWithin(path, output))
      problems.push(`must not lie inside the output directory ${output} (a pair could rewrite evidence)`);
  }
  if (p.registryPath !== undefined) {
    const registry = normalizeAbsolute(p.registryPath);
    if (isWithin(registry, path) || isWithin(path, registry)) {
      problems.push(
        `must not contain the registry database ${registry} (a pair could rewrite the host's capacity ledger)`,
      );
    }
  }
  for (const socket of p.engineSocketPaths ?? []) {
    const normalized = normalizeAbsolute(socket);
    if (isWithin(normalized, path))
      problems.push(`must not contain the engine socket ${normalized} (a pair could control the engine)`);
  }
  return problems;
}

/**
 * `checkMounts` for mounts a caller names freely (serve sessions): also refuses a credential-looking file or
 * folder (`.env`, `*.pem`, `id_rsa*`, `*credentials*`, …), which a pair could read and print.
 */
export function checkFreeMounts(
  mounts: readonly MountRequest[],
  protectedPaths: ProtectedPaths,
): MountIssue[] {
  // The credential rule is one of checkMounts' own now (every component of the path, for pairs and sessions alike).
  return checkMounts(mounts, protectedPaths);
}

/**
 * The protected paths as real paths (symlinks resolved by `real`, e.g. `$HOME` → `/var/home/u`), so that they
 * compare with mounts that were resolved too; a path that cannot be resolved is kept normalized. Each engine
 * socket is kept both as named and as resolved.
 */
export async function resolveProtectedPaths(
  p: ProtectedPaths,
  real: (path: string) => Promise<string>,
): Promise<ProtectedPaths> {
  const resolve = (path: string | undefined): Promise<string | undefined> =>
    path === undefined ? Promise.resolve(undefined) : real(path).catch(() => normalizeAbsolute(path));
  const [outputDir, registryPath, homeDir] = await Promise.all([
    resolve(p.outputDir),
    resolve(p.registryPath),
    resolve(p.homeDir),
  ]);
  // Both as named and as resolved: a protected folder reached through a link is protected by either name.
  const both = async (paths: readonly string[] | undefined): Promise<string[]> => [
    ...new Set(
      (await Promise.all((paths ?? []).map(async (s) => [normalizeAbsolute(s), await resolve(s)])))
        .flat()
        .filter((s): s is string => s !== undefined),
    ),
  ];
  const [engineSocketPaths, homeDirs, ownedDirs] = await Promise.all([
    both(p.engineSocketPaths),
    both([...DEFAULT_HOME_PATHS, ...(p.homeDirs ?? [])]),
    both(p.ownedDirs),
  ]);
  // An allowlisted root counts by its real path only (a link in it could point anywhere); none given: the defaults.
  const given = p.mountRoots ?? [];
  const mountRoots = await Promise.all(
    (given.length > 0 ? given : defaultMountRoots(p.homeDir)).map(
      async (r) => (await resolve(r)) ?? normalizeAbsolute(r),
    ),
  );
  return {
    ...(outputDir !== undefined ? { outputDir } : {}),
    ...(registryPath !== undefined ? { registryPath } : {}),
    ...(homeDir !== undefined ? { homeDir } : {}),
    engineSocketPaths,
    homeDirs,
    ownedDirs,
    ...(mountRoots.length > 0 ? { mountRoots } : {}),
  };
}
