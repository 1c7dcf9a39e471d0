import { lstatSync, opendirSync, type Dir, type Stats } from 'node:fs';
import { join, relative } from 'node:path';
import { performance } from 'node:perf_hooks';
import {
  DISK_LARGEST_ENTRIES,
  type DiskUsage,
  type DiskUsageBudget,
  type DiskUsageEntry,
  type DiskUsageReport,
} from '../../app/ports/disk-usage.js';

/** The longest the walker holds the event loop before it yields (ms): log pumping and timers go on meanwhile. */
const SLICE_MS = 4;

/**
 * DiskUsage by walking the folders with `lstat` (links are counted, never followed), folder by folder, within the
 * budget (checked every 256 entries). Synchronous calls in short slices: an asynchronous `lstat` per file costs several times more (the thread
 * pool and a promise each), and the slices keep the event loop free (SLICE_MS at most at a time). Hard links are
 * counted once (by device and inode). A folder on another file system than its root (a mount below it) is not
 * entered. Unreadable entries (a file deleted during the walk, a folder that cannot be opened) count what their own
 * `lstat` said, or nothing. The largest files are named (relative to their root), so what a pair left is told.
 */
export class DiskUsageWalker implements DiskUsage {
  async measure(paths: readonly string[], budget: DiskUsageBudget): Promise<DiskUsageReport> {
    const started = performance.now();
    let sliceStarted = started;
    const seenInodes = new Set<string>();
    let bytes = 0;
    let entries = 0;
    const largest = new LargestFiles();
    const count = (st: Stats, root: string, path: string): void => {
      if (!st.isDirectory() && st.nlink > 1) {
        const key = `${st.dev}:${st.ino}`;
        if (seenInodes.has(key)) return;
        seenInodes.add(key);
      }
      bytes += st.blocks * 512;
      if (!st.isDirectory()) largest.offer(root, path, st.blocks * 512);
    };
    const report = (complete: boolean): DiskUsageReport => ({
      bytes,
      entries,
      complete,
      largest: largest.list(),
    });
    for (const root of new Set(paths)) {
      const rootStat = lstatOrNull(root);
      if (rootStat === null) continue;
      entries += 1;
      count(rootStat, root, root);
      if (!rootStat.isDirectory()) continue;
      const folders: string[] = [root];
      for (let folder = folders.pop(); folder !== undefined; folder = folders.pop()) {
        const dir = opendirOrNull(folder);
        if (dir === null) continue;
        try {
          for (let entry = dir.readSync(); entry !== null; entry = dir.readSync()) {
            const path = join(folder, entry.name);
            const st = lstatOrNull(path);
            if (st !== null) {
              entries += 1;
              count(st, root, path);
              if (st.isDirectory() && st.dev === rootStat.dev) folders.push(path);
            }
            if ((entries & 255) === 0) {
              const now = performance.now();
              if (entries >= budget.maxEntries || now - started >= budget.maxMs) return report(false);
              if (now - sliceStarted >= SLICE_MS) {
                await new Promise((resolve) => setImmediate(resolve));
                sliceStarted = performance.now();
              }
            }
          }
        } finally {
          dir.closeSync();
        }
      }
    }
    return report(entries <= budget.maxEntries);
  }
}

/** The DISK_LARGEST_ENTRIES largest files offered, most bytes first. */
class LargestFiles {
  readonly #entries: DiskUsageEntry[] = [];

  offer(root: string, path: string, bytes: number): void {
    const last = this.#entries[DISK_LARGEST_ENTRIES - 1];
    if (bytes === 0 || (last !== undefined && bytes <= last.bytes)) return;
    this.#entries.push({ path: relative(root, path) || '.', bytes });
    this.#entries.sort((a, b) => b.bytes - a.bytes);
    this.#entries.length = Math.min(this.#entries.length, DISK_LARGEST_ENTRIES);
  }

  list(): readonly DiskUsageEntry[] {
    return [...this.#entries];
  }
}

function lstatOrNull(path: string): Stats | null {
  try {
    return lstatSync(path);
  } catch {
    return null;
  }
}

function opendirOrNull(path: string): Dir | null {
  try {
    return opendirSync(path);
  } catch {
    return null;
  }
}
