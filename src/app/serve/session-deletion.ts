import type { CapacityRegistry } from '../ports/capacity-registry.js';
import type { SessionEngine } from './session-engine.js';
import type { SessionRecord } from './session-state.js';

const VERIFY_ATTEMPTS = 20;
const VERIFY_PAUSE_MS = 100;

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

export interface Removal {
  readonly stopped: boolean;
  readonly removed: boolean;
  /** The engine answered 404 for the container (or there never was one). */
  readonly verified: boolean;
  /** The last failure, unredacted (the caller redacts it). */
  readonly error: string | null;
}

/** Controlled stop, removal, then inspect until the engine says 404 (removing again between tries). */
export async function removeVerified(
  engine: SessionEngine,
  containerId: string | null,
  stopBudgetSec: number,
): Promise<Removal> {
  if (containerId === null) return { stopped: false, removed: false, verified: true, error: null };
  let stopped = false;
  let removed = false;
  let verified = false;
  let error: string | null = null;
  try {
    await engine.stop(containerId, stopBudgetSec);
    stopped = true;
  } catch (err) {
    error = `stop: ${(err as Error).message}`;
  }
  try {
    await engine.remove(containerId);
    removed = true;
  } catch (err) {
    error = `remove: ${(err as Error).message}`;
  }
  for (let attempt = 0; attempt < VERIFY_ATTEMPTS && !verified; attempt++) {
    try {
      verified = (await engine.inspect(containerId)) === null;
    } catch (err) {
      error = `verify: ${(err as Error).message}`;
    }
    if (!verified) {
      await sleep(VERIFY_PAUSE_MS);
      await engine.remove(containerId).catch(() => undefined);
    }
  }
  return { stopped, removed, verified, error };
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
