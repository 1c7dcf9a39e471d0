// The end of a session: the verified deletion, its cleanup.json, and the API's answer when the slot stays held.
import { CLEANUP_FILE, EGRESS_FILE } from '../../core/evidence-names.js';
import { redactText } from '../../core/redaction/redact-text.js';
import { describeRemovalFailure } from '../pair/remove-and-verify.js';
import { ApiError, isRegistryUnavailable, REGISTRY_RETRY_AFTER_SEC, toApiError } from './api-error.js';
import { CleanupRecordSchema, type CleanupRecord } from './session-schemas.js';
import { releaseSlot, removeSessionContainer } from './session-deletion.js';
import { SESSION_ID, sessionRel, type Session, type SessionManagerDeps } from './session-state.js';

/**
 * Controlled stop, removal verified by the engine's 404, the slot released once (the body of
 * SessionManager.delete). A failed slot release writes cleanup.json and throws the API's answer.
 */
export async function performDeletion(
  deps: SessionManagerDeps,
  session: Session,
  reason: CleanupRecord['reason'],
): Promise<CleanupRecord> {
  await session.ready; // a session still being created is deleted once its container exists
  const { record } = session;
  const containerId = record.container_id;
  if (session.removal === null) {
    session.state = 'deleting';
    const removal = await removeSessionContainer(deps, containerId);
    if (!removal.verified_absent) {
      // Not proven gone: keep the slot and let a later DELETE (or the reaper) try again.
      session.state = 'live';
      session.deletionReason = null;
      session.deletion = null;
      deps.logger.error(
        { session: record.session_id, container: containerId },
        'session removal unverified; slot kept',
      );
      return cleanupRecord(deps, session, reason, {
        stopped: removal.stopped,
        removed: removal.removed,
        verified_absent: false,
        slot_released: false,
        error: describeRemovalFailure(removal.failure),
      });
    }
    session.removal = { stopped: removal.stopped, removed: removal.removed };
    session.state = 'releasing';
    // Its lease at the egress proxy released and every attempt in egress.jsonl (masked), once nothing can add one.
    await session.egress
      ?.finish(deps.store, sessionRel(record.session_id, EGRESS_FILE), session.secrets)
      .catch((err: unknown) =>
        deps.logger.warn(
          { session: record.session_id, error: (err as Error).message },
          'egress.jsonl not written',
        ),
      );
    // Its own staging points go now (its container is gone, verified); those of sessions adopted from an earlier
    // server, and any a failed step left, go with the sweep once no container uses them.
    for (const path of session.staged ?? []) await deps.mountStager?.release(path).catch(() => undefined);
    session.staged = [];
    await deps.mountStager?.sweep().catch(() => undefined);
  }
  const removal = session.removal;
  let slot: { released: boolean; error: string | null };
  try {
    slot = await releaseSlot(deps.registry, record);
  } catch (err) {
    const cleanup = cleanupRecord(deps, session, reason, {
      ...removal,
      verified_absent: true,
      slot_released: false,
      error: `slot: ${(err as Error).message}`,
    });
    await writeCleanup(deps, cleanup);
    deps.logger.error(
      { session: record.session_id, container: containerId, error: cleanup.error },
      'session removed (verified) but its slot could not be released; will retry',
    );
    throw releaseFailure(session, err);
  }
  const cleanup = cleanupRecord(deps, session, reason, {
    ...removal,
    verified_absent: true,
    slot_released: slot.released,
    error: slot.error,
  });
  await writeCleanup(deps, cleanup);
  session.state = 'deleted';
  deps.logger.info({ session: record.session_id, container: containerId, reason }, 'session deleted');
  return cleanup;
}

function cleanupRecord(
  deps: Pick<SessionManagerDeps, 'clock'>,
  session: Session,
  reason: CleanupRecord['reason'],
  facts: Pick<CleanupRecord, 'stopped' | 'removed' | 'verified_absent' | 'slot_released' | 'error'>,
): CleanupRecord {
  return {
    session_id: session.record.session_id,
    container_id: session.record.container_id ?? '',
    reason,
    ...facts,
    error: facts.error === null ? null : redactText(facts.error, session.secrets),
    finished_at: deps.clock.now().toISOString(),
  };
}

async function writeCleanup(
  deps: Pick<SessionManagerDeps, 'store' | 'logger'>,
  cleanup: CleanupRecord,
): Promise<void> {
  await deps.store
    .writeJsonAtomic(sessionRel(cleanup.session_id, CLEANUP_FILE), cleanup)
    .catch((err: unknown) => {
      deps.logger.error(
        { session: cleanup.session_id, error: (err as Error).message },
        'cannot write cleanup.json',
      );
    });
}

/** The API's answer to a deletion whose slot could not be released: 503 + Retry-After while the registry is unreachable. */
function releaseFailure(session: Session, err: unknown): ApiError {
  const id = session.record.session_id;
  if (isRegistryUnavailable(err)) {
    const message = `session ${id}: its container is removed (verified) but the capacity registry cannot be reached to release its slot; DELETE again later (the reaper retries too)`;
    return new ApiError(503, 'E_REGISTRY_UNAVAILABLE', message, [], {
      retryAfterSec: REGISTRY_RETRY_AFTER_SEC,
      cause: err,
    });
  }
  const api = toApiError(err);
  const message = `session ${id}: its container is removed (verified) but its slot could not be released: ${redactText(api.message, session.secrets)}`;
  return new ApiError(api.status, api.code, message, api.issues, {
    cause: err,
    ...(api.retryAfterSec !== null ? { retryAfterSec: api.retryAfterSec } : {}),
  });
}

/** The cleanup.json of a session no longer in memory (a DELETE after a restart), or null. */
export async function recordedCleanup(
  deps: Pick<SessionManagerDeps, 'store'>,
  sessionId: string,
): Promise<CleanupRecord | null> {
  return deps.store.readJson(sessionRel(sessionId, CLEANUP_FILE), CleanupRecordSchema).catch(() => null);
}

/** A cleanup.json written while the registry was down (`slot_released: false`, container verified gone): now released. */
export async function settleRecordedCleanup(deps: SessionManagerDeps, sessionId: string): Promise<void> {
  if (!SESSION_ID.test(sessionId)) return;
  const record = await recordedCleanup(deps, sessionId);
  if (record === null || record.slot_released || !record.verified_absent) return;
  await writeCleanup(deps, {
    ...record,
    slot_released: true,
    error: null,
    finished_at: deps.clock.now().toISOString(),
  });
}

/** A create that failed (the engine adapter removes its container): give the slot back, say why in cleanup.json. */
export async function abandonCreate(deps: SessionManagerDeps, session: Session, err: Error): Promise<void> {
  const { session_id: sessionId, reservation_id: reservationId, claim_id: claimId } = session.record;
  const left = await removeLeftoverOfCreate(deps, claimId);
  // The create's own error is the answer; a slot the registry cannot release now is released by the next start.
  // A container not proven gone keeps the slot (as a DELETE would): the next start reports it as foreign.
  const released =
    left.verified_absent &&
    (await deps.registry.release(reservationId, claimId).then(
      (answer) => answer.kind !== 'refused',
      (releaseErr: unknown) => {
        deps.logger.error(
          { session: sessionId, error: (releaseErr as Error).message },
          'cannot release the slot of a failed create; the next start releases it',
        );
        return false;
      },
    ));
  if (!left.verified_absent)
    deps.logger.error(
      { session: sessionId, container: left.containerId, error: left.error },
      'container of a failed create not proven gone; slot kept',
    );
  const created = `create failed: ${redactText(err.message, session.secrets)}`;
  await deps.store
    .writeJsonAtomic(sessionRel(sessionId, CLEANUP_FILE), {
      session_id: sessionId,
      container_id: left.containerId,
      reason: 'deleted',
      stopped: left.stopped,
      removed: left.removed,
      verified_absent: left.verified_absent,
      slot_released: released,
      error: left.error === null ? created : `${created}; ${left.error}`,
      finished_at: deps.clock.now().toISOString(),
    } satisfies CleanupRecord)
    .catch(() => undefined);
}

/**
 * A failed create may have left a container (created, then its start or a check refused, and the adapter's own
 * removal failed too; or created by an engine whose answer never came): found by the claim's label, whether its id
 * reached us or not, and removed with the engine's 404 seen, by the pairs' own removal. Not verified when the
 * engine cannot be asked.
 */
async function removeLeftoverOfCreate(
  deps: SessionManagerDeps,
  claimId: string,
): Promise<{
  containerId: string;
  stopped: boolean;
  removed: boolean;
  verified_absent: boolean;
  error: string | null;
}> {
  let found: readonly { id: string }[];
  try {
    found = await deps.engine.listByLabel({ 'roboguide.claim': claimId });
  } catch (listErr) {
    const message = `cannot list its containers: ${(listErr as Error).message}`;
    return { containerId: '', stopped: false, removed: false, verified_absent: false, error: message };
  }
  let left = {
    containerId: '',
    stopped: false,
    removed: false,
    verified_absent: true,
    error: null as string | null,
  };
  for (const { id } of found) {
    const removal = await removeSessionContainer(deps, id);
    left = {
      containerId: id,
      stopped: removal.stopped,
      removed: removal.removed,
      verified_absent: removal.verified_absent,
      error: removal.verified_absent ? null : (describeRemovalFailure(removal.failure) ?? 'still present'),
    };
    if (!removal.verified_absent) break;
  }
  return left;
}

/** The end of a shutdown: sessions deleted, and those whose slot could not be released (recorded in cleanup.json). */
export interface ShutdownCleanup {
  readonly deleted: CleanupRecord[];
  readonly unreleased: { readonly session_id: string; readonly error: string }[];
}

/** The sessions a shutdown deleted, and those it could not finish (their slot still held), in the order of `ids`. */
export function shutdownCleanup(
  ids: string[],
  outcomes: PromiseSettledResult<CleanupRecord>[],
): ShutdownCleanup {
  const deleted: CleanupRecord[] = [];
  const unreleased: { session_id: string; error: string }[] = [];
  outcomes.forEach((outcome, index) => {
    if (outcome.status === 'fulfilled') deleted.push(outcome.value);
    else unreleased.push({ session_id: ids[index]!, error: (outcome.reason as Error).message });
  });
  return { deleted, unreleased };
}
