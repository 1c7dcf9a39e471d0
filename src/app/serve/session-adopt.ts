import { referencedName } from '../../core/manifest/index.js';
import { adoptedRecord, SESSION_ID, sessionRel, type Session, type SessionManagerDeps, type SessionRecord } from './session-state.js';

/**
 * A container of this server found after a restart, as a session: its record (session.json, or its labels and
 * registry row), and its secrets read back from the engine while it is live (unexpired, running, with a record).
 * `live: false`: to be deleted with verification.
 */
export async function adoptedSession(
  deps: Pick<SessionManagerDeps, 'store' | 'registry'>,
  container: { readonly id: string; readonly labels: Readonly<Record<string, string>>; readonly status: string },
  nowMs: number,
  readEnvironment: (containerId: string) => Promise<Record<string, string> | null>,
): Promise<{ sessionId: string; session: Session; live: boolean }> {
  const sessionId = container.labels['roboguide.job'] ?? '';
  const claimId = container.labels['roboguide.claim'] ?? '';
  const stored = SESSION_ID.test(sessionId)
    ? await deps.store.readJson<SessionRecord>(sessionRel(sessionId, 'session.json')).catch(() => null)
    : null;
  const reservation = await deps.registry.reservationForClaim(claimId);
  const record = adoptedRecord(stored, { sessionId, claimId, reservationId: reservation?.id ?? '' }, container.id);
  const expiresAtMs = Date.parse(record.expires_at);
  const env = stored !== null && expiresAtMs > nowMs && container.status === 'running' ? await readEnvironment(container.id) : null;
  const secrets = env === null ? [] : Object.entries(record.environment).filter(([, v]) => referencedName(v) !== undefined).map(([k]) => env[k] ?? '').filter((v) => v !== '');
  const session: Session = {
    record, secrets, ports: {}, expiresAtMs, persistedExpiresAtMs: expiresAtMs,
    state: 'live', deletion: null, execs: new Set(), ready: Promise.resolve(),
  };
  return { sessionId, session, live: env !== null };
}
