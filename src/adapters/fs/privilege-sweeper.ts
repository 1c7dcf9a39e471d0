import {
  closeSync,
  constants,
  fchmodSync,
  fstatSync,
  lstatSync,
  openSync,
  readdirSync,
  type Stats,
} from 'node:fs';
import type { PrivilegeSweep, PrivilegeSweepReport } from '../../app/ports/privilege-sweep.js';
import { PRIVILEGE_MODE_BITS } from '../../core/seccomp-profile.js';

/** Entries looked at per sweep, at most (a cwd of millions of files is cut, said in the report). */
const MAX_ENTRIES = 2_000_000;
/** Folders open at once (the walk's depth), at most. */
const MAX_DEPTH = 1_024;
/** Entries between two yields to the event loop. */
const YIELD_EVERY = 512;
/** O_PATH on Linux (x86-64 and arm64): a descriptor that names an object without opening it for I/O. */
const O_PATH = 0o10000000;
const STEP_FLAGS = O_PATH | constants.O_NOFOLLOW | constants.O_DIRECTORY;
const DIR_FLAGS = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW;
const FILE_FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK | constants.O_NOCTTY;

/** A folder being walked: its descriptor, its host path (for the report) and its names (bytes: any encoding). */
interface Frame {
  readonly fd: number;
  readonly path: Buffer;
  readonly names: Buffer[];
  next: number;
}

/**
 * PrivilegeSweep by walking each folder through its open descriptors, depth first: every child is reached as
 * `/proc/self/fd/<folder fd>/<name>` with O_NOFOLLOW, so a folder swapped for a link during the walk (by another pair
 * of a shared cwd) cannot turn the walk onto a host file outside it; the folder itself is reached the same way from
 * `/` (a link on the way to it, an ancestor swapped, is refused and the sweep says it is incomplete). A file is opened once and its bits cleared on
 * that descriptor (fchmod), after checking it is still a regular file with the bits. Folders on another file system
 * than their root (a mount below it) are not entered. Names are bytes (a name that is not UTF-8 is walked too).
 * Linux only (the engine's host).
 */
export class PrivilegeSweeper implements PrivilegeSweep {
  async strip(folders: readonly string[]): Promise<PrivilegeSweepReport> {
    const stripped: string[] = [];
    let entries = 0;
    let complete = true;
    for (const root of new Set(folders)) {
      const rootFd = openRootNoFollow(root);
      if (rootFd === 'missing') continue;
      if (rootFd === 'refused') {
        // A link or a non-folder on the way (an ancestor swapped by a pair whose cwd holds it): never followed.
        complete = false;
        continue;
      }
      const rootDev = fstatSync(rootFd).dev;
      const stack: Frame[] = [frame(rootFd, Buffer.from(root))];
      try {
        for (let top = stack.at(-1); top !== undefined; top = stack.at(-1)) {
          const name = top.names[top.next++];
          if (name === undefined) {
            closeSync(top.fd);
            stack.pop();
            continue;
          }
          if (++entries > MAX_ENTRIES) return { stripped, complete: false };
          if (entries % YIELD_EVERY === 0) await new Promise((resolve) => setImmediate(resolve));
          const child = Buffer.concat([Buffer.from(`/proc/self/fd/${top.fd}/`), name]);
          const st = lstatOrNull(child);
          if (st === null) continue;
          const path = Buffer.concat([top.path, Buffer.from('/'), name]);
          if (st.isDirectory() && st.dev === rootDev) {
            if (stack.length >= MAX_DEPTH) complete = false;
            const fd = stack.length < MAX_DEPTH ? openOrNull(child, DIR_FLAGS) : null;
            if (fd !== null) stack.push(frame(fd, path));
          } else if (st.isFile() && (st.mode & PRIVILEGE_MODE_BITS) !== 0 && stripFile(child)) {
            stripped.push(path.toString());
          }
        }
      } finally {
        for (const left of stack) closeSync(left.fd);
      }
    }
    return { stripped, complete };
  }
}

/**
 * The folder `root` opened for reading, walked from `/` one component at a time (each opened O_PATH|O_NOFOLLOW inside
 * the one before, through /proc/self/fd/N/<name>), so a link anywhere on the way is refused, never followed; then
 * reopened through its descriptor (the object held, not the path). `missing` when a component does not exist.
 */
function openRootNoFollow(root: string): number | 'missing' | 'refused' {
  let dir: number;
  try {
    dir = openSync('/', STEP_FLAGS);
  } catch {
    return 'refused';
  }
  try {
    for (const name of root.split('/').filter((s) => s !== '' && s !== '.')) {
      if (name === '..') return 'refused';
      let next: number;
      try {
        next = openSync(`/proc/self/fd/${dir}/${name}`, STEP_FLAGS);
      } catch (err) {
        return (err as NodeJS.ErrnoException).code === 'ENOENT' ? 'missing' : 'refused';
      }
      closeSync(dir);
      dir = next;
    }
    return (
      openOrNull(Buffer.from(`/proc/self/fd/${dir}`), constants.O_RDONLY | constants.O_DIRECTORY) ?? 'refused'
    );
  } finally {
    closeSync(dir);
  }
}

function frame(fd: number, path: Buffer): Frame {
  let names: Buffer[] = [];
  try {
    names = readdirSync(`/proc/self/fd/${fd}`, { encoding: 'buffer' });
  } catch {
    // An unreadable folder: nothing to walk.
  }
  return { fd, path, names, next: 0 };
}

/** Clears S_ISUID and S_ISGID on the file itself (opened once, never through a link); true when it had them. */
function stripFile(path: Buffer): boolean {
  const fd = openOrNull(path, FILE_FLAGS);
  if (fd === null) return false;
  try {
    const st = fstatSync(fd);
    if (!st.isFile() || (st.mode & PRIVILEGE_MODE_BITS) === 0) return false;
    fchmodSync(fd, st.mode & 0o7777 & ~PRIVILEGE_MODE_BITS);
    return true;
  } finally {
    closeSync(fd);
  }
}

function openOrNull(path: Buffer, flags: number): number | null {
  try {
    return openSync(path, flags);
  } catch {
    return null;
  }
}

function lstatOrNull(path: Buffer): Stats | null {
  try {
    return lstatSync(path);
  } catch {
    return null;
  }
}
