import type { CapacityRegistry } from '../ports/capacity-registry.js';
import type { SessionRecord } from './session-state.js';

/**
 * Releases the session's slot; `error` says why when it was not released (nor already). The session's container
 * is removed and its 404 verified before, by the pairs' own removal (src/app/remove-and-verify.ts).
 */
export async function releaseSlot(
  registry: CapacityRegistry,
  record: SessionRecord,
): Promise<{ released: boolean; error: string | null }> {
  const released = await registry.release(record.reservation_id, record.claim_id);
  if (released.kind === 'refused') return { released: false, error: `slot: ${released.reason}` };
  return { released: true, error: null };
}
