import type { DatabaseSync } from 'node:sqlite';
import { RoboguideError } from '../../core/errors.js';
import { failpoint } from '../../app/ports/failpoints.js';

/**
 * Runs `work` inside `BEGIN IMMEDIATE … COMMIT`: the write lock is taken up front, so a
 * count-then-insert cannot interleave with another writer (another process included).
 * Any throw rolls back; SQLite errors (busy past the timeout, constraint) become `E_REGISTRY`.
 * `operation` names the crash-test failpoints around the COMMIT (`registry:<operation>:in_txn|committed`).
 */
export function inImmediateTransaction<T>(db: DatabaseSync, work: () => T, operation = 'write'): T {
  try {
    db.exec('BEGIN IMMEDIATE');
  } catch (error) {
    throw registryFault('could not start a registry transaction', error);
  }
  try {
    const value = work();
    failpoint(`registry:${operation}:in_txn`);
    db.exec('COMMIT');
    failpoint(`registry:${operation}:committed`);
    return value;
  } catch (error) {
    if (db.isTransaction) db.exec('ROLLBACK');
    throw registryFault('registry transaction failed and was rolled back', error);
  }
}

/** Reads `work` without a transaction (a single statement sees one WAL snapshot). */
export function registryRead<T>(work: () => T): T {
  try {
    return work();
  } catch (error) {
    throw registryFault('registry read failed', error);
  }
}

export function registryFault(message: string, error: unknown): RoboguideError {
  if (error instanceof RoboguideError) return error;
  const detail = error instanceof Error ? error.message : String(error);
  // Another process held the database past the busy timeout (the registry deadline): unavailable for now, not broken.
  if (isBusy(error)) {
    return new RoboguideError(
      'E_REGISTRY_UNAVAILABLE',
      `${message}: the database stayed locked past its busy timeout (the registry deadline): ${detail}`,
      {
        cause: error,
        suggestions: [
          'another process holds the registry; `e1-batch resume` retries; ROBOGUIDE_REGISTRY_DEADLINE_MS sets the wait',
        ],
      },
    );
  }
  return new RoboguideError('E_REGISTRY', `${message}: ${detail}`, { cause: error });
}

/** SQLITE_BUSY (5) or SQLITE_LOCKED (6), primary or extended. */
function isBusy(error: unknown): boolean {
  const errcode =
    typeof error === 'object' && error !== null && 'errcode' in error ? Number(error.errcode) : NaN;
  if (Number.isInteger(errcode) && ((errcode & 0xff) === 5 || (errcode & 0xff) === 6)) return true;
  return error instanceof Error && /database is locked|database table is locked/i.test(error.message);
}
