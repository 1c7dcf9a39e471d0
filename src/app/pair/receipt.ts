// The claimed pair's receipt, built once from the plan: the same fields for `pair run`, serve and a batch pair.
import { buildReceipt, type Receipt } from '../../core/receipt.js';
import type { ClaimedPairDeps, PairPlan } from './claimed-pair-types.js';

/** The receipt as published before the container exists (`container_id` null), claimed at `claimedAt`. */
export async function claimedReceipt(
  deps: ClaimedPairDeps,
  plan: PairPlan,
  reservationId: string,
  claimedAt: Date,
): Promise<Receipt> {
  const facts = plan.receipt;
  return buildReceipt({
    batchId: plan.batchId,
    jobId: plan.job.job_id,
    claimId: plan.claimId,
    claimedAt,
    supervisor: await deps.execute.host.current(),
    reservationId,
    image: facts.image,
    ...(facts.imageId !== undefined ? { imageId: facts.imageId } : {}),
    outcomePath: facts.outcomePath,
    sourceSha256: facts.sourceSha256,
    codeVersion: facts.codeVersion,
    network: facts.network,
    egress: facts.egress,
    runtime: facts.runtime,
    mountMode: (await deps.execute.mountStager?.mode()) ?? 'walked',
    ...(facts.registryPath !== undefined ? { registryPath: facts.registryPath } : {}),
  });
}

/** A file of the pair's folder, relative to the store ('.' is the store's root: `pair run`). */
export function pairRel(jobRel: string, file: string): string {
  return jobRel === '.' ? file : `${jobRel}/${file}`;
}
