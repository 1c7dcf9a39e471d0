import type { CapacityRegistry } from '../ports/capacity-registry.js';
import { verifiedRemoval, type Removal } from '../pair/remove-and-verify.js';
import type { Logger } from '../ports/logger.js';
import type { CleanupRecord } from './session-schemas.js';
import type { Session, SessionManagerDeps, SessionRecord } from './session-state.js';

/** A session whose container was never created: nothing to stop, nothing to remove, nothing left. */
const NO_CONTAINER: Removal = {
  stopped: false,
  removed: false,
  verified_absent: true,
  attempts: 0,
  failure: null,
};

/** The session's container removed and its 404 verified, by the pairs' own removal (remove-and-verify.ts). */
export async function removeSessionContainer(
  deps: Pick<SessionManagerDeps, 'engine' | 'logger' | 'stopBudgetSec' | 'verifyAbsentTimeoutMs' | 'clock'>,
  containerId: string | null,
): Promise<Removal> {
  if (containerId === null) return NO_CONTAINER;
  const { engine, logger, verifyAbsentTimeoutMs, clock } = deps;
  return verifiedRemoval(
    { runtime: engine, logger, verifyAbsentTimeoutMs, clock },
    containerId,
    deps.stopBudgetSec,
  );
}

/** Releases the session's slot; `error` says why when it was not released (nor already). */
export async function releaseSlot(
  registry: CapacityRegistry,
  record: SessionRecord,
): Promise<{ released: boolean; error: string | null }> {
  const released = await registry.release(record.reservation_id, record.claim_id);
  if (released.kind === 'refused') return { released: false, error: `slot: ${released.reason}` };
  return { released: true, error: null };
}

/**
 * One reaper pass: deletes every session whose TTL has passed (no exec in flight) or whose container ended (an earlier
 * deletion not verified), and retries the slot release of sessions left `releasing`. Returns the ids deleted now; a failure is logged, never thrown.
 */
export async function reapPass(
  sessions: Iterable<Session>,
  now: number,
  logger: Logger,
  deleteSession: (sessionId: string) => Promise<CleanupRecord>,
): Promise<string[]> {
  const due = [...sessions].filter(
    (s) =>
      s.deletion === null &&
      ((s.state === 'live' && s.expiresAtMs <= now && s.execs.size === 0) ||
        (s.state === 'live' && s.ended !== null) ||
        s.state === 'releasing'),
  );
  const outcomes = await Promise.allSettled(due.map((s) => deleteSession(s.record.session_id)));
  const done: string[] = [];
  outcomes.forEach((outcome, index) => {
    const id = due[index]!.record.session_id;
    if (outcome.status === 'fulfilled' && outcome.value.verified_absent) done.push(id);
    else if (outcome.status === 'rejected')
      logger.warn(
        { session: id, error: (outcome.reason as Error).message },
        'reaper: deletion not finished; the next pass retries',
      );
  });
  return done;
}
