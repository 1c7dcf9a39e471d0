import type { EvidenceStore } from '../evidence/evidence-store.js';
import type { JournalAppend } from '../../core/journal-events.js';
import { pausesFor, type PauseReason } from '../../core/pause-rules.js';
import type { Classified } from '../../core/classify.js';
import type { Receipt } from '../../core/receipt.js';
import { causeOf, type PauseCause } from '../../core/pause-cause.js';
import type { ResultRecord } from '../../core/result.js';
import { failpoint } from '../ports/failpoints.js';
import type { CapacityRegistry } from '../ports/capacity-registry.js';
import type { ContainerRuntime } from '../ports/container-runtime.js';
import type { Clock } from '../ports/clock.js';
import { removeAndVerify } from '../pair/remove-and-verify.js';
import type { Logger } from '../ports/logger.js';
import type { OutcomeReader } from '../ports/outcome-reader.js';
import type { ReconcileReport } from '../pair/reconcile-pair.js';
import { jobRel } from './layout.js';
import { finishFactsOfResult, whyOfResult } from './status.js';
import { finishClaimed, reconcileClaimed } from '../pair/finish.js';
import type { FinishOutcome } from '../pair/claimed-pair-types.js';

export interface FinishDeps {
  readonly store: EvidenceStore;
  readonly registry: CapacityRegistry;
  readonly execute: { readonly runtime: ContainerRuntime; readonly outcomes: Pick<OutcomeReader, 'sha256'> };
  readonly journal: JournalAppend;
}

export interface FinishReport {
  readonly jobId: string;
  readonly result: ResultRecord;
  /** Why the batch must pause after this pair (empty: continue). */
  readonly pauseReasons: PauseReason[];
  readonly released: boolean;
  /** Why, where an error made the batch pause (issue 27). */
  readonly cause?: PauseCause;
}

/**
 * After the container is gone: write result.json (with the storage-fault rule: read back, one retry), then
 * release the reservation only through terminal reconciliation (src/app/pair/finish.ts). Any failure keeps the
 * reservation and all evidence and pauses the batch (harness).
 */
export async function finishPair(
  deps: FinishDeps,
  receipt: Receipt,
  result: ResultRecord,
): Promise<FinishReport> {
  const hooks = {
    journal: deps.journal,
    failpoint,
    onResultWritten: (r: ResultRecord) => journalFinished(deps, r),
  };
  const plan = { jobRel: jobRel(receipt.job_id), onResultUnwritten: 'pause' } as const;
  return finishReportOf(receipt, result, await finishClaimed(deps, plan, hooks, receipt, result));
}

/** The claimed pair's end as the batch reads it: why it must pause (none: continue), and whether the slot is free. */
export function finishReportOf(receipt: Receipt, result: ResultRecord, finish: FinishOutcome): FinishReport {
  const classified = { classification: result.classification, reasons: [...result.reasons] };
  if (finish.kind === 'reconciled') return reportOfReconcile(receipt, result, finish.report, classified);
  // The evidence disk refused it (ENOSPC, EIO…): resume rebuilds the result as `evidence_write_failed` (issue 27).
  const cause = causeOf(finish.error);
  return {
    jobId: receipt.job_id,
    result,
    pauseReasons: pausesFor({ kind: 'result_unwritten', result: classified }),
    released: false,
    cause: { code: cause.code, message: `cannot write ${finish.path}: ${cause.message}` },
  };
}

/** `pair_finished`: the times and the GPU peak (what status counts of a finished pair, without its result file). */
export async function journalFinished(
  deps: Pick<FinishDeps, 'store' | 'journal'>,
  result: ResultRecord,
): Promise<void> {
  const facts = finishFactsOfResult(result);
  const why = await whyOfResult(deps.store, result.job_id, result);
  await deps.journal('pair_finished', {
    job_id: result.job_id,
    claim_id: result.claim_id,
    classification: result.classification,
    reasons: result.reasons,
    ...(result.outcome_problems !== undefined && result.outcome_problems.length > 0
      ? { outcome_problems: result.outcome_problems }
      : {}),
    started_at: facts.started_at,
    finished_at: facts.finished_at,
    gpu_peak_mib: facts.gpu_peak_mib,
    ...(why.length > 0 ? { why } : {}),
    ...(facts.egress !== undefined ? { egress: facts.egress } : {}),
  });
}

/**
 * Release a finished pair's reservation through reconciliation. Also used on resume for a pair whose result
 * was written but whose slot was not yet released when the previous supervisor died (no `finished`: its own
 * pauses are not asked again). The pauses are the pause policy's (`pausesFor`).
 */
export async function reconcileFinished(
  deps: FinishDeps,
  receipt: Receipt,
  result: ResultRecord,
  finished?: Classified,
): Promise<FinishReport> {
  const hooks = { journal: deps.journal, failpoint };
  const report = await reconcileClaimed(deps, { jobRel: jobRel(receipt.job_id) }, hooks, receipt);
  return reportOfReconcile(receipt, result, report, finished);
}

/** Released or not after reconciliation, and the pause policy's reasons (`pausesFor`). */
function reportOfReconcile(
  receipt: Receipt,
  result: ResultRecord,
  report: ReconcileReport,
  finished: Classified | undefined,
): FinishReport {
  const jobId = receipt.job_id;
  const released = report.kind === 'committed' || report.kind === 'already_committed';
  const registryUnavailable = !released && report.reason === 'registry_unavailable';
  const pauseReasons: PauseReason[] = pausesFor({
    kind: 'reconciled',
    ...(finished !== undefined ? { result: finished } : {}),
    released,
    registryUnavailable,
    nodeLost: result.reasons.includes('node_lost'),
  });
  // A registry that timed out or could not be reached: the batch pauses with the registry's words (issue 27).
  if (registryUnavailable)
    return {
      jobId,
      result,
      pauseReasons,
      released,
      cause: { code: 'E_REGISTRY_UNAVAILABLE', message: report.detail },
    };
  return {
    jobId,
    result,
    pauseReasons,
    released,
    ...(released ? {} : { cause: { code: report.reason ?? report.kind, message: report.detail } }),
  };
}

/**
 * Resume, for a finished pair whose removal was never verified (e.g. `engine_unreachable`: the engine was away at
 * its end): remove its container now (by the ids on record and its claim label) and insist on the engine's 404, so
 * reconciliation can prove it gone and release the slot. result.json is left as written: it records what happened
 * then. A failure here changes nothing: reconciliation holds the slot as before.
 */
export async function removeUnverifiedContainer(
  deps: {
    readonly execute: { readonly runtime: ContainerRuntime; readonly logger: Logger; readonly clock: Clock };
    readonly journal: FinishDeps['journal'];
  },
  receipt: Receipt,
  result: ResultRecord,
  stopBudgetSec: number,
): Promise<void> {
  if (result.cleanup.verified_absent) return;
  const { runtime, logger } = deps.execute;
  const ids = new Set([receipt.container_id, result.container.id].filter((id): id is string => id !== null));
  try {
    for (const c of await runtime.listByLabel({ 'roboguide.claim': receipt.claim_id })) ids.add(c.id);
  } catch {
    // the engine cannot be asked: reconciliation will hold the slot
  }
  const verified: boolean[] = [];
  for (const id of ids)
    verified.push(
      (await removeAndVerify({ runtime, logger, clock: deps.execute.clock }, id, stopBudgetSec))
        .verified_absent,
    );
  await deps.journal('cleanup_retried', {
    job_id: receipt.job_id,
    containers: ids.size,
    verified_absent: verified.every(Boolean),
  });
}
