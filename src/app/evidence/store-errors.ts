import { isAbsolute } from 'node:path';
import { RoboguideError } from '../../core/errors.js';
import { errnoOf } from '../ports/file-system.js';
import type { FileHandle } from '../ports/file-system.js';

/** Files and folders of the evidence: the owner's only. */
export const FILE_PERMISSIONS = 0o600;
export const DIR_PERMISSIONS = 0o700;

/** E_STORE naming the relative path, the syscall and the errno code (in the message and the context). */
export function storeError(message: string, rel: string, syscall: string, cause?: unknown): RoboguideError {
  const errno = errnoOf(cause);
  return new RoboguideError('E_STORE', `${message}: ${rel}${errno === undefined ? '' : ` (${errno})`}`, {
    ...(cause === undefined ? {} : { cause }),
    context: { path: rel, syscall, ...(errno === undefined ? {} : { errno }) },
  });
}

/** Runs one port call; any failure becomes E_STORE naming the relative path and the syscall. */
export async function attempt<T>(
  syscall: string,
  rel: string,
  message: string,
  call: () => Promise<T>,
): Promise<T> {
  try {
    return await call();
  } catch (err) {
    if (err instanceof RoboguideError) throw err;
    throw storeError(message, rel, syscall, err);
  }
}

/** The call's answer, or `absent` when it failed with ENOENT; any other failure is rethrown. */
export async function unlessMissing<T, A>(call: () => Promise<T>, absent: A): Promise<T | A> {
  try {
    return await call();
  } catch (err) {
    if (errnoOf(err) === 'ENOENT') return absent;
    throw err;
  }
}

export async function ignoreFailure(call: () => Promise<unknown>): Promise<void> {
  try {
    await call();
  } catch {
    // Best effort: the primary failure is what the caller reports.
  }
}

/** write(2) until every byte is written (a short write continues where it stopped). */
export async function writeAll(handle: FileHandle, bytes: Uint8Array): Promise<void> {
  for (let offset = 0; offset < bytes.byteLength;) {
    const written = await handle.write(bytes.subarray(offset));
    if (written <= 0) throw Object.assign(new Error('write(2) wrote no bytes'), { code: 'EIO' });
    offset += written;
  }
}

export function serialize(rel: string, value: unknown, indent?: number): string {
  let text: string | undefined;
  try {
    text = JSON.stringify(value, null, indent);
  } catch (err) {
    throw storeError('value is not JSON-serializable', rel, 'serialize', err);
  }
  if (text === undefined) throw storeError('value is not JSON-serializable', rel, 'serialize');
  return text;
}

/** The segments of a path relative to the output directory; E_STORE for one that is absolute or climbs out. */
export function checkRelative(rel: string): string[] {
  if (rel === '' || rel === '.') return [];
  const segments = rel.split('/');
  if (isAbsolute(rel) || segments.some((s) => s === '' || s === '.' || s === '..')) {
    throw storeError('path must be relative and stay inside the output directory', rel, 'resolve');
  }
  return segments;
}

/** The relative path of the folder holding `rel` ('' for the output directory itself). */
export function parentRel(rel: string): string {
  return checkRelative(rel).slice(0, -1).join('/');
}
