import { constants } from 'node:fs';
import type { Dirent } from 'node:fs';
import { lstat, open, opendir, stat } from 'node:fs/promises';
import type { FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import type * as Zlib from 'node:zlib';
import { MAX_SESSION_FILES, MAX_TAIL_BYTES } from '../core/provider-failure.js';
import type { SessionTail } from '../core/provider-failure.js';
import type { SessionFiles, SessionTails } from '../app/ports/session-tails.js';

/**
 * Reads the tails of Codex session files (SPEC §6): the MAX_SESSION_FILES newest regular
 * `*.jsonl` files under a directory (recursively), at most the last MAX_TAIL_BYTES of each.
 * A `*.jsonl.zst` (Codex's off-by-default compressed rollouts) counts when no plain `.jsonl`
 * sibling of the same name exists; it is decompressed as a stream, keeping only its last
 * MAX_TAIL_BYTES. Symlinks and special files are skipped; a file that cannot be read or
 * decompressed is counted as unreadable. Memory and work are bounded by MAX_SESSION_FILES ×
 * MAX_TAIL_BYTES (plus MAX_ZST_BYTES of compressed input per file) whatever the file sizes.
 */

/** A compressed rollout larger than this is not decompressed (unreadable): its work would be unbounded. */
export const MAX_ZST_BYTES = 16 * 1024 * 1024;
/** Decompressing past this many bytes stops (unreadable): a decompression bomb costs no more. */
export const MAX_ZST_DECOMPRESSED_BYTES = 256 * 1024 * 1024;
/** zstd window cap (2^25 = 32 MiB): a hostile frame cannot make the decoder allocate more. */
const ZSTD_WINDOW_LOG_MAX = 25;
const ZST_SUFFIX = '.zst';
const CHUNK_BYTES = 64 * 1024;

/**
 * node:zlib, loaded on first use: only a diagnosis of compressed rollouts needs it, and loading it at the top cost every
 * command's start about 4 ms (issue 39).
 */
const zlib = (): typeof Zlib => process.getBuiltinModule('node:zlib');

/** Whether this Node's zlib can decompress zstd (Node ≥ 23.8 / 22.15). */
export function zstdAvailable(): boolean {
  return typeof (zlib() as { createZstdDecompress?: unknown }).createZstdDecompress === 'function';
}

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

/**
 * Every regular `*.jsonl` file under `root`, and every `*.jsonl.zst` without a `*.jsonl` sibling
 * of the same name; directory symlinks are not followed.
 */
async function walk(root: string): Promise<Candidate[]> {
  const found: Candidate[] = [];
  const pending = [root];
  for (let dir = pending.pop(); dir !== undefined; dir = pending.pop()) {
    const entries = await entriesOf(dir);
    const plain = new Set(entries.filter((e) => e.name.endsWith('.jsonl')).map((e) => e.name));
    for (const entry of entries) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) pending.push(path);
      else if (entry.isFile() && isSessionName(entry.name, plain)) {
        const candidate = await candidateOf(path);
        if (candidate !== undefined) found.push(candidate);
      }
    }
  }
  return found;
}

function isSessionName(name: string, plainNames: ReadonlySet<string>): boolean {
  if (name.endsWith('.jsonl')) return true;
  return name.endsWith(`.jsonl${ZST_SUFFIX}`) && !plainNames.has(name.slice(0, -ZST_SUFFIX.length));
}

function newest(candidates: Candidate[]): Candidate[] {
  const sorted = [...candidates].sort((a, b) => b.mtimeMs - a.mtimeMs || (a.path < b.path ? -1 : 1));
  return sorted.slice(0, MAX_SESSION_FILES);
}

/** A positioned read of the last MAX_TAIL_BYTES of one plain file. */
async function readPlainTail(handle: FileHandle, size: number, mtimeMs: number): Promise<SessionTail> {
  const start = Math.max(0, size - MAX_TAIL_BYTES);
  const buffer = Buffer.allocUnsafe(size - start);
  let filled = 0;
  while (filled < buffer.length) {
    const { bytesRead } = await handle.read(buffer, filled, buffer.length - filled, start + filled);
    if (bytesRead === 0) break;
    filled += bytesRead;
  }
  return { mtimeMs, text: buffer.toString('utf8', 0, filled), partial: start > 0 };
}

/** Keeps the last MAX_TAIL_BYTES of a byte stream. */
class TailKeeper {
  private chunks: Buffer[] = [];
  private kept = 0;
  total = 0;

  push(chunk: Buffer): void {
    this.total += chunk.length;
    this.chunks.push(chunk);
    this.kept += chunk.length;
    while (this.chunks.length > 1 && this.kept - (this.chunks[0]?.length ?? 0) >= MAX_TAIL_BYTES) {
      this.kept -= this.chunks.shift()?.length ?? 0;
    }
  }

  tail(): Buffer {
    const all = Buffer.concat(this.chunks);
    return all.length > MAX_TAIL_BYTES ? all.subarray(all.length - MAX_TAIL_BYTES) : all;
  }
}

/**
 * The last MAX_TAIL_BYTES of a zstd-compressed file, decompressed as a stream (a zstd frame
 * cannot be entered from its end); undefined when zstd is unavailable, the input is too large
 * or corrupt, or its output passes MAX_ZST_DECOMPRESSED_BYTES.
 */
async function readZstTail(
  handle: FileHandle,
  size: number,
  mtimeMs: number,
): Promise<SessionTail | undefined> {
  if (!zstdAvailable() || size > MAX_ZST_BYTES) return undefined;
  const { constants: zlibConstants, createZstdDecompress } = zlib();
  const decoder = createZstdDecompress({
    params: { [zlibConstants.ZSTD_d_windowLogMax]: ZSTD_WINDOW_LOG_MAX },
  });
  const keeper = new TailKeeper();
  const done = new Promise<boolean>((resolve) => {
    decoder.on('data', (chunk: Buffer) => {
      keeper.push(chunk);
      if (keeper.total > MAX_ZST_DECOMPRESSED_BYTES) {
        decoder.destroy();
        resolve(false);
      }
    });
    decoder.on('end', () => resolve(true));
    decoder.on('error', () => resolve(false));
    decoder.on('close', () => resolve(false));
  });
  const buffer = Buffer.allocUnsafe(CHUNK_BYTES);
  let position = 0;
  try {
    while (position < size && !decoder.destroyed) {
      const { bytesRead } = await handle.read(buffer, 0, Math.min(CHUNK_BYTES, size - position), position);
      if (bytesRead === 0) break;
      position += bytesRead;
      const chunk = Buffer.from(buffer.subarray(0, bytesRead));
      if (!decoder.write(chunk))
        await new Promise<void>((resolve) => {
          decoder.once('drain', resolve);
          decoder.once('close', resolve);
        });
    }
    decoder.end();
  } catch {
    decoder.destroy();
    return undefined;
  }
  if (!(await done)) return undefined;
  return { mtimeMs, text: keeper.tail().toString('utf8'), partial: keeper.total > MAX_TAIL_BYTES };
}

/** The tail of one session file; undefined when it cannot be read. */
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
    return path.endsWith(ZST_SUFFIX)
      ? await readZstTail(handle, info.size, info.mtimeMs)
      : await readPlainTail(handle, info.size, info.mtimeMs);
  } catch {
    return undefined;
  } finally {
    await handle.close().catch(() => undefined);
  }
}

/** The tails of the newest session files under `dir`, with how many could not be read. A missing directory yields none. */
export async function readSessionFiles(dir: string): Promise<SessionFiles> {
  const tails: SessionTail[] = [];
  let unreadable = 0;
  let compressedSeen = false;
  for (const candidate of newest(await walk(dir))) {
    compressedSeen ||= candidate.path.endsWith(ZST_SUFFIX);
    const tail = await readTail(candidate.path);
    if (tail === undefined) unreadable += 1;
    else tails.push(tail);
  }
  return { tails: tails.reverse(), unreadable, compressedSeen };
}

/** The tails alone (see readSessionFiles), oldest first. */
export async function readSessionTails(dir: string): Promise<SessionTail[]> {
  return (await readSessionFiles(dir)).tails;
}

/** Whether `dir` exists and is a directory (following a symlink given as the root). */
export async function isDirectory(dir: string): Promise<boolean> {
  try {
    return (await stat(dir)).isDirectory();
  } catch {
    return false;
  }
}

/** The SessionTails port on the local file system. */
export const fileSessionTails: SessionTails = {
  read: readSessionFiles,
  isDirectory,
  get zstdAvailable(): boolean {
    return zstdAvailable();
  },
};
