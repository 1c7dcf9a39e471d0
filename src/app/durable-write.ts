/**
 * The storage-fault rule of SPEC §8 step 5 for one JSON evidence file. A write that reports an
 * error may still have happened (rename done, fsync of the directory failed), so the file is read
 * back before anything else is decided:
 * - exactly the JSON we meant to write → done (`verified_after_error`);
 * - missing, or still the previous content the caller named → one retry (atomic replace again);
 * - anything else, or the retry failing too → `failed`: the file is left as it is.
 * Never throws and never deletes anything.
 */
import type { EvidenceStore } from './evidence/evidence-store.js';
import { RoboguideError } from '../core/errors.js';
import { canonicalJson } from '../core/terminal-proof.js';

export interface WriteJsonVerifiedOptions {
  /** Retries allowed after a failed, unverified write: 0 or 1 (default 1). */
  readonly retries?: 0 | 1;
  /** The content the file held before (a launch-state record): finding it again allows the retry. */
  readonly previous?: unknown;
}

export type WriteJsonVerifiedResult =
  | { readonly kind: 'written'; readonly attempts: number }
  | { readonly kind: 'verified_after_error'; readonly attempts: number; readonly error: RoboguideError }
  | { readonly kind: 'failed'; readonly attempts: number; readonly error: RoboguideError };

type ReadBack = 'same' | 'missing' | 'previous' | 'other' | 'unreadable';

function asStoreError(err: unknown, rel: string): RoboguideError {
  if (err instanceof RoboguideError) return err;
  return new RoboguideError(
    'E_STORE',
    `cannot write ${rel}: ${err instanceof Error ? err.message : String(err)}`,
    {
      cause: err,
      context: { path: rel },
    },
  );
}

async function readBack(
  store: EvidenceStore,
  rel: string,
  expected: string,
  options: WriteJsonVerifiedOptions,
): Promise<ReadBack> {
  let found: unknown;
  try {
    found = await store.readJson(rel);
  } catch (err) {
    // A file that is not JSON is foreign content: leave it. An I/O error is the same fault again.
    return asStoreError(err, rel).context['syscall'] === 'parse' ? 'other' : 'unreadable';
  }
  if (found === null) return 'missing';
  const text = canonicalOrNull(found);
  if (text === null) return 'other';
  if (text === expected) return 'same';
  if (options.previous !== undefined && text === canonicalOrNull(options.previous)) return 'previous';
  return 'other';
}

/** Canonical text, or null for a value too deep to encode (never a stack overflow). */
function canonicalOrNull(value: unknown): string | null {
  try {
    return canonicalJson(value);
  } catch {
    return null;
  }
}

async function tryWrite(store: EvidenceStore, rel: string, value: unknown): Promise<RoboguideError | null> {
  try {
    await store.writeJsonAtomic(rel, value);
    return null;
  } catch (err) {
    return asStoreError(err, rel);
  }
}

function otherContent(rel: string, cause: RoboguideError): RoboguideError {
  return new RoboguideError('E_STORE', `${rel} holds other content after a failed write; left as it is`, {
    cause,
    context: { path: rel },
    suggestions: [`inspect ${rel} by hand: it is neither the record being written nor the one it replaces`],
  });
}

export async function writeJsonVerified(
  store: EvidenceStore,
  rel: string,
  value: unknown,
  options: WriteJsonVerifiedOptions = {},
): Promise<WriteJsonVerifiedResult> {
  const expected = canonicalOrNull(value);
  if (expected === null) {
    // Not encodable (nested too deep): nothing is written, and the caller gets a failure, not an exception.
    const error = new RoboguideError(
      'E_STORE',
      `cannot write ${rel}: the value is nested too deeply to encode`,
      { context: { path: rel, syscall: 'serialize' } },
    );
    return { kind: 'failed', attempts: 0, error };
  }
  const retries = options.retries ?? 1;
  let attempts = 0;
  for (;;) {
    attempts += 1;
    const error = await tryWrite(store, rel, value);
    if (error === null) return { kind: 'written', attempts };
    const back = await readBack(store, rel, expected, options);
    if (back === 'same') return { kind: 'verified_after_error', attempts, error };
    if (back === 'other') return { kind: 'failed', attempts, error: otherContent(rel, error) };
    if (attempts > retries) return { kind: 'failed', attempts, error };
  }
}
