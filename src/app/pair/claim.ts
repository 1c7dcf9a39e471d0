// The exclusive receipt, and the one place a reservation is released outside terminal reconciliation: when no
// container was ever created for its claim (the rule: src/core/claim-release.ts).
import { errorKind } from '../../core/errors.js';
import { RECEIPT_FILE } from '../../core/evidence-names.js';
import { unstartedClaimDecision, type UnstartedClaimFacts } from '../../core/claim-release.js';
import { isReceipt, type Receipt } from '../../core/receipt.js';
import { EvidenceStore } from '../evidence/evidence-store.js';
import type { CapacityRegistry } from '../ports/capacity-registry.js';
import type { ContainerRuntime } from '../ports/container-runtime.js';
import type { ClaimedPairDeps, ClaimFailure, PairHooks, PairPlan } from './claimed-pair-types.js';
import { pairRel } from './receipt.js';

/**
 * The pair's folder and its exclusive receipt. Null when the claim stands; else why not (fail closed), the slot
 * given back by the release rule before the failure is reported.
 */
export async function publishClaim(
  deps: ClaimedPairDeps,
  plan: PairPlan,
  hooks: PairHooks,
  receipt: Receipt,
): Promise<ClaimFailure | null> {
  const { store } = deps;
  const rel = pairRel(plan.jobRel, RECEIPT_FILE);
  let published: 'published' | 'exists';
  try {
    if (plan.createsRoot) await EvidenceStore.createOutputDir(deps.execute.fs, store.root);
    else await store.ensureDir(plan.jobRel);
    published = await store.publishExclusive(rel, receipt);
  } catch (error) {
    await hooks.journal?.('harness_fault', {
      job_id: receipt.job_id,
      fault: 'receipt_write_failed',
      err: errorKind(error),
    });
    // If the link happened despite the error the claim stands (its owner finishes it); else nothing ran.
    const ours = await store.readJson(rel, isReceipt).catch(() => null);
    const standing = ours?.claim_id === receipt.claim_id ? 'published' : 'absent';
    await releaseUnstarted(deps, plan, receipt, standing);
    return { kind: 'claim_failed', reason: 'receipt_write_failed', error };
  }
  if (published === 'exists') {
    await releaseUnstarted(deps, plan, receipt, 'absent');
    return { kind: 'claim_failed', reason: 'already_claimed' };
  }
  return null;
}

/**
 * The pair failed before it ran (its claim, or its launch before a container): the slot is given back now when no
 * container was ever created for the claim (none on the receipt, none with its label), else kept for reconciliation.
 */
export async function releaseUnstarted(
  deps: Pick<ClaimedPairDeps, 'registry'> & { readonly execute: { readonly runtime: ContainerRuntime } },
  plan: Pick<PairPlan, 'resumeFinishesClaim'>,
  receipt: Pick<Receipt, 'reservation_id' | 'claim_id' | 'container_id'>,
  standing: UnstartedClaimFacts['receipt'],
): Promise<boolean> {
  const facts = {
    containerId: receipt.container_id,
    labelled: 0,
    receipt: standing,
    resumeFinishesClaim: plan.resumeFinishesClaim,
  };
  // Only a release is confirmed with the engine (a create may have been sent): nothing to ask when the slot is kept.
  if (unstartedClaimDecision(facts).kind === 'keep' || receipt.reservation_id === null) return false;
  const labelled =
    standing === 'absent' && receipt.container_id === null
      ? 0 // no receipt of this claim: no create was ever sent for it
      : await deps.execute.runtime
          .listByLabel({ 'roboguide.claim': receipt.claim_id })
          .then((found) => found.length)
          .catch(() => null);
  if (unstartedClaimDecision({ ...facts, labelled }).kind === 'keep') return false;
  return releaseReservation(deps.registry, receipt.reservation_id, receipt.claim_id);
}

/** Resume: a reservation whose claim never got published (no receipt: no create was ever sent for it). */
export async function releaseUnclaimed(
  registry: CapacityRegistry,
  reservation: { readonly id: string; readonly claimId: string },
): Promise<boolean> {
  const facts = { containerId: null, labelled: 0, receipt: 'absent', resumeFinishesClaim: true } as const;
  if (unstartedClaimDecision(facts).kind === 'keep') return false;
  return releaseReservation(registry, reservation.id, reservation.claimId);
}

async function releaseReservation(registry: CapacityRegistry, id: string, claimId: string): Promise<boolean> {
  const released = await registry.release(id, claimId);
  return released.kind === 'released' || released.kind === 'already_released';
}
