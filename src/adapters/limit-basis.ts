import { statfs } from 'node:fs/promises';
import { totalmem } from 'node:os';
import { dirname } from 'node:path';

/**
 * What the default pair limits are derived from (src/core/pair-limits.ts), read cheaply: the host's memory
 * (os.totalmem) and the free bytes of the file system holding `outputDir` (statfs of its nearest existing
 * ancestor: the directory may not exist yet). A fact that cannot be read is null.
 */
export async function readLimitBasis(
  outputDir: string,
): Promise<{ memoryTotalBytes: number | null; outputFreeBytes: number | null }> {
  const memory = totalmem();
  return { memoryTotalBytes: memory > 0 ? memory : null, outputFreeBytes: await freeBytesNear(outputDir) };
}

async function freeBytesNear(path: string): Promise<number | null> {
  for (let at = path; ; at = dirname(at)) {
    try {
      const fs = await statfs(at);
      return fs.bavail * fs.bsize;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || dirname(at) === at) return null;
    }
  }
}
