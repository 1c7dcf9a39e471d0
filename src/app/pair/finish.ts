// The claimed pair's end: result.json written verified, then terminal reconciliation (the only release of a pair
// that ran). What an unwritten result means is the plan's policy.
import { RESULT_FILE } from '../../core/evidence-names.js';
import { RoboguideError } from '../../core/errors.js';
import { errnoOf, causeOf } from '../../core/pause-cause.js';
import type { Receipt } from '../../core/receipt.js';
import type { ResultRecord } from '../../core/result.js';
import { writeJsonVerified } from '../durable-write.js';
import type { EvidenceStore } from '../evidence/evidence-store.js';
import type { CapacityRegistry } from '../ports/capacity-registry.js';
import type { ContainerRuntime } from '../ports/container-runtime.js';
import type { OutcomeReader } from '../ports/outcome-reader.js';
import { reconcilePair, type ReconcileReport } from './reconcile-pair.js';
import type { FinishOutcome, PairHooks, PairPlan } from './claimed-pair-types.js';
import { pairRel } from './receipt.js';

/** The ports the end needs (a batch's resume has them without the rest of a claimed pair's). */
export interface FinishPorts {
  readonly store: EvidenceStore;
  readonly registry: CapacityRegistry;
  readonly execute: { readonly runtime: ContainerRuntime; readonly outcomes: Pick<OutcomeReader, 'sha256'> };
}

/**
 * After the container is gone: result.json (read back, one retry), then reconciliation. An unwritten result keeps
 * the slot (fail closed): `throw` (`E_STORE`), or `pause` (journalled with its path, for resume to rebuild it).
 */
export async function finishClaimed(
  deps: FinishPorts,
  plan: Pick<PairPlan, 'jobRel' | 'onResultUnwritten'>,
  hooks: PairHooks,
  receipt: Receipt,
  result: ResultRecord,
): Promise<FinishOutcome> {
  const { store } = deps;
  hooks.failpoint?.('before_result');
  const written = await writeJsonVerified(store, pairRel(plan.jobRel, RESULT_FILE), result);
  if (written.kind === 'failed') {
    const path = store.resolve(pairRel(plan.jobRel, RESULT_FILE));
    if (plan.onResultUnwritten === 'throw')
      throw new RoboguideError(
        'E_STORE',
        `result.json could not be written in ${plan.jobRel === '.' ? store.root : store.resolve(plan.jobRel)}; the pair's evidence is kept and its capacity slot stays held`,
        {
          cause: written.error,
          context: { reservation_id: receipt.reservation_id, claim_id: receipt.claim_id },
        },
      );
    // Said with the path, so that resume rebuilds it as `evidence_write_failed` (issue 27); the disk may refuse this too.
    await hooks
      .journal?.('harness_fault', {
        job_id: receipt.job_id,
        fault: 'result_write_failed',
        path,
        err: errnoOf(written.error) ?? causeOf(written.error).code,
      })
      .catch(() => undefined);
    return { kind: 'unwritten', error: written.error, path };
  }
  hooks.failpoint?.('after_result');
  await hooks.onResultWritten?.(result);
  return { kind: 'reconciled', report: await reconcileClaimed(deps, plan, hooks, receipt) };
}

/** Terminal reconciliation of the pair's evidence (mode `execute`): the release of a slot whose pair ran. */
export async function reconcileClaimed(
  deps: FinishPorts,
  plan: Pick<PairPlan, 'jobRel'>,
  hooks: PairHooks,
  receipt: Pick<Receipt, 'job_id'>,
): Promise<ReconcileReport> {
  const report = await reconcilePair(
    {
      store: deps.store,
      registry: deps.registry,
      runtime: deps.execute.runtime,
      readOutcomeSha256: (path) => deps.execute.outcomes.sha256(path),
    },
    { jobRel: plan.jobRel, mode: 'execute' },
  );
  hooks.failpoint?.('after_reconcile');
  await hooks.journal?.('reconciled', { job_id: receipt.job_id, kind: report.kind, reason: report.reason });
  return report;
}
