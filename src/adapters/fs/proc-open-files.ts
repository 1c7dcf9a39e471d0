import { readFileSync, readdirSync, readlinkSync, statSync, type Stats } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { DiskUsageBudget, OpenFileScan, UnlinkedOpenFiles } from '../../app/ports/disk-usage.js';

/** The longest the scan holds the event loop before it yields (ms), as the walker. */
const SLICE_MS = 4;

/** Where the host's process and cgroup file systems are (tests point them elsewhere). */
export interface ProcRoots {
  readonly proc: string;
  readonly cgroup: string;
}

const HOST_ROOTS: ProcRoots = { proc: '/proc', cgroup: '/sys/fs/cgroup' };

const NOTHING = { bytes: 0, files: 0, entries: 0, complete: true } as const;

/**
 * OpenFileScan from the host's `/proc`: the container's processes are those of its first process's cgroup (its
 * `cgroup.procs`: a process cannot leave it without writing the cgroup file system, which a pair cannot), or, where
 * that cannot be read, every process in its pid namespace. For each, the targets of its descriptors (`fd/*`) and of
 * its mappings of deleted files (`maps` lines ending `(deleted)`, stat'ed through `map_files/`) are stat'ed; a
 * regular file with no link left, on a disk-backed file system of the process's mounts (not a memfd, not a tmpfs),
 * counts its allocated blocks, each inode once. A file that still has a name is the
 * walk's or the writable layer's, never counted here. A process that ends meanwhile is skipped; a table that cannot
 * be read (no permission: the supervisor must be root or hold CAP_SYS_PTRACE and CAP_SYS_ADMIN) makes the scan
 * incomplete, as an exhausted budget does.
 */
export class ProcOpenFiles implements OpenFileScan {
  readonly #roots: ProcRoots;

  readonly #uid: () => number;

  constructor(roots: ProcRoots = HOST_ROOTS, uid: () => number = () => process.getuid?.() ?? -1) {
    this.#roots = roots;
    this.#uid = uid;
  }

  async unlinkedOpenFiles(
    container: { readonly id: string; readonly pid: number },
    budget: DiskUsageBudget,
  ): Promise<UnlinkedOpenFiles> {
    const started = performance.now();
    let sliceStarted = started;
    const seen = new Set<string>();
    let bytes = 0;
    let entries = 0;
    let complete = true;
    if (this.#uid() !== 0) {
      return {
        ...NOTHING,
        unavailable: "the supervisor is not root: other users' descriptors cannot be read",
      };
    }
    const members = this.#membersOf(container.pid, container.id);
    // Under root, a container's running first process always names it in its cgroup: a pid that does not is no
    // process of this host's (a remote engine) or one that ended (and freed what it held) since the inspect.
    if (members === null)
      return {
        ...NOTHING,
        unavailable: `pid ${container.pid} is not a process of the container on this host`,
      };
    const devicesByNs = new Map<string, ReadonlySet<number> | null>();
    for (const member of members) {
      const targets = this.#targetsOf(member);
      const devices = this.#diskDevicesOf(member, devicesByNs);
      if (targets === 'unreadable' || devices === 'unreadable') complete = false;
      if (!Array.isArray(targets) || !(devices instanceof Set)) continue;
      for (const target of targets) {
        entries += 1;
        const st = statOrNull(target);
        const onDisk = st !== null && st.isFile() && st.nlink === 0 && devices.has(st.dev);
        if (onDisk && !seen.has(`${st.dev}:${st.ino}`)) {
          seen.add(`${st.dev}:${st.ino}`);
          bytes += st.blocks * 512;
        }
        if ((entries & 255) !== 0) continue;
        const now = performance.now();
        if (entries >= budget.maxEntries || now - started >= budget.maxMs)
          return { bytes, files: seen.size, entries, complete: false };
        if (now - sliceStarted >= SLICE_MS) {
          await new Promise((resolve) => setImmediate(resolve));
          sliceStarted = performance.now();
        }
      }
    }
    return { bytes, files: seen.size, entries, complete };
  }

  /**
   * The container's processes: its cgroup's members, else its pid namespace's; null when neither can be read, or
   * when `pid` is not the container's (its cgroup does not name the container: another host's pid, a reused one).
   */
  #membersOf(pid: number, containerId: string): number[] | null {
    const proc = this.#roots.proc;
    const cgroupText = readOrNull(join(proc, String(pid), 'cgroup'));
    if (cgroupText === null || containerId === '' || !cgroupText.includes(containerId)) return null;
    for (const file of cgroupProcsFiles(cgroupText, this.#roots.cgroup)) {
      const text = readOrNull(file);
      if (text !== null) return pidsIn(text);
    }
    const ns = readlinkOrNull(join(proc, String(pid), 'ns', 'pid'));
    if (ns === null) return null;
    return readdirOrEmpty(proc)
      .filter((name) => /^\d+$/.test(name))
      .filter((name) => readlinkOrNull(join(proc, name, 'ns', 'pid')) === ns)
      .map(Number);
  }

  /**
   * The devices of the disk-backed file systems a process sees (its mount namespace's `mountinfo`, read once per
   * namespace): a deleted file on another one is memory, not disk (a `memfd`, a file of a tmpfs such as
   * `/dev/shm`), already bounded by the memory limit. `gone` when the process ended.
   */
  #diskDevicesOf(
    member: number,
    byNs: Map<string, ReadonlySet<number> | null>,
  ): ReadonlySet<number> | 'gone' | 'unreadable' {
    const base = join(this.#roots.proc, String(member));
    let ns: string;
    try {
      ns = readlinkSync(join(base, 'ns', 'mnt'));
      if (!byNs.has(ns)) byNs.set(ns, diskDevices(readFileSync(join(base, 'mountinfo'), 'utf8')));
    } catch (err) {
      return isGone(err) ? 'gone' : 'unreadable';
    }
    return byNs.get(ns) ?? 'unreadable';
  }

  /**
   * What one process holds: its descriptors' links and its deleted mappings' links; `gone` when it ended, and
   * `unreadable` when its tables could not be read.
   */
  #targetsOf(member: number): string[] | 'gone' | 'unreadable' {
    const base = join(this.#roots.proc, String(member));
    let fds: string[];
    let maps: string;
    try {
      fds = readdirSync(join(base, 'fd')).map((fd) => join(base, 'fd', fd));
      maps = readFileSync(join(base, 'maps'), 'utf8');
    } catch (err) {
      return isGone(err) ? 'gone' : 'unreadable';
    }
    const mapped = deletedMappings(maps).map((range) => join(base, 'map_files', range));
    return [...fds, ...mapped];
  }
}

/** The `cgroup.procs` files that may list a process's cgroup (v1 `pids` controller first, then v2). */
export function cgroupProcsFiles(cgroupText: string, cgroupRoot: string): string[] {
  const files: string[] = [];
  for (const line of cgroupText.split('\n')) {
    const [, controllers, path] = /^\d+:([^:]*):(\/.*)$/.exec(line) ?? [];
    if (controllers === undefined || path === undefined || path.includes('..')) continue;
    if (controllers.split(',').includes('pids'))
      files.unshift(join(cgroupRoot, 'pids', path, 'cgroup.procs'));
    if (controllers === '') {
      files.push(join(cgroupRoot, path, 'cgroup.procs'), join(cgroupRoot, 'unified', path, 'cgroup.procs'));
    }
  }
  return files;
}

/** File systems whose files live in memory (bounded by the memory limit), never counted as disk. */
const MEMORY_FILE_SYSTEMS = new Set(['tmpfs', 'ramfs', 'devtmpfs', 'hugetlbfs']);

/**
 * The devices (as `stat`'s `dev`: glibc's makedev of the `major:minor` field) of the disk-backed mounts in a
 * `mountinfo` text (`id parent major:minor root mount options … - type source super-options`).
 */
export function diskDevices(mountinfo: string): Set<number> {
  const devices = new Set<number>();
  for (const line of mountinfo.split('\n')) {
    const [, majorText, minorText] = /^\d+ \d+ (\d+):(\d+) /.exec(line) ?? [];
    const type = line.split(' - ')[1]?.split(' ')[0];
    if (majorText === undefined || minorText === undefined || type === undefined) continue;
    if (!MEMORY_FILE_SYSTEMS.has(type)) devices.add(makedev(Number(majorText), Number(minorText)));
  }
  return devices;
}

/** glibc's `makedev`, as Node reports `dev` (kept within 2^53: majors under 2^21). */
function makedev(major: number, minor: number): number {
  return (
    (minor & 0xff) +
    (major & 0xfff) * 0x100 +
    Math.floor(minor / 0x100) * 0x100000 +
    Math.floor(major / 0x1000) * 0x1000 * 2 ** 32
  );
}

/** The address ranges (`map_files` names) of the mappings of deleted files in a `maps` text. */
export function deletedMappings(maps: string): string[] {
  const ranges: string[] = [];
  for (const line of maps.split('\n')) {
    if (!line.endsWith(' (deleted)')) continue;
    const [range, , , , inode] = line.split(/\s+/);
    if (range !== undefined && /^[0-9a-f]+-[0-9a-f]+$/.test(range) && inode !== '0') ranges.push(range);
  }
  return ranges;
}

function pidsIn(text: string): number[] {
  return text
    .split('\n')
    .filter((line) => /^\d+$/.test(line))
    .map(Number);
}

function isGone(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException).code;
  return code === 'ENOENT' || code === 'ESRCH';
}

function statOrNull(path: string): Stats | null {
  try {
    return statSync(path);
  } catch {
    return null;
  }
}

function readOrNull(path: string): string | null {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return null;
  }
}

function readlinkOrNull(path: string): string | null {
  try {
    return readlinkSync(path);
  } catch {
    return null;
  }
}

function readdirOrEmpty(path: string): string[] {
  try {
    return readdirSync(path);
  } catch {
    return [];
  }
}
