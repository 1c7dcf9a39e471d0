import type { Dirent, Stats } from 'node:fs';
import { lstat, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { DiskUsage, DiskUsageBudget, DiskUsageReport } from '../../app/ports/disk-usage.js';

/** Entries stat-ed at once inside one folder. */
const STAT_BATCH = 64;

/**
 * DiskUsage by walking the folders with `lstat` (links are counted, never followed), folder by folder, within the
 * budget. Hard links are counted once (by device and inode). A folder on another file system than its root (a mount
 * below it) is not entered. Unreadable entries (a file deleted during the walk, a folder the pair made unreadable:
 * the supervisor usually runs as root and reads it anyway) count what their own `lstat` said, or nothing.
 */
export class DiskUsageWalker implements DiskUsage {
  async measure(paths: readonly string[], budget: DiskUsageBudget): Promise<DiskUsageReport> {
    const started = performance.now();
    const seenInodes = new Set<string>();
    let bytes = 0;
    let entries = 0;
    const overBudget = (): boolean =>
      entries >= budget.maxEntries || performance.now() - started >= budget.maxMs;
    const count = (st: Stats): void => {
      if (st.isDirectory() || st.nlink <= 1) {
        bytes += st.blocks * 512;
        return;
      }
      const key = `${st.dev}:${st.ino}`;
      if (seenInodes.has(key)) return;
      seenInodes.add(key);
      bytes += st.blocks * 512;
    };
    const rootsDone = new Set<string>();
    for (const root of paths) {
      if (rootsDone.has(root)) continue;
      rootsDone.add(root);
      const rootStat = await lstat(root).catch(() => null);
      if (rootStat === null) continue;
      entries += 1;
      count(rootStat);
      if (!rootStat.isDirectory()) continue;
      const folders: string[] = [root];
      for (let folder = folders.pop(); folder !== undefined; folder = folders.pop()) {
        if (overBudget()) return { bytes, entries, complete: false };
        const names: Dirent[] = await readdir(folder, { withFileTypes: true }).catch(() => []);
        for (let i = 0; i < names.length; i += STAT_BATCH) {
          if (overBudget()) return { bytes, entries, complete: false };
          const batch = names.slice(i, i + STAT_BATCH);
          const stats = await Promise.all(batch.map((d) => lstat(join(folder, d.name)).catch(() => null)));
          batch.forEach((d, j) => {
            const st = stats[j];
            if (st === null || st === undefined) return;
            entries += 1;
            count(st);
            if (st.isDirectory() && st.dev === rootStat.dev) folders.push(join(folder, d.name));
          });
        }
      }
    }
    return { bytes, entries, complete: true };
  }
}
