import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { engineSocketPaths } from './adapters/host-addresses.js';
import { passwdHomes } from './adapters/host-homes.js';
import type { ContainerRuntime } from './app/ports/container-runtime.js';
import { PACKAGE_ROOT } from './package-root.js';

/** What no pair may get mounted besides the output directory and the registry: $HOME and the engine's sockets. */
export function hostProtectedPaths(): { homeDir: string; engineSocketPaths: string[] } {
  return { homeDir: homedir(), engineSocketPaths: engineSocketPaths() };
}

/** The engine's own folders: its real data root (asked, `DockerRootDir`) when it answers; containerd's is built in. */
async function engineOwnedDirs(runtime: Pick<ContainerRuntime, 'info'>): Promise<string[]> {
  const root = await runtime.info().then(
    (i) => i.dataRoot,
    () => undefined,
  );
  return root !== undefined && root.startsWith('/') ? [root] : [];
}

/**
 * The host's part of the mount rules (docs/spec.md 5.3): $HOME and every user's home, the engine's sockets, its real
 * data root, and `extraOwned` (our own state folders: the token file's, serve's data directory).
 */
export async function hostMountRules(
  runtime: Pick<ContainerRuntime, 'info'>,
  extraOwned: readonly string[] = [],
): Promise<{ homeDir: string; homeDirs: string[]; engineSocketPaths: string[]; ownedDirs: string[] }> {
  const [homeDirs, engineDirs] = await Promise.all([passwdHomes(), engineOwnedDirs(runtime)]);
  return { ...hostProtectedPaths(), homeDirs, ownedDirs: [...engineDirs, ...codeDirs(), ...extraOwned] };
}

/**
 * The folders our own code runs from: this package's launcher, build, sources, scripts and dependencies, and the
 * folder of the Node binary running it, and V8's compile cache of it. Root runs them next time: a writable mount of one, or of a folder holding
 * one (the checkout, `/work`), would let a pair or a `serve` caller change what root runs. Protected like the
 * engine's data (never be, contain or lie inside; each also by its real path: a linked `node_modules` too). Other
 * folders of a checkout stay mountable (the demo's work folder lies in it).
 */
export function codeDirs(): string[] {
  const inPackage = ['bin', 'dist', 'node_modules', 'src', 'scripts', 'clients', 'docker', '.ci', '.git'];
  // V8's compile cache of our code (bin/run.js): loaded as code by the next run.
  const xdg = process.env.XDG_CACHE_HOME ?? '';
  const cacheBase = xdg.startsWith('/') ? xdg : join(homedir(), '.cache');
  const compileCaches = [join(cacheBase, 'roboguide-eval'), process.env.NODE_COMPILE_CACHE ?? ''].filter(
    (p) => p.startsWith('/'),
  );
  return [...inPackage.map((name) => join(PACKAGE_ROOT, name)), dirname(process.execPath), ...compileCaches];
}

/** Who may own a bind source's folders: root and the supervisor's own user. */
export function mountOwners(): number[] {
  const uid = process.getuid?.();
  return uid === undefined ? [0] : [...new Set([0, uid])];
}
