import type { EvidenceStore } from '../evidence/evidence-store.js';
import type { Clock } from '../ports/clock.js';
import { loadBatch, readJobFiles } from './batch-context.js';
import type { HostIdentity } from '../ports/host-identity.js';
import { type StopRequest } from './layout.js';
import { STOP_FILE } from '../../core/evidence-names.js';
import { runningSupervisor } from './supervisor-liveness.js';

export interface StopOutcome {
  readonly signalled: boolean;
  readonly pid: number | null;
  readonly terminate: boolean;
  /**
   * `stop-requested`: the request was written for a live supervisor. `finished`: every job has a result and no
   * supervisor runs; `not-running`: jobs are left but no supervisor runs (paused, stopped, or it was killed). In the
   * last two nothing is written (a stop with no supervisor is void: docs/spec.md, `e1-batch stop`).
   */
  readonly state: 'stop-requested' | 'finished' | 'not-running';
  /** Jobs without a result (null: not counted, as when a supervisor was running, or the job files could not be read). */
  readonly unfinished: number | null;
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
  unfinished: number | null = null,
): Promise<StopOutcome> {
  const request: StopRequest = { terminate, requested_at: clock.now().toISOString() };
  await store.writeJsonAtomic(STOP_FILE, request);
  const supervisor = await runningSupervisor(store, host);
  const base = { terminate, state: 'stop-requested', unfinished } as const;
  if (supervisor === null) return { ...base, signalled: false, pid: null };
  try {
    process.kill(supervisor.pid, 'SIGUSR2');
  } catch {
    return { ...base, signalled: false, pid: supervisor.pid };
  }
  return { ...base, signalled: true, pid: supervisor.pid };
}

/**
 * `e1-batch stop`: refuse a folder that is not a batch (nothing written there). With no live supervisor there is
 * nothing to stop: nothing is written (a finished batch's folder stays as it finished; issue 40) and the outcome
 * says whether the batch finished or has jobs left. Else `stopBatch`.
 */
export async function requestStop(
  store: EvidenceStore,
  clock: Clock,
  terminate: boolean,
  host: Pick<HostIdentity, 'isAlive'>,
): Promise<StopOutcome> {
  const { manifest } = await loadBatch(store);
  // A live supervisor is stopped at once, whatever the job files say (nothing else is read on that path).
  if ((await runningSupervisor(store, host)) !== null) return stopBatch(store, clock, terminate, host, null);
  const unfinished = await readJobFiles(store, manifest).then(
    (files) => files.filter((f) => f.result === null).length,
    () => null, // unreadable job files: not known to be finished
  );
  const state = unfinished === 0 ? 'finished' : 'not-running';
  return { signalled: false, pid: null, terminate, state, unfinished };
}
