import { readFile, statfs } from 'node:fs/promises';
import { mountOf, type MemoryFact, type MountFact } from '../../core/host-facts.js';
import { InternalError } from '../../core/errors.js';

/**
 * The facts that change while the machine runs (memory, the file system holding a path) read in this process from
 * the kernel on Linux (issue 39): /proc/meminfo, /proc/self/mountinfo and statfs(2) are what systeminformation's
 * `mem()` and `fsSize()` (`df`) read too, without a Node child loading systeminformation at every `e1-batch start`
 * (0.1–0.4 s on the batch's critical path, before the supervisor is spawned). Static facts stay with the child.
 */

/** MemTotal and MemAvailable of /proc/meminfo, in bytes (what `si.mem()` reports as total and available). */
export async function procMemory(meminfo?: string): Promise<MemoryFact> {
  const text = meminfo ?? (await readFile('/proc/meminfo', 'utf8'));
  const kib = (key: string): number => {
    const m = new RegExp(`^${key}:\\s+(\\d+) kB$`, 'm').exec(text);
    if (m?.[1] === undefined) throw new InternalError(`memory: no ${key} in /proc/meminfo`);
    return Number(m[1]) * 1024;
  };
  const total = kib('MemTotal');
  if (total === 0) throw new InternalError('memory: total is 0');
  return { total_bytes: total, available_bytes: kib('MemAvailable') };
}

/** A mount of /proc/self/mountinfo: its point, type and source (the fields df prints). */
export interface MountEntry {
  readonly mount: string;
  readonly type: string;
  readonly fs: string;
}

/** `\040` and the other octal escapes of mountinfo's fields, decoded. */
const unescape = (field: string): string =>
  field.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(Number.parseInt(octal, 8)));

/**
 * The mounts of mountinfo's text, one per mount point: the last one listed at a point (the one on top of a stack,
 * which is what a path there reaches).
 */
export function mountEntries(mountinfo: string): MountEntry[] {
  const byPoint = new Map<string, MountEntry>();
  for (const line of mountinfo.split('\n')) {
    const fields = line.split(' ');
    const dash = fields.indexOf('-', 6);
    const point = fields[4];
    if (dash < 0 || point === undefined) continue;
    const mount = unescape(point);
    byPoint.delete(mount);
    byPoint.set(mount, { mount, type: fields[dash + 1] ?? '', fs: unescape(fields[dash + 2] ?? '') });
  }
  return [...byPoint.values()];
}

/**
 * The file system holding `realPath` (a real path: no link left in it), as df reports it: the mount, its type and
 * source, size and free space for an unprivileged user (statfs: blocks and available blocks times the block size).
 */
export async function procFileSystemOf(realPath: string): Promise<MountFact> {
  const entries = mountEntries(await readFile('/proc/self/mountinfo', 'utf8'));
  const placeholder = (e: MountEntry): MountFact => ({ ...e, size_bytes: 0, free_bytes: 0 });
  const mount = mountOf(realPath, entries.map(placeholder));
  if (mount === null) throw new InternalError(`no mounted file system holds ${realPath}`);
  const stats = await statfs(realPath);
  return { ...mount, size_bytes: stats.blocks * stats.bsize, free_bytes: stats.bavail * stats.bsize };
}
