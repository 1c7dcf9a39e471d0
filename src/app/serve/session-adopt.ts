import { SESSION_FILE } from '../../core/evidence-names.js';
import {
  isSessionRecord,
  SESSION_ID,
  sessionOf,
  sessionRel,
  type Session,
  type SessionManagerDeps,
  type SessionRecord,
} from './session-state.js';
import { relearnedSecrets } from './caller-secrets.js';

/** A container found at start that carries this server's batch label but is not provably one of its sessions. */
export interface ForeignContainer {
  readonly container_id: string;
  /** Its `roboguide.job` label ('' when absent). */
  readonly session_id: string;
  readonly reason: string;
}

export type AdoptionCandidate =
  | {
      readonly kind: 'session';
      readonly sessionId: string;
      readonly session: Session;
      readonly live: boolean;
    }
  | ({ readonly kind: 'foreign' } & ForeignContainer);

type FoundContainer = {
  readonly id: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly status: string;
};

/**
 * Why a container is not this server's session, or null when its labels, its `session.json` and its registry
 * reservation all agree: same session id and claim, a reservation of this server's batch for that session, still
 * held, and the container named by session.json (or, when the server died before writing it there, by the
 * reservation). Labels alone prove nothing: anyone who can reach the engine can copy them.
 */
function mismatch(
  container: FoundContainer,
  stored: SessionRecord | null,
  reservation: {
    readonly id: string;
    readonly batchId: string;
    readonly jobId: string;
    readonly containerId: string | null;
    readonly state: string;
  } | null,
  batchId: string,
): string | null {
  const sessionId = container.labels['roboguide.job'] ?? '';
  const claimId = container.labels['roboguide.claim'] ?? '';
  if (container.labels['roboguide.serve'] !== 'session') return 'no roboguide.serve=session label';
  if (!SESSION_ID.test(sessionId)) return 'its roboguide.job label is not a session id';
  if (stored === null) return 'no session.json for its session id';
  if (stored.session_id !== sessionId || stored.claim_id !== claimId)
    return 'its labels do not match session.json (session id or claim)';
  if (reservation === null) return 'no registry reservation for its claim';
  if (
    reservation.id !== stored.reservation_id ||
    reservation.batchId !== batchId ||
    reservation.jobId !== sessionId
  ) {
    return 'the reservation of its claim does not match session.json';
  }
  if (reservation.state !== 'held') return 'the reservation of its claim is already released';
  const named = stored.container_id ?? reservation.containerId;
  if (named === null) return 'neither session.json nor the reservation names a container';
  if (named !== container.id) return 'session.json names another container for this session (a duplicate id)';
  return null;
}

/**
 * A container of this server found after a restart: its session (record from session.json, secrets read back
 * from the engine while it is live: unexpired and running), or `foreign` with the reason when its labels,
 * session.json and reservation do not all match (left alone and reported). `live: false`: to be deleted with
 * verification.
 */
export async function adoptedSession(
  deps: Pick<SessionManagerDeps, 'store' | 'registry' | 'batchId'>,
  container: FoundContainer,
  nowMs: number,
  readEnvironment: (containerId: string) => Promise<Record<string, string> | null>,
): Promise<AdoptionCandidate> {
  const sessionId = container.labels['roboguide.job'] ?? '';
  const claimId = container.labels['roboguide.claim'] ?? '';
  const stored = SESSION_ID.test(sessionId)
    ? await deps.store.readJson(sessionRel(sessionId, SESSION_FILE), isSessionRecord).catch(() => null)
    : null;
  const reservation = claimId === '' ? null : await deps.registry.reservationForClaim(claimId);
  const reason = mismatch(container, stored, reservation, deps.batchId);
  if (reason !== null || stored === null)
    return {
      kind: 'foreign',
      container_id: container.id,
      session_id: sessionId,
      reason: reason ?? 'no session.json',
    };
  const record: SessionRecord = { ...stored, container_id: container.id };
  const expiresAtMs = Date.parse(record.expires_at);
  const env =
    expiresAtMs > nowMs && container.status === 'running' ? await readEnvironment(container.id) : null;
  // Re-learned from the container's own environment: references and the caller's literal secrets alike.
  const secrets = env === null ? [] : relearnedSecrets(record.environment, env);
  const session = sessionOf({ record, secrets, expiresAtMs, state: 'live' });
  return { kind: 'session', sessionId, session, live: env !== null };
}
