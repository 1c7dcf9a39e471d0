import { closeSync, constants, fstatSync, openSync } from 'node:fs';

/** O_PATH on Linux (x86-64 and arm64 alike); not in fs.constants. */
const O_PATH = 0o10000000;

/**
 * The first component of the absolute `dir` (`root` of `/./root/.codex`), or null: not below `/`, or with a `..`
 * anywhere (the container takes `..` after a link; a component read here must be the one the engine copies from).
 */
export function firstComponent(dir: string): string | null {
  if (!dir.startsWith('/')) return null;
  const parts = dir.split('/').filter((part) => part !== '' && part !== '.');
  return parts.includes('..') ? null : (parts[0] ?? null);
}

/** What the engine's container inspect says of the container's file system (`GraphDriver`). */
export interface GraphDriverFacts {
  readonly Name?: string;
  readonly Data?: Readonly<Record<string, string>> | null;
}

/**
 * Whether a stopped container's own layer holds anything at the first component of the absolute path `dir` (`/root`
 * of `/root/.codex/sessions`), read on this host in the layer's overlay upper folder (the engine's inspect names it):
 * true when it does, false when it does not, null when this host cannot tell (another storage driver, no upper folder
 * named, one that is not here or not the engine's: a remote engine's, or not readable by us; `dir` not below `/`).
 *
 * A change at, under or above `dir` (a file written, a folder copied up, the whiteout of a deletion, a link, a rename)
 * leaves an entry at that first component, and the engine's changes list then names the component too (a folder above
 * a change is listed as modified): without one, the list would name nothing at, under or above `dir` (issue 39: the
 * engine's list costs 15 to 25 ms, this one lstat). Never follows a link: what is in the layer is the pair's.
 */
export function layerHoldsAbove(driver: GraphDriverFacts | undefined, dir: string): boolean | null {
  if (driver?.Name !== 'overlay2' && driver?.Name !== 'overlay') return null;
  const upper = driver.Data?.['UpperDir'];
  const first = firstComponent(dir);
  if (typeof upper !== 'string' || !upper.startsWith('/') || first === null) return null;
  let folder: number;
  try {
    folder = openSync(upper, O_PATH | constants.O_DIRECTORY);
  } catch {
    return null;
  }
  try {
    // The engine's folder: root's (or, rootless, this user's), never one another user could have put there.
    const owner = fstatSync(folder).uid;
    if (owner !== 0 && owner !== process.geteuid?.()) return null;
    try {
      closeSync(openSync(`/proc/self/fd/${folder}/${first}`, O_PATH | constants.O_NOFOLLOW));
      return true;
    } catch (err) {
      return (err as NodeJS.ErrnoException).code === 'ENOENT' ? false : null;
    }
  } finally {
    closeSync(folder);
  }
}
