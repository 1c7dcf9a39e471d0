import { createHash } from 'node:crypto';
import { constants } from 'node:fs';
import { open } from 'node:fs/promises';
import type { OutcomeRead } from '../core/outcome.js';

/** Outcome files are small JSON documents; anything larger is refused rather than read into memory. */
export const MAX_OUTCOME_BYTES = 16 * 1024 * 1024;

/** Read the driver's outcome file from the host side of its bind mount, bounded, never following a symlink. */
export async function readOutcomeFile(path: string): Promise<OutcomeRead> {
  let handle;
  try {
    // O_NOFOLLOW: the outcome directory is writable by the container; a symlink there must not make us
    // read a host file into result.json.
    handle = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? 'EUNKNOWN';
    return code === 'ENOENT' ? { state: 'missing' } : { state: 'unreadable', code };
  }
  try {
    const stat = await handle.stat();
    if (!stat.isFile()) return { state: 'unreadable', code: 'ENOTFILE' };
    if (stat.size > MAX_OUTCOME_BYTES) return { state: 'unreadable', code: 'EFBIG' };
    const bytes = await handle.readFile();
    return { state: 'present', bytes };
  } catch (err) {
    return { state: 'unreadable', code: (err as NodeJS.ErrnoException).code ?? 'EUNKNOWN' };
  } finally {
    await handle.close();
  }
}

/** SHA-256 of the outcome file as it is now, or null when it is absent or unreadable. */
export async function readOutcomeSha256(path: string): Promise<string | null> {
  const read = await readOutcomeFile(path);
  if (read.state !== 'present') return null;
  return createHash('sha256').update(read.bytes).digest('hex');
}
