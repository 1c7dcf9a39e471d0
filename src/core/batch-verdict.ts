import type { Counts } from './batch-state.js';
import type { BatchState } from './batch-state-name.js';

/** Pairs that finished with any classification but `completed`. */
export function failedPairs(counts: Counts): number {
  return counts.infrastructure_failure + counts.fatal + counts.provider_stop + counts.harness_failure;
}

/**
 * `e1-batch status --exit-status`: a batch that is paused, or drained with at least one failed pair, has failed
 * (exit 4); a running, stopping or stopped batch, or one drained with every pair completed, has not.
 */
export function batchFailed(status: { readonly state: BatchState; readonly counts: Counts }): boolean {
  return status.state === 'paused' || (status.state === 'drained' && failedPairs(status.counts) > 0);
}
