import { readFile, realpath } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { MountOptions } from '../../core/disk-quota.js';

/** The mount holding `path` (its nearest existing ancestor, links resolved), with its options; null when unlisted. */
export async function mountOptionsOf(
  path: string,
  mountsFile = '/proc/self/mounts',
): Promise<MountOptions | null> {
  let real = path;
  for (;;) {
    try {
      real = await realpath(real);
      break;
    } catch {
      if (dirname(real) === real) return null;
      real = dirname(real);
    }
  }
  return mountHolding(real, parseMounts(await readFile(mountsFile, 'utf8')));
}

/** The lines of `/proc/self/mounts` (`fs mount type options …`, spaces in names as `\040`). */
export function parseMounts(text: string): MountOptions[] {
  const mounts: MountOptions[] = [];
  for (const line of text.split('\n')) {
    const [, mount, type, options] = line.split(' ');
    if (mount === undefined || type === undefined || options === undefined) continue;
    mounts.push({ mount: unescapeOctal(mount), type, options: options.split(',') });
  }
  return mounts;
}

/** The longest mount point that is `realPath` or one of its ancestors; the last listed wins (mounted over). */
export function mountHolding(realPath: string, mounts: readonly MountOptions[]): MountOptions | null {
  let best: MountOptions | null = null;
  for (const m of mounts) {
    const inside = m.mount === '/' || realPath === m.mount || realPath.startsWith(`${m.mount}/`);
    if (inside && (best === null || m.mount.length >= best.mount.length)) best = m;
  }
  return best;
}

function unescapeOctal(text: string): string {
  return text.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8)));
}
