import { randomBytes } from 'node:crypto';
import { constants } from 'node:fs';
import { mkdir, open, rename, unlink, type FileHandle } from 'node:fs/promises';
import { ToolError } from '../core/errors.js';

/**
 * openat(2)-style steps for writing into folders a pair can change (its cwd): Node has no openat, but a path
 * `/proc/self/fd/N/<name>` resolves `/proc/self/fd/N` to the very folder fd N holds (a magic link, wherever that
 * folder has been renamed to since) and then exactly one component, `name`, inside it. Every step opens one
 * component with O_PATH | O_NOFOLLOW | O_DIRECTORY, so a symbolic link anywhere — planted before or during the
 * walk — is refused, never followed, and a folder renamed under us is followed as the object we hold, never by
 * its old name. Linux only (O_PATH, /proc).
 */

/** O_PATH on Linux (x86-64 and arm64): an fd that names a file system object without opening it for I/O. */
export const O_PATH = 0o10000000;
/** One walk step's open: the object itself (O_PATH), never through a link, a folder or nothing. */
export const STEP_FLAGS = O_PATH | constants.O_NOFOLLOW | constants.O_DIRECTORY;

/** The error of a walk that met a link or a non-folder: `path` is the component refused. */
export class UnsafePathError extends ToolError {
  readonly path: string;
  constructor(path: string, rule: string) {
    super('E_UNSAFE_PATH', `${path} ${rule} (a folder on this path is never followed through a link)`);
    this.path = path;
  }
}

/** The path of `name` inside the folder `dir` holds, resolved relative to that object (one openat step). */
export function at(dir: FileHandle, name?: string): string {
  return name === undefined ? `/proc/self/fd/${dir.fd}` : `/proc/self/fd/${dir.fd}/${name}`;
}

/**
 * An O_PATH handle on the folder `path` (absolute), walked from `/` one component at a time without following any
 * link. A missing component is made (mkdir relative to its parent's handle, `mode`, then opened the same way) when
 * `missing` is 'create', else the walk fails with ENOENT. A link or a non-folder anywhere: UnsafePathError.
 * `check`, when given, is called on every folder held on the way (`/` first, the folder itself last) and may throw.
 */
export async function openDirNoFollow(
  path: string,
  missing: 'create' | 'refuse',
  mode = 0o700,
  check?: (dir: FileHandle, walked: string) => Promise<void>,
): Promise<FileHandle> {
  if (!path.startsWith('/')) throw new UnsafePathError(path, 'must be absolute');
  const names = path.split('/').filter((s) => s !== '' && s !== '.');
  if (names.includes('..')) throw new UnsafePathError(path, 'must not hold ..');
  let dir = await open('/', STEP_FLAGS);
  let walked = '';
  try {
    await check?.(dir, '/');
    for (const name of names) {
      walked += `/${name}`;
      const next = await openChild(dir, name, walked, missing, mode);
      await dir.close();
      dir = next;
      await check?.(dir, walked);
    }
    return dir;
  } catch (err) {
    await dir.close().catch(() => undefined);
    throw err;
  }
}

/** One openat step: `name` inside the folder `dir` holds (made when missing and `missing` is 'create'), never a link. */
export async function openChild(
  dir: FileHandle,
  name: string,
  walked: string,
  missing: 'create' | 'refuse',
  mode: number,
): Promise<FileHandle> {
  // A few tries: a folder made by us may be removed or replaced before we open it (then opened or refused anew).
  for (let attempt = 0; attempt < 4; attempt++) {
    try {
      return await open(at(dir, name), STEP_FLAGS);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOTDIR' || code === 'ELOOP')
        throw new UnsafePathError(walked, 'is a symbolic link or not a folder');
      if (code !== 'ENOENT' || missing === 'refuse') throw err;
    }
    // mkdir never follows a link at its last component (a link there: EEXIST, then the open above refuses it).
    await mkdir(at(dir, name), mode).catch((err: NodeJS.ErrnoException) => {
      // ENOENT: the folder we hold was removed (replaced by a rename over it) while we walked.
      if (err.code === 'ENOENT')
        throw new UnsafePathError(walked, 'could not be made: its parent was removed while it was walked');
      if (err.code !== 'EEXIST') throw err;
    });
  }
  throw new UnsafePathError(walked, 'kept changing while it was made');
}

/**
 * Atomic replace of `name` in the folder `dir` holds: a temp file beside it created exclusively without following a
 * link (O_CREAT | O_EXCL | O_NOFOLLOW, 0600), written, fsynced, renamed over `name` within that same folder (rename
 * replaces a link, never follows it), the folder fsynced. `folderSync: 'best-effort'` does not let a failed folder
 * fsync unsay a rename that happened.
 */
export async function replaceFileAt(
  dir: FileHandle,
  name: string,
  bytes: Uint8Array,
  folderSync: 'required' | 'best-effort' = 'required',
): Promise<void> {
  if (name === '' || name === '.' || name === '..' || name.includes('/'))
    throw new UnsafePathError(name, 'must be one file name');
  const temp = `.${name}.tmp-${process.pid}-${randomBytes(8).toString('hex')}`;
  const flags = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;
  const handle = await open(at(dir, temp), flags, 0o600);
  try {
    await handle.writeFile(bytes);
    await handle.sync();
  } catch (err) {
    await handle.close().catch(() => undefined);
    await unlink(at(dir, temp)).catch(() => undefined);
    throw err;
  }
  await handle.close();
  try {
    await rename(at(dir, temp), at(dir, name));
  } catch (err) {
    await unlink(at(dir, temp)).catch(() => undefined);
    throw err;
  }
  const sync = reopenDir(dir).then(async (folder) => {
    try {
      await folder.sync();
    } finally {
      await folder.close();
    }
  });
  await (folderSync === 'required' ? sync : sync.catch(() => undefined));
}

/** A handle for I/O (fsync, fchmod) on the folder an O_PATH handle holds: the same object, reopened. */
export function reopenDir(dir: FileHandle): Promise<FileHandle> {
  return open(at(dir), constants.O_RDONLY | constants.O_DIRECTORY);
}
