import { closeSync, fstatSync, mkdirSync, openSync } from 'node:fs';
import { lstat, mkdir, open, readdir, type FileHandle } from 'node:fs/promises';
import type { OwnDirClaim } from '../../app/ports/file-system.js';
import { at, openChild, openDirNoFollow, reopenDir, STEP_FLAGS, UnsafePathError } from '../no-follow-dir.js';

/**
 * Folders root (or any user) writes into that another local user must not be able to steer (docs/secrets.md
 * "Local users"): the output folder D and the serve socket's folder. Each is reached from `/` one component at a
 * time without following a link (O_PATH | O_NOFOLLOW | O_DIRECTORY, as no-follow-dir.ts), and every folder on the
 * way is checked the way OpenSSH's StrictModes checks a home: owned by root or by us, and not writable by another
 * user unless sticky (then the next component must be ours or root's: the sticky bit keeps another user from
 * renaming or removing an entry they do not own, so our folder under /tmp stays where it is). Once a folder passes
 * these rules nobody but root and us can rename, remove or replace it or any folder above it, so its path keeps
 * naming it: later writes by path land in it.
 */

const OTHERS_WRITE = 0o022;
const STICKY = 0o1000;
const LINK_RULE = 'is a symbolic link (never followed: another user may have planted it)';

/** A rule a folder on the path breaks: `path` is that folder, `rule` says which rule (a sentence's predicate). */
export interface FolderRefusal {
  readonly path: string;
  readonly rule: string;
}

/** A refusal as a thrown error (the walk's own refusals are UnsafePathError too). */
export class UnsafeFolderError extends UnsafePathError {
  readonly rule: string;
  constructor(refusal: FolderRefusal) {
    super(refusal.path, refusal.rule);
    this.rule = refusal.rule;
    this.message = `${refusal.path} ${refusal.rule}`;
  }
}

function euid(): number {
  return process.geteuid?.() ?? 0;
}

/** Why a folder with this owner and mode may not stand on the path to a folder of ours; null when it may. */
function ancestorRefusal(uid: number, mode: number): string | null {
  if (uid !== 0 && uid !== euid())
    return `is owned by user ${uid}, neither you nor root (that user could rename what is inside)`;
  if ((mode & OTHERS_WRITE) !== 0 && (mode & STICKY) === 0)
    return `is writable by other users and not sticky (another user could swap what is inside)`;
  return null;
}

/** The refusal of the folder we are to own and write into: ours, and (with `strict`) writable by no one else. */
function ownFolderRefusal(uid: number, mode: number, strict: boolean): string | null {
  if (uid !== euid()) return `is owned by user ${uid}, not by you (another user could swap it)`;
  if (strict && (mode & OTHERS_WRITE) !== 0)
    return `is writable by other users (another user could replace what is inside)`;
  return null;
}

/**
 * An O_PATH handle on the folder `path`, every folder from `/` down to it (itself included) checked as an ancestor
 * of ours. A missing component: ENOENT, or with `missing: 'create'` made with `mode` (the umask applies) relative to
 * the folder held, then opened and checked the same way. A link or a non-folder: UnsafePathError; a folder breaking
 * a rule: UnsafeFolderError.
 */
export async function openSafeFolder(
  path: string,
  missing: 'create' | 'refuse' = 'refuse',
  mode = 0o700,
): Promise<FileHandle> {
  return openDirNoFollow(path, missing, mode, checkAncestor);
}

async function checkAncestor(dir: FileHandle, path: string): Promise<void> {
  const info = await dir.stat();
  const rule = ancestorRefusal(info.uid, info.mode);
  if (rule !== null) throw new UnsafeFolderError({ path, rule });
}

/**
 * A folder of ours that we keep using (the serve socket's folder, serve's data directory), made 0700 where missing:
 * reached as openSafeFolder does, and it must be ours and writable by no other user, sticky or not: in /tmp another
 * user could claim the socket's name before we bind it, or bind their own after removing ours in a folder of
 * theirs. Throws UnsafeFolderError naming the rule.
 */
export async function openOwnFolder(path: string): Promise<FileHandle> {
  const cut = path.lastIndexOf('/');
  const parent = await openSafeFolder(path.slice(0, cut) || '/', 'create');
  let dir: FileHandle;
  try {
    dir =
      cut === 0 && path.length === 1
        ? await open('/', STEP_FLAGS)
        : await openChild(parent, path.slice(cut + 1), path, 'create', 0o700);
  } finally {
    await parent.close();
  }
  try {
    const info = await dir.stat();
    const rule = ownFolderRefusal(info.uid, info.mode, true);
    if (rule !== null) throw new UnsafeFolderError({ path, rule });
    return dir;
  } catch (err) {
    await dir.close();
    throw err;
  }
}

/**
 * openOwnFolder for a caller that cannot wait (a cache read on first use): a descriptor (O_PATH) on the folder `path`,
 * reached from `/` one component at a time without following a link, missing folders made 0700, each folder above
 * checked as an ancestor of ours and the folder itself ours and writable by no one else. Null where a rule refuses or
 * a step fails. What is read and written through the descriptor (`/proc/self/fd/N/name`) stays in that folder,
 * whatever is renamed on its path later.
 */
export function openOwnFolderSync(path: string): number | null {
  const parts = path.split('/').filter((part) => part !== '' && part !== '.');
  if (!path.startsWith('/') || parts.includes('..')) return null;
  let dir: number;
  try {
    dir = openSync('/', STEP_FLAGS);
  } catch {
    return null;
  }
  try {
    for (let i = 0; ; i += 1) {
      const info = fstatSync(dir);
      const last = i === parts.length;
      if (
        (last ? ownFolderRefusal(info.uid, info.mode, true) : ancestorRefusal(info.uid, info.mode)) !== null
      )
        break;
      if (last) {
        const held = dir;
        dir = -1;
        return held;
      }
      const child = `/proc/self/fd/${dir}/${parts[i]}`;
      try {
        mkdirSync(child, 0o700); // never follows a link: EEXIST for one, which the open below refuses
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') break;
      }
      const next = openSync(child, STEP_FLAGS);
      closeSync(dir);
      dir = next;
    }
    return null;
  } catch {
    return null;
  } finally {
    if (dir !== -1) closeSync(dir);
  }
}

/**
 * The output folder `path`: its parent passes openSafeFolder (missing folders above it made 0755 as `mkdir -p`
 * would); the folder itself is made 0700 (mkdir
 * relative to the parent we hold: a link planted at its name is never followed) or, existing, must be a folder
 * (not a link), owned by us and empty; it is then made 0700 through the opened folder (fchmod, never by path). A
 * folder that was writable by others is listed again after the fchmod (nothing can be added after it).
 */
export async function claimOwnDir(path: string): Promise<OwnDirClaim> {
  try {
    return await claimOwnDirOrThrow(path);
  } catch (err) {
    if (err instanceof UnsafeFolderError) return { state: 'unsafe', path: err.path, rule: err.rule };
    if (err instanceof UnsafePathError)
      return { state: 'unsafe', path: err.path, rule: 'is a symbolic link or not a folder (never followed)' };
    throw err;
  }
}

async function claimOwnDirOrThrow(path: string): Promise<OwnDirClaim> {
  const cut = path.lastIndexOf('/');
  const name = path.slice(cut + 1);
  if (name === '' || name === '.' || name === '..') throw new UnsafePathError(path, 'must name a folder');
  const parent = await openSafeFolder(path.slice(0, cut) || '/', 'create', 0o755);
  try {
    const created = await mkdir(at(parent, name), 0o700).then(
      () => true,
      (err: NodeJS.ErrnoException) => {
        if (err.code !== 'EEXIST') throw err;
        return false;
      },
    );
    const claim = await settleOwnDir(parent, name, path, created);
    if (created) await syncFolder(parent);
    return claim;
  } finally {
    await parent.close();
  }
}

async function settleOwnDir(
  parent: FileHandle,
  name: string,
  path: string,
  created: boolean,
): Promise<OwnDirClaim> {
  let dir: FileHandle;
  try {
    dir = await open(at(parent, name), STEP_FLAGS);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ELOOP') return { state: 'unsafe', path, rule: LINK_RULE };
    // O_PATH | O_NOFOLLOW opens a link itself and O_DIRECTORY then refuses it as ENOTDIR: a file, or a link (a
    // folder seen now was a link a moment ago: swapped under us).
    if (code === 'ENOTDIR') {
      const now = await lstat(at(parent, name));
      return now.isSymbolicLink() || now.isDirectory()
        ? { state: 'unsafe', path, rule: LINK_RULE }
        : { state: 'not-a-directory' };
    }
    throw err;
  }
  try {
    const info = await dir.stat();
    const rule = ownFolderRefusal(info.uid, info.mode, false);
    if (rule !== null) return { state: 'unsafe', path, rule };
    if (!created) {
      const entries = await readdir(at(dir));
      if (entries.length > 0) return { state: 'not-empty', entries: entries.slice(0, 5) };
    }
    if ((info.mode & 0o7777) !== 0o700) {
      const io = await reopenDir(dir);
      await io.chmod(0o700).finally(() => io.close());
    }
    if ((info.mode & OTHERS_WRITE) !== 0) {
      const entries = await readdir(at(dir));
      if (entries.length > 0) return { state: 'not-empty', entries: entries.slice(0, 5) };
    }
    return { state: 'ready', created };
  } finally {
    await dir.close();
  }
}

async function syncFolder(dir: FileHandle): Promise<void> {
  const io = await reopenDir(dir);
  await io.sync().finally(() => io.close());
}
