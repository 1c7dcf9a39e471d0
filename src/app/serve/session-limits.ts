// The concurrency limits on execs and archive transfers: one more admitted, or 429 naming the limit and its flag.
import { ApiError } from './api-error.js';
import type { ConcurrencyLimits, Session } from './session-state.js';

/** Execs and archive transfers running now, all sessions together. */
export interface ActiveTransfers {
  exec: number;
  archive: number;
}

/**
 * One more exec or archive transfer on the session, within the limits (429 past them, naming the limit and its
 * flag); returns the function that ends it.
 */
export function acquire(
  limits: ConcurrencyLimits,
  active: ActiveTransfers,
  session: Session,
  kind: 'exec' | 'archive',
): () => void {
  const [perSession, all, flag] =
    kind === 'exec'
      ? [limits.execsPerSession, limits.execs, '--max-execs']
      : [limits.archivesPerSession, limits.archives, '--max-archives'];
  const what = kind === 'exec' ? 'execs' : 'archive transfers';
  if (session.active[kind] >= perSession) {
    throw new ApiError(
      429,
      'E_TOO_MANY_REQUESTS',
      `session ${session.record.session_id} already has ${session.active[kind]} ${what} running (limit ${perSession}, ${flag}-per-session); retry when one ends`,
      [],
      { retryAfterSec: 1 },
    );
  }
  if (active[kind] >= all) {
    throw new ApiError(
      429,
      'E_TOO_MANY_REQUESTS',
      `the server already has ${active[kind]} ${what} running (limit ${all}, ${flag}); retry when one ends`,
      [],
      { retryAfterSec: 1 },
    );
  }
  session.active[kind] += 1;
  active[kind] += 1;
  let ended = false;
  return () => {
    if (ended) return;
    ended = true;
    session.active[kind] -= 1;
    active[kind] -= 1;
  };
}
