import { lstat, mkdir, realpath } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { isAbsolute, join } from 'node:path';

/**
 * The test kit's state folder (`<base>/roboguide-testkit-<uid>/servers`): the records of the servers it started,
 * which the next run's sweep acts on (kills a process, removes containers and a folder). Whoever can write that
 * folder chooses what the sweep does, so it is used only when it is provably this user's alone: every component
 * below the base is a real folder (lstat: never a link), owned by this user, with no permission for anyone else;
 * the base itself is `$XDG_RUNTIME_DIR` when set (a per-user folder), else the temp folder, and must not let another
 * user replace what lies in it (writable by others only with the sticky bit). Otherwise the kit refuses, naming the
 * folder and the rule, and does nothing.
 */

/** The state folder is not provably this user's: the kit neither reads nor writes it. */
export class TestKitStateError extends Error {
  readonly code = 'E_TESTKIT_STATE';
  readonly path: string;
  constructor(path: string, rule: string) {
    super(
      `the test kit's state folder ${path} ${rule}: refusing to use it (another local user could plant records ` +
        `that make the sweep kill, remove or delete what is not ours); remove it, or set XDG_RUNTIME_DIR`,
    );
    this.name = 'TestKitStateError';
    this.path = path;
  }
}

function uid(): number {
  return process.getuid?.() ?? -1;
}

/** `$XDG_RUNTIME_DIR` when set to an absolute path, else the temp folder. */
export function testKitBaseDir(env: NodeJS.ProcessEnv = process.env): string {
  const runtime = env['XDG_RUNTIME_DIR'];
  return runtime !== undefined && isAbsolute(runtime) ? runtime : tmpdir();
}

/** The folder of this user's server records (one file per running server). */
export function serverRecordsDir(env: NodeJS.ProcessEnv = process.env): string {
  return join(testKitBaseDir(env), `roboguide-testkit-${uid()}`, 'servers');
}

/**
 * The records folder, checked component by component (and made, 0700, one component at a time when `missing` is
 * 'create'); null when it does not exist and `missing` is 'absent'. Throws TestKitStateError when a component is
 * a link, not a folder, another user's, or open to others.
 */
export async function checkedRecordsDir(
  missing: 'create' | 'absent',
  env: NodeJS.ProcessEnv = process.env,
): Promise<string | null> {
  const base = await realpath(testKitBaseDir(env));
  const baseStat = await lstat(base);
  if (!baseStat.isDirectory()) throw new TestKitStateError(base, 'is not a folder');
  if ((baseStat.mode & 0o002) !== 0 && (baseStat.mode & 0o1000) === 0)
    throw new TestKitStateError(base, 'is writable by every user without the sticky bit');
  if (baseStat.uid !== uid() && baseStat.uid !== 0)
    throw new TestKitStateError(base, `is owned by uid ${baseStat.uid}, neither this user nor root`);
  let current = base;
  for (const name of [`roboguide-testkit-${uid()}`, 'servers']) {
    current = join(current, name);
    let stat = await lstat(current).catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') return null;
      throw err;
    });
    if (stat === null) {
      if (missing === 'absent') return null;
      await mkdir(current, { mode: 0o700 }).catch((err: NodeJS.ErrnoException) => {
        if (err.code !== 'EEXIST') throw err;
      });
      stat = await lstat(current);
    }
    if (stat.isSymbolicLink()) throw new TestKitStateError(current, 'is a symbolic link');
    if (!stat.isDirectory()) throw new TestKitStateError(current, 'is not a folder');
    if (stat.uid !== uid())
      throw new TestKitStateError(current, `is owned by uid ${stat.uid}, not by this user (uid ${uid()})`);
    if ((stat.mode & 0o077) !== 0)
      throw new TestKitStateError(
        current,
        `has mode 0${(stat.mode & 0o777).toString(8)}, not 0700 (other users could write records into it)`,
      );
  }
  return current;
}
