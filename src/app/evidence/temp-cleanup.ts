import { join } from 'node:path';
import { PRIVATE_OUTCOME_DIR, SESSIONS_DIR } from '../../core/evidence-names.js';
import type { FileSystem } from '../ports/file-system.js';
import { TEMP_NAME } from './atomic-write.js';
import { attempt } from './store-errors.js';

/**
 * Folders whose names a pair chooses (collected session files, the pair's private outcome folder): we never
 * write temp files there, so cleanup never looks inside — a pair's file named like one of our temps stays.
 */
const PAIR_FOLDERS: ReadonlySet<string> = new Set([SESSIONS_DIR, PRIVATE_OUTCOME_DIR]);

/**
 * Removes leftover `.<name>.tmp-<pid>-<rand>` files under `root` (on resume), never inside a pair's own folders
 * nor one of `ownTemps` (a write of this process in flight); returns their relative paths, sorted.
 */
export async function cleanTempFiles(
  fs: FileSystem,
  root: string,
  ownTemps: ReadonlySet<string>,
): Promise<string[]> {
  const removed: string[] = [];
  const pending: string[] = [''];
  for (let relDir = pending.pop(); relDir !== undefined; relDir = pending.pop()) {
    const dir = relDir === '' ? root : join(root, relDir);
    const entries = await attempt('readdir', relDir || '.', 'cannot list directory', () => fs.readdir(dir));
    for (const entry of entries) {
      const rel = relDir === '' ? entry.name : `${relDir}/${entry.name}`;
      const path = join(dir, entry.name);
      if (entry.kind === 'directory') {
        if (!PAIR_FOLDERS.has(entry.name)) pending.push(rel);
      } else if (entry.kind === 'file' && TEMP_NAME.test(entry.name) && !ownTemps.has(path)) {
        await attempt('unlink', rel, 'cannot remove temp file', () => fs.unlink(path));
        removed.push(rel);
      }
    }
  }
  return removed.sort();
}
