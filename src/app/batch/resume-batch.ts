import type { EvidenceStore } from '../evidence/evidence-store.js';
import { RoboguideError } from '../../core/errors.js';
import { foldJournal } from '../../core/batch-state.js';
import { loadBatch, readJobFiles, resolveAllEnvironments } from './batch-context.js';
import type { HostIdentity } from '../ports/host-identity.js';
import { runningSupervisor } from './supervisor-liveness.js';
import { SUMMARY_FILE } from '../../core/evidence-names.js';

/**
 * Checks before a resume: the recorded supervisor must be dead (pid + start time + boot id), and every
 * variable the unfinished jobs reference must be set. Returns the number of unfinished jobs.
 */
export async function checkResumable(
  store: EvidenceStore,
  environment: Readonly<Record<string, string | undefined>>,
  host: Pick<HostIdentity, 'isAlive'>,
): Promise<number> {
  const { batch, manifest } = await loadBatch(store);
  const supervisor = await runningSupervisor(store, host);
  if (supervisor !== null) {
    throw new RoboguideError(
      'E_SUPERVISOR_ALIVE',
      `the supervisor of this batch is still running (pid ${supervisor.pid})`,
      {
        suggestions: ['wait for it, or `e1-batch stop` it first'],
      },
    );
  }
  const files = await readJobFiles(store, manifest);
  const unfinished = new Set(files.filter((f) => f.result === null).map((f) => f.job.job_id));
  resolveAllEnvironments(manifest, environment, unfinished, {
    allowShortSecrets: batch.allow_short_secrets === true,
  });
  return unfinished.size;
}

/**
 * A batch that drained (its last supervisor exited `drained`) with every job's result written and its SUMMARY.json
 * on disk: nothing is left for a supervisor to run, reconcile or write, so `resume` starts none (its report's elapsed
 * time stays the batch's own). A supervisor killed between journalling its exit and writing SUMMARY.json is not
 * drained for this purpose: the supervisor that resume starts finds no work and writes the summary.
 */
export async function alreadyDrained(store: EvidenceStore, unfinished: number): Promise<boolean> {
  if (unfinished > 0) return false;
  const journal = await store.readJournal();
  return foldJournal(journal).exitedAs === 'drained' && (await store.exists(SUMMARY_FILE));
}
