import { execFile } from 'node:child_process';
import {
  chmodSync,
  closeSync,
  constants,
  fstatSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  rmdirSync,
  type Stats,
} from 'node:fs';
import { join } from 'node:path';
import { systemTool } from '../system-tool.js';
import { ToolShell, type ToolCapture, type ToolOutput } from './tool-shell.js';
import { TOOL_ENV } from './tool-shell-spawn.js';
import type { MountMode } from '../../core/mount-mode.js';
import type { EntryKind, FileInfo } from '../../app/ports/file-system.js';
import type { MountStager, OpenedChild, OpenedFolder } from '../../app/ports/mount-stager.js';

/**
 * The staged mounts (docs/spec.md 5.3) on Linux: each component is opened with O_PATH|O_NOFOLLOW|O_DIRECTORY through
 * `/proc/self/fd/N/<name>` (the kernel resolves `<name>` in the folder the descriptor holds, never a path again: an
 * openat step Node lacks), and the last one is bound with `mount --no-canonicalize --bind /proc/PID/fd/N POINT`
 * (the magic link names the object; without --no-canonicalize mount(8) would resolve the path behind it again).
 * Staging points live in a root-only folder and are named `<pid>-<process start>-<n>`, so a sweep can tell whether
 * the process that made one still lives.
 */

/** O_PATH on Linux (x86-64 and arm64 alike); not in fs.constants. */
const O_PATH = 0o10000000;
const FOLDER_FLAGS = O_PATH | constants.O_NOFOLLOW | constants.O_DIRECTORY;
const POINT_NAME = /^(\d+)-(\d+)-(\d+)$/;
const PROBE_NAME = /^probe-(\d+)$/;

export interface ProcFdStagerOptions {
  /** The staging folder of this engine, e.g. `/run/roboguide-eval/mounts/<engine key>`; made 0700, never a link. */
  readonly root: string;
  /** Every bind source of every container the engine has, in any state; throws when the engine does not answer. */
  readonly referencedSources: () => Promise<ReadonlySet<string>>;
  /** Runs mount(8) or umount(8); rejects on a non-zero exit. */
  readonly run?: (file: string, args: readonly string[]) => Promise<void>;
}

export class ProcFdMountStager implements MountStager {
  #mode: Promise<MountMode> | null = null;
  #seq = 0;
  readonly #inFlight = new Set<string>();
  readonly #startTime = processStartTime(process.pid);
  readonly #run: (file: string, args: readonly string[]) => Promise<void>;

  private readonly options: ProcFdStagerOptions;

  constructor(options: ProcFdStagerOptions) {
    this.options = options;
    this.#run = options.run ?? runToolInShell;
  }

  mode(): Promise<MountMode> {
    return (this.#mode ??= this.#probe());
  }

  openRoot(): Promise<OpenedFolder> {
    const handle = openSync('/', FOLDER_FLAGS);
    return Promise.resolve({ handle, info: infoOf(fstatSync(handle)) });
  }

  openChild(parent: OpenedFolder, name: string): Promise<OpenedChild> {
    if (name === '' || name === '.' || name === '..' || name.includes('/'))
      return Promise.resolve({ kind: 'error', errno: 'EINVAL' });
    const path = `/proc/self/fd/${parent.handle}/${name}`;
    try {
      const handle = openSync(path, FOLDER_FLAGS);
      return Promise.resolve({ kind: 'opened', folder: { handle, info: infoOf(fstatSync(handle)) } });
    } catch (err) {
      const errno = errnoOf(err);
      if (errno === 'ENOENT') return Promise.resolve({ kind: 'missing' });
      if (errno === 'ENOTDIR' || errno === 'ELOOP') {
        // Refused already; what it was is only for the message (a second look, decided nothing).
        return Promise.resolve({ kind: isLink(path) ? 'symlink' : 'not-folder' });
      }
      return Promise.resolve({ kind: 'error', errno });
    }
  }

  makeChild(parent: OpenedFolder, name: string, permissions: number): Promise<void> {
    // Rejected, never thrown: the caller tells EEXIST (made meanwhile) from a refusal on the promise.
    try {
      mkdirSync(`/proc/self/fd/${parent.handle}/${name}`, permissions);
      return Promise.resolve();
    } catch (err) {
      return Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
  }

  close(folder: OpenedFolder): Promise<void> {
    closeSync(folder.handle);
    return Promise.resolve();
  }

  async bind(folder: OpenedFolder, readOnly: boolean): Promise<string> {
    this.#ensureRoot();
    const point = join(this.options.root, `${process.pid}-${this.#startTime}-${++this.#seq}`);
    mkdirSync(point, 0o700);
    this.#inFlight.add(point);
    try {
      // One mount(8): the bind and its flags (util-linux >= 2.27 applies `-o` to a bind by a remount of the point
      // within the same process; not atomic, as two calls were not either: the point is in a root-only folder and
      // no container is given it before this returns). One process per staged source instead of two (issue 39).
      await this.#run('mount', [
        '--no-canonicalize',
        '--bind',
        '-o',
        `nosuid,nodev${readOnly ? ',ro' : ''}`,
        `/proc/${process.pid}/fd/${folder.handle}`,
        point,
      ]);
      // What the kernel says of the point, not what mount(8) was asked: a mount(8) that took the bind but not its
      // flags would hand a writable or suid-able source to the engine.
      const problem = mountFlagsProblem(readFileSync('/proc/self/mountinfo', 'utf8'), point, readOnly);
      if (problem !== null) throw new Error(`staging ${point}: ${problem}`);
    } catch (err) {
      // The bind may have been made before its flags failed: unmounted (if it was), then the point removed.
      await this.release(point);
      throw err;
    }
    return point;
  }

  settled(stagedPath: string): void {
    this.#inFlight.delete(stagedPath);
  }

  async release(stagedPath: string): Promise<void> {
    this.#inFlight.delete(stagedPath);
    if (!stagedPath.startsWith(`${this.options.root}/`)) return;
    await this.#run('umount', ['--no-canonicalize', stagedPath]).catch(() => undefined);
    try {
      rmdirSync(stagedPath);
    } catch (err) {
      if (errnoOf(err) === 'ENOENT') return;
      // Still mounted (busy): detached, then removed.
      await this.#run('umount', ['--no-canonicalize', '--lazy', stagedPath]).catch(() => undefined);
      rmdirSync(stagedPath);
    }
  }

  async sweep(): Promise<string[]> {
    let names: string[];
    try {
      names = readdirSync(this.options.root);
    } catch {
      return [];
    }
    // A probe's folder left by a process killed in the middle of its probe (its staging point is swept below).
    for (const name of names) {
      const probe = PROBE_NAME.exec(name);
      if (probe === null || Number(probe[1]) === process.pid || processStartTime(Number(probe[1])) !== null)
        continue;
      try {
        rmdirSync(join(this.options.root, name));
      } catch {
        // not empty (not one of ours), or gone meanwhile
      }
    }
    const candidates = names
      .map((name) => ({ name, match: POINT_NAME.exec(name) }))
      .filter(({ name, match }) => match !== null && this.#ownerGone(name, match));
    if (candidates.length === 0) return [];
    let referenced: ReadonlySet<string>;
    try {
      referenced = await this.options.referencedSources();
    } catch {
      return []; // An engine that does not answer cannot say a point is unused: none is released.
    }
    const released: string[] = [];
    for (const { name } of candidates) {
      const point = join(this.options.root, name);
      if (referenced.has(point)) continue;
      await this.release(point).then(
        () => released.push(point),
        () => undefined,
      );
    }
    return released;
  }

  #ownerGone(name: string, match: RegExpExecArray): boolean {
    const pid = Number(match[1]);
    if (pid === process.pid) return !this.#inFlight.has(join(this.options.root, name));
    return processStartTime(pid) !== match[2];
  }

  /** Every folder from `/` to the staging root: a folder, never a link; ours (made 0700 here) below `/run`. */
  #ensureRoot(): void {
    let current = '';
    for (const segment of this.options.root.split('/').filter((s) => s !== '')) {
      current = `${current}/${segment}`;
      try {
        mkdirSync(current, 0o700);
        chmodSync(current, 0o700);
      } catch (err) {
        if (errnoOf(err) !== 'EEXIST') throw err;
      }
      const info = lstatSync(current);
      if (!info.isDirectory()) throw new Error(`staging folder ${current} is not a folder (a link?)`);
    }
    const info = lstatSync(this.options.root);
    if (info.uid !== process.getuid?.() || (info.mode & 0o077) !== 0)
      throw new Error(
        `staging folder ${this.options.root} is not ours alone (owner ${info.uid}, mode ${(info.mode & 0o777).toString(8)})`,
      );
  }

  /** Binds a folder of ours onto a staging point and back: `staged` when the host lets us. */
  async #probe(): Promise<MountMode> {
    if (process.getuid?.() !== 0) return 'walked';
    try {
      this.#ensureRoot();
      await this.sweep();
      const probe = join(this.options.root, `probe-${process.pid}`);
      try {
        mkdirSync(probe, 0o700);
      } catch (err) {
        if (errnoOf(err) !== 'EEXIST') throw err;
      }
      const folder = { handle: openSync(probe, FOLDER_FLAGS), info: infoOf(lstatSync(probe)) };
      try {
        const point = await this.bind(folder, true);
        await this.release(point);
      } finally {
        closeSync(folder.handle);
        rmdirSync(probe);
      }
      return 'staged';
    } catch {
      return 'walked';
    }
  }
}

/**
 * Why the mount at `point` in `mountinfo` (the text of /proc/self/mountinfo) lacks what a staged source needs
 * (nosuid, nodev, and ro when read-only), or null when it has them; the last mount there is the one on top.
 */
export function mountFlagsProblem(mountinfo: string, point: string, readOnly: boolean): string | null {
  const escaped = point.replace(/[\\ \t\n]/g, (c) => `\\${c.charCodeAt(0).toString(8).padStart(3, '0')}`);
  let options: string[] | null = null;
  for (const line of mountinfo.split('\n')) {
    const fields = line.split(' ');
    if (fields[4] === escaped) options = (fields[5] ?? '').split(',');
  }
  if (options === null) return 'not mounted';
  const present = options;
  const needed = ['nosuid', 'nodev', ...(readOnly ? ['ro'] : [])];
  const missing = needed.filter((flag) => !present.includes(flag));
  return missing.length === 0 ? null : `mounted without ${missing.join(', ')} (${present.join(',')})`;
}

/** Field 22 of /proc/PID/stat (start time in clock ticks since boot), or null when the process is gone. */
function processStartTime(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? null;
  } catch {
    return null;
  }
}

function infoOf(s: Stats): FileInfo {
  const kind: EntryKind = s.isDirectory()
    ? 'directory'
    : s.isSymbolicLink()
      ? 'symlink'
      : s.isFile()
        ? 'file'
        : 'other';
  return { kind, sizeBytes: s.size, permissions: s.mode & 0o7777, uid: s.uid, fileId: `${s.dev}:${s.ino}` };
}

function isLink(path: string): boolean {
  try {
    const handle = openSync(path, O_PATH | constants.O_NOFOLLOW);
    try {
      return fstatSync(handle).isSymbolicLink();
    } finally {
      closeSync(handle);
    }
  } catch {
    return false;
  }
}

function errnoOf(err: unknown): string {
  return typeof err === 'object' && err !== null && 'code' in err ? String(err.code) : 'error';
}

/** The process's one shell for mount(8), umount(8) and the pairs network's listings (tool-shell.ts), started on first use. */
const toolShell = new ToolShell({ fallback: runTool });

/** mount(8) or umount(8) of the host through the process's tool shell (the default `run`); as runTool otherwise. */
export function runToolInShell(file: string, args: readonly string[]): Promise<void> {
  return toolShell.run(systemTool(file), args);
}

/**
 * An absolute program run for its output through the process's tool shell (`iptables -S` of the pairs network's
 * guard: no fork of this process per listing); `fallback` (a process of its own) where the shell is not to be used.
 */
export function captureInToolShell(
  file: string,
  args: readonly string[],
  timeoutMs: number,
  fallback: ToolCapture,
): Promise<ToolOutput> {
  return toolShell.capture(file, args, timeoutMs, fallback);
}

/** mount(8) or umount(8) of the host, with C messages, one process per call; rejects on a non-zero exit. */
export function runTool(file: string, args: readonly string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile(systemTool(file), [...args], { env: TOOL_ENV, timeout: 10_000 }, (err, _out, stderr) => {
      if (err === null) resolve();
      else reject(new Error(`${file} ${args.join(' ')}: ${stderr.trim() || err.message}`, { cause: err }));
    });
  });
}
