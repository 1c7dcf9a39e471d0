import { constants } from 'node:fs';
import type { Dirent } from 'node:fs';
import { lstat, open, opendir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { MAX_SESSION_FILES, MAX_TAIL_BYTES } from '../core/provider-failure.js';
import type { SessionTail } from '../core/provider-failure.js';

/**
 * Reads the tails of Codex session files (SPEC §6): the MAX_SESSION_FILES newest regular
 * `*.jsonl` files under a directory (recursively), at most the last MAX_TAIL_BYTES of each.
 * Symlinks, special files and anything unreadable are skipped silently; memory and work are
 * bounded by MAX_SESSION_FILES × MAX_TAIL_BYTES whatever the file sizes.
 */

interface Candidate {
  readonly path: string;
  readonly mtimeMs: number;
}

/** O_NOFOLLOW: a file swapped for a symlink after the walk is refused; O_NONBLOCK: a FIFO never blocks. */
const OPEN_FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;

async function entriesOf(dir: string): Promise<Dirent[]> {
  const entries: Dirent[] = [];
  try {
    for await (const entry of await opendir(dir)) entries.push(entry);
  } catch {
    // Missing or unreadable directory: nothing to consider there.
  }
  return entries;
}

async function candidateOf(path: string): Promise<Candidate | undefined> {
  try {
    const info = await lstat(path);
    return info.isFile() ? { path, mtimeMs: info.mtimeMs } : undefined;
  } catch {
    return undefined;
  }
}

/** Every regular `*.jsonl` file under `root`; directory symlinks are not followed. */
async function walk(root: string): Promise<Candidate[]> {
  const found: Candidate[] = [];
  const pending = [root];
  for (let dir = pending.pop(); dir !== undefined; dir = pending.pop()) {
    for (const entry of await entriesOf(dir)) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) pending.push(path);
      else if (entry.isFile() && entry.name.endsWith('.jsonl')) {
        const candidate = await candidateOf(path);
        if (candidate !== undefined) found.push(candidate);
      }
    }
  }
  return found;
}

function newest(candidates: Candidate[]): Candidate[] {
  const sorted = [...candidates].sort((a, b) => b.mtimeMs - a.mtimeMs || (a.path < b.path ? -1 : 1));
  return sorted.slice(0, MAX_SESSION_FILES);
}

/** A positioned read of the last MAX_TAIL_BYTES of one file; undefined when it cannot be read. */
async function readTail(path: string): Promise<SessionTail | undefined> {
  let handle;
  try {
    handle = await open(path, OPEN_FLAGS);
  } catch {
    return undefined;
  }
  try {
    const info = await handle.stat();
    if (!info.isFile()) return undefined;
    const start = Math.max(0, info.size - MAX_TAIL_BYTES);
    const buffer = Buffer.allocUnsafe(info.size - start);
    let filled = 0;
    while (filled < buffer.length) {
      const { bytesRead } = await handle.read(buffer, filled, buffer.length - filled, start + filled);
      if (bytesRead === 0) break;
      filled += bytesRead;
    }
    const text = buffer.toString('utf8', 0, filled);
    return { mtimeMs: info.mtimeMs, text, partial: start > 0 };
  } catch {
    return undefined;
  } finally {
    await handle.close().catch(() => undefined);
  }
}

/**
 * The tails of the newest session files under `dir`, oldest first (the order the reducer
 * treats as "later is newer"). A missing directory yields [].
 */
export async function readSessionTails(dir: string): Promise<SessionTail[]> {
  const tails: SessionTail[] = [];
  for (const candidate of newest(await walk(dir))) {
    const tail = await readTail(candidate.path);
    if (tail !== undefined) tails.push(tail);
  }
  return tails.reverse();
}

/** Whether `dir` exists and is a directory (following a symlink given as the root). */
export async function isDirectory(dir: string): Promise<boolean> {
  try {
    return (await stat(dir)).isDirectory();
  } catch {
    return false;
  }
}
