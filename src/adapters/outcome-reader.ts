import { createHash } from 'node:crypto';
import { constants } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import { basename, dirname } from 'node:path';
import type { OutcomeReader } from '../app/ports/outcome-reader.js';
import { MAX_OUTCOME_BYTES, type OutcomeRead } from '../core/outcome.js';
import { redactBytes } from './log-redaction.js';
import { O_PATH, openDirNoFollow, reopenDir, replaceFileAt, UnsafePathError } from './no-follow-dir.js';

/**
 * Read the driver's outcome file (the pair's private outcome folder, SPEC §5), bounded: never following a
 * symlink at the last component, never more than MAX_OUTCOME_BYTES + 1 bytes into memory. Never throws.
 */
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
    if (stat.size > MAX_OUTCOME_BYTES) return { state: 'too_large', sizeBytes: stat.size };
    // The file may still grow while we read it (a container that outlived its removal): read one byte
    // past the limit at most, so the bound holds whatever stat said.
    const buffer = Buffer.alloc(Math.min(stat.size, MAX_OUTCOME_BYTES) + 1);
    let length = 0;
    for (;;) {
      const { bytesRead } = await handle.read(buffer, length, buffer.length - length, null);
      if (bytesRead === 0) break;
      length += bytesRead;
      if (length === buffer.length) break;
    }
    if (length > MAX_OUTCOME_BYTES) return { state: 'too_large', sizeBytes: length };
    if (length === buffer.length) {
      // Grew past what stat said, yet within the limit: read the rest with the same bound.
      return await readGrown(handle, buffer.subarray(0, length));
    }
    return { state: 'present', bytes: buffer.subarray(0, length) };
  } catch (err) {
    return { state: 'unreadable', code: (err as NodeJS.ErrnoException).code ?? 'EUNKNOWN' };
  } finally {
    await handle.close().catch(() => undefined);
  }
}

async function readGrown(handle: Awaited<ReturnType<typeof open>>, head: Buffer): Promise<OutcomeRead> {
  const rest = Buffer.alloc(MAX_OUTCOME_BYTES + 1 - head.length);
  let length = 0;
  for (;;) {
    const { bytesRead } = await handle.read(rest, length, rest.length - length, null);
    if (bytesRead === 0) break;
    length += bytesRead;
    if (length === rest.length) break;
  }
  const total = head.length + length;
  if (total > MAX_OUTCOME_BYTES) return { state: 'too_large', sizeBytes: total };
  return { state: 'present', bytes: Buffer.concat([head, rest.subarray(0, length)]) };
}

/**
 * SHA-256 of the outcome file as it is now, or null when there are no bytes to hash: absent, unreadable (a symlink,
 * not a regular file, an I/O error) or over the limit — exactly when result.json records `outcome_sha256: null`.
 * Never throws: reconciliation in process and through the CLI reach the same verdict from the same evidence.
 */
export async function readOutcomeSha256(path: string): Promise<string | null> {
  const read = await readOutcomeFile(path);
  // the evidence's one digest, as src/app/digest.ts computes it: SHA-256, lowercase hex
  return read.state === 'present' ? createHash('sha256').update(read.bytes).digest('hex') : null;
}

/**
 * The operator's copy of a pair's outcome at its host `outcome_path`, replaced atomically (replaceFileAt), mode 0600:
 * it holds the driver's raw bytes, secrets included. Its folder lies in the pair's cwd, which another pair sharing
 * it (or this one, while it ran) can rename and relink: the folder is walked from `/` one component at a time
 * without following any link (openDirNoFollow), missing folders made one at a time relative to the folder already
 * held, so nothing is ever created or written through a link; a link on the way refuses the copy (UnsafePathError,
 * E_UNSAFE_PATH). The outcome's own folder is made unreadable to other users (created 0700, or its "other" bits
 * cleared: the engine creates a missing mount point 0755).
 */
export async function publishOutcomeCopy(bytes: Uint8Array, hostPath: string): Promise<void> {
  const dir = await openDirNoFollow(dirname(hostPath), 'create', 0o700);
  try {
    await closeToOthers(dir);
    await replaceFileAt(dir, basename(hostPath), bytes);
  } catch (err) {
    // The folder held was removed under us (a rename over it): refused like a link, never retried by path.
    if ((err as NodeJS.ErrnoException).code === 'ENOENT')
      throw new UnsafePathError(dirname(hostPath), 'was removed while the copy was made');
    throw err;
  } finally {
    await dir.close();
  }
}

/**
 * Clears the "other" permission bits of the folder `dir` holds (the object itself, reopened: never a path), unless
 * it is a shared folder (sticky, or writable by others, as `/tmp`): an outcome path in one must not take it from its
 * other users (the second review turned a root-owned 1777 folder into 1770 through an API pair's outcome path). The
 * copy itself is 0600 either way.
 */
async function closeToOthers(dir: FileHandle): Promise<void> {
  const folder = await reopenDir(dir);
  try {
    const { mode } = await folder.stat();
    const shared = (mode & 0o1000) !== 0 || (mode & 0o002) !== 0;
    if ((mode & 0o007) !== 0 && !shared) await folder.chmod(mode & 0o7770);
  } finally {
    await folder.close();
  }
}

/**
 * The evidence copy of a finished pair's outcome (its private folder, which no container reaches any more) with
 * every secret masked, and the bytes to hash for `outcome_sha256`:
 * - nothing to mask: the file is left alone and `bytes` are returned;
 * - the file still holds `bytes` (compare and swap): it is replaced atomically by the masked bytes (a temp file
 *   beside it, created exclusively and without following links, fsynced, renamed over it; rename replaces a
 *   link, never follows it), and the masked bytes are returned;
 * - the file changed since it was read (a driver that outlived its stop): it is left alone and the masked bytes
 *   are returned anyway, so terminal reconciliation sees the change (`outcome_changed`) instead of it being hidden;
 * - the replace failed (ENOSPC, EIO): the file is left as it is and the hash of what is on disk is returned, so
 *   the pair is not held forever; `masked: false` says the copy kept the driver's bytes.
 */
export async function maskOutcomeCopy(
  bytes: Uint8Array,
  privatePath: string,
  secrets: readonly string[],
  replace: (path: string, bytes: Uint8Array) => Promise<void> = (path, data) =>
    replaceFile(path, data, 'best-effort'),
): Promise<{ kept: Uint8Array; masked: boolean }> {
  const masked = redactBytes(bytes, secrets);
  if (masked.equals(bytes)) return { kept: bytes, masked: true };
  const now = await readOutcomeFile(privatePath);
  if (now.state !== 'present' || !Buffer.from(now.bytes).equals(bytes)) return { kept: masked, masked: true };
  try {
    await replace(privatePath, masked);
    return { kept: masked, masked: true };
  } catch {
    return { kept: bytes, masked: false };
  }
}

/**
 * Atomic replace of the file at `path` (replaceFileAt in its folder, opened once: the private outcome folder in
 * the evidence, which no container reaches any more once the pair is finished).
 */
async function replaceFile(
  path: string,
  bytes: Uint8Array,
  folderSync: 'required' | 'best-effort' = 'required',
): Promise<void> {
  const dir = await open(dirname(path), O_PATH | constants.O_DIRECTORY);
  try {
    await replaceFileAt(dir, basename(path), bytes, folderSync);
  } finally {
    await dir.close();
  }
}

/**
 * A pair finished without its supervisor (lost worker, `pair recover`): the private outcome as the driver left it
 * (for the verdict) and as kept in the evidence after masking (for `outcome_sha256`; see maskOutcomeCopy).
 */
export async function readAndMaskOutcome(
  privatePath: string,
  secrets: readonly string[],
): Promise<{ read: OutcomeRead; kept: Uint8Array | null; masked: boolean }> {
  const read = await readOutcomeFile(privatePath);
  if (read.state !== 'present') return { read, kept: null, masked: true };
  const { kept, masked } = await maskOutcomeCopy(read.bytes, privatePath, secrets);
  return { read, kept, masked };
}

/** The OutcomeReader port on the local file system. */
export const fileOutcomeReader: OutcomeReader = {
  read: readOutcomeFile,
  sha256: readOutcomeSha256,
  readAndMask: readAndMaskOutcome,
};
