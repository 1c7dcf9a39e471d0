// A restarted server's sessions: adopted, reaped or left alone as foreign, and held slots with no container released.
import { holdSessionSecrets } from './session-secrets.js';
import type { CleanupRecord } from './session-schemas.js';
import { adoptedSession, type ForeignContainer } from './session-adopt.js';
import type { Session, SessionManagerDeps } from './session-state.js';
import { settleRecordedCleanup } from './session-teardown.js';
import { endOrphanedExecs } from './session-orphans.js';

/** What a restarted server found: sessions adopted, reaped and slots released, and containers it left alone. */
export interface Adoption {
  readonly adopted: string[];
  readonly reaped: string[];
  readonly released: string[];
  /** Containers with this server's batch label whose session.json, claim and reservation do not all match. */
  readonly foreign: ForeignContainer[];
  /** Execs the previous server left running in adopted sessions, ended (each has its line in execs.jsonl). */
  endedExecs: number;
}

/**
 * After a restart: find this server's sessions by label, session.json and registry row (all three must match;
 * anything else is `foreign`: left alone, logged, reported). Expired ones are deleted with verification; live
 * ones are adopted; a held slot of this server whose session has no container (and no container carries its
 * claim) is released, and a cleanup.json that said the slot was kept is brought up to date.
 */
export async function adoptSessions(
  deps: SessionManagerDeps,
  sessions: Map<string, Session>,
  now: number,
  readEnvironment: (containerId: string) => Promise<Record<string, string> | null>,
  deleteSession: (sessionId: string, reason: CleanupRecord['reason']) => Promise<unknown>,
): Promise<Adoption> {
  const adoption: Adoption = { adopted: [], reaped: [], released: [], foreign: [], endedExecs: 0 };
  const containers = await deps.engine.listByLabel({ 'roboguide.batch': deps.batchId });
  const claimsOnContainers = new Set(
    containers.map((c) => c.labels['roboguide.claim'] ?? '').filter((c) => c !== ''),
  );
  for (const container of containers) {
    const found = await adoptedSession(deps, container, now, readEnvironment);
    const reason =
      found.kind === 'foreign'
        ? found.reason
        : sessions.has(found.sessionId)
          ? 'a second container for an adopted session id (a duplicate id)'
          : null;
    if (found.kind === 'foreign' || reason !== null) {
      const foreign = {
        container_id: container.id,
        session_id: container.labels['roboguide.job'] ?? '',
        reason: reason ?? '',
      };
      adoption.foreign.push(foreign);
      deps.logger.warn(
        { container: foreign.container_id, session: foreign.session_id, reason: foreign.reason },
        "container with this server's labels left alone: not provably one of its sessions",
      );
      continue;
    }
    // Its re-learned secrets' masking compiled (in steps) and held while it is in memory (session-secrets.ts).
    await holdSessionSecrets(found.session, deps.clock);
    sessions.set(found.sessionId, found.session);
    if (!found.live) {
      await deleteSession(found.sessionId, 'adopted_expired');
      adoption.reaped.push(found.sessionId);
    } else {
      adoption.adopted.push(found.sessionId);
      adoption.endedExecs += await endOrphanedExecs(deps, found.session);
    }
  }
  for (const reservation of await deps.registry.held({ batchId: deps.batchId })) {
    if (sessions.has(reservation.jobId) || claimsOnContainers.has(reservation.claimId)) continue;
    // No container carries this claim: nothing runs, the slot goes back.
    await deps.registry.release(reservation.id, reservation.claimId);
    adoption.released.push(reservation.jobId);
    await settleRecordedCleanup(deps, reservation.jobId);
  }
  return adoption;
}
