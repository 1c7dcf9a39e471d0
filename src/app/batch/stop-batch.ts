import type { EvidenceStore } from '../evidence/evidence-store.js';
import type { Clock } from '../ports/clock.js';
import { loadBatch } from './batch-context.js';
import type { HostIdentity } from '../ports/host-identity.js';
import { STOP_FILE, type StopRequest } from './layout.js';
import { runningSupervisor } from './supervisor-liveness.js';

export interface StopOutcome {
  readonly signalled: boolean;
  readonly pid: number | null;
  readonly terminate: boolean;
}

/**
 * Record a stop request (atomic file) and tell the supervisor (SIGUSR2). Without `terminate` running pairs
 * finish and are archived; with it they get a controlled stop within the stop budget.
 */
export async function stopBatch(
  store: EvidenceStore,
  clock: Clock,
  terminate: boolean,
  host: Pick<HostIdentity, 'isAlive'>,
): Promise<StopOutcome> {
  const request: StopRequest = { terminate, requested_at: clock.now().toISOString() };
  await store.writeJsonAtomic(STOP_FILE, request);
  const supervisor = await runningSupervisor(store, host);
  if (supervisor === null) return { signalled: false, pid: null, terminate };
  try {
    process.kill(supervisor.pid, 'SIGUSR2');
  } catch {
    return { signalled: false, pid: supervisor.pid, terminate };
  }
  return { signalled: true, pid: supervisor.pid, terminate };
}

/** `e1-batch stop`: refuse a folder that is not a batch (nothing written there), then `stopBatch`. */
export async function requestStop(
  store: EvidenceStore,
  clock: Clock,
  terminate: boolean,
  host: Pick<HostIdentity, 'isAlive'>,
): Promise<StopOutcome> {
  await loadBatch(store);
  return stopBatch(store, clock, terminate, host);
}
