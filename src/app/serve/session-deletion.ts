import type { CapacityRegistry } from '../ports/capacity-registry.js';
import { verifiedRemoval, type Removal } from '../remove-and-verify.js';
import type { SessionManagerDeps, SessionRecord } from './session-state.js';

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
  deps: Pick<SessionManagerDeps, 'engine' | 'logger' | 'stopBudgetSec' | 'verifyAbsentTimeoutMs'>,
  containerId: string | null,
): Promise<Removal> {
  if (containerId === null) return NO_CONTAINER;
  const { engine, logger, verifyAbsentTimeoutMs } = deps;
  return verifiedRemoval({ runtime: engine, logger, verifyAbsentTimeoutMs }, containerId, deps.stopBudgetSec);
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
