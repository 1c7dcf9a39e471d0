import { SESSION_FILE } from '../../core/evidence-names.js';
import { sessionRel, type Session, type SessionManagerDeps } from './session-state.js';

/** Expiry persisted on disk is refreshed when it lags the in-memory one by more than this. */
const EXPIRY_PERSIST_SLACK_MS = 30_000;

/** Renews a session's TTL from `nowMs`; session.json follows when it lags by more than the slack. */
export function touchSession(
  deps: Pick<SessionManagerDeps, 'store' | 'logger'>,
  session: Session,
  nowMs: number,
): void {
  session.expiresAtMs = nowMs + session.record.ttl_seconds * 1000;
  if (session.expiresAtMs - session.persistedExpiresAtMs > EXPIRY_PERSIST_SLACK_MS)
    void persistExpiry(deps, session);
}

/**
 * Takes a renewal back (a request that renewed as it started, then failed): the expiry is `expiresAtMs` again, and
 * session.json follows when it holds a later one.
 */
export function restoreExpiry(
  deps: Pick<SessionManagerDeps, 'store' | 'logger'>,
  session: Session,
  expiresAtMs: number,
): void {
  session.expiresAtMs = expiresAtMs;
  if (session.persistedExpiresAtMs > expiresAtMs) void persistExpiry(deps, session);
}

/** Writes the session's expiry into session.json (atomic); a failure is logged, never thrown. */
export async function persistExpiry(
  deps: Pick<SessionManagerDeps, 'store' | 'logger'>,
  session: Session,
): Promise<void> {
  const expiresAtMs = session.expiresAtMs;
  session.persistedExpiresAtMs = expiresAtMs;
  session.record = { ...session.record, expires_at: new Date(expiresAtMs).toISOString() };
  try {
    await deps.store.writeJsonAtomic(sessionRel(session.record.session_id, SESSION_FILE), session.record);
  } catch (err) {
    deps.logger.warn(
      { session: session.record.session_id, error: (err as Error).message },
      'cannot persist session expiry',
    );
  }
}
