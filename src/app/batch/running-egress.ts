import { join } from 'node:path';
import { EGRESS_FILE } from '../../core/evidence-names.js';
import {
  EGRESS_LIVE_READ_BYTES,
  runningEgressOf,
  withRunning,
  type EgressTail,
} from '../../core/egress/egress-live.js';
import type { EvidenceStore } from '../evidence/evidence-store.js';
import { jobRel } from './layout.js';
import type { BatchStatus } from './status-shapes.js';

/**
 * The status with its running pairs' egress attempts so far (docs/spec.md §5.6): the tail of each running pair's
 * `egress.jsonl` (at most EGRESS_LIVE_READ_BYTES, read from an offset), only the running pairs' (at most the batch's
 * workers), all at once. A missing or unreadable file counts as none.
 */
export async function withRunningEgress(store: EvidenceStore, status: BatchStatus): Promise<BatchStatus> {
  if (status.running.length === 0) return status;
  const tails = await Promise.all(
    status.running.map(async (r): Promise<EgressTail | null> => {
      // One byte past the bound: whether the file was longer (its first line then cut) is seen without a stat.
      const bytes = await store.readTail(join(jobRel(r.job_id), EGRESS_FILE), EGRESS_LIVE_READ_BYTES + 1);
      if (bytes === null) return null;
      const cut = bytes.length > EGRESS_LIVE_READ_BYTES;
      return { job_id: r.job_id, bytes, cut };
    }),
  );
  const egress = withRunning(status.egress, runningEgressOf(tails.filter((t) => t !== null)));
  return egress === undefined ? status : { ...status, egress };
}
