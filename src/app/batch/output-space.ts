import type { EvidenceStore } from '../evidence/evidence-store.js';
import { batchOutputNeedBytes, outputSpaceWarning } from '../../core/output-budget.js';
import { loadBatch } from './batch-context.js';

/**
 * After `start` froze the manifest: a warning when the output file system has less free space than the batch's
 * caps could need (each job's two logs at `log_limit_bytes`, its sessions at the extraction limit), else null.
 * Advisory only: a full disk mid-pair pauses the batch fail-closed anyway.
 */
export async function batchSpaceWarning(
  store: EvidenceStore,
  deps: {
    readonly freeDiskBytes: (path: string) => Promise<{ path: string; freeBytes: number }>;
    readonly sessionsMaxBytes: number;
  },
): Promise<string | null> {
  const { manifest } = await loadBatch(store);
  const need = batchOutputNeedBytes(manifest.jobs, deps.sessionsMaxBytes);
  return outputSpaceWarning(need, await deps.freeDiskBytes(store.root));
}
