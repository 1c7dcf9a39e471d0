// One recovery of a claimed pair whose owner died (docs/claimed-pair-design.md): reattach to its container and
// finish it, or (reattach false) stop and remove every container of its claim and finish it as `lost_worker`.
// Both end in finish.ts: result.json, then terminal reconciliation.
import type { CleanupRecord } from '../../core/cleanup-record.js';
import type { Receipt } from '../../core/receipt.js';
import type { ResultRecord } from '../../core/result.js';
import { wallDeadlineFromClaim } from '../../core/wall-budget.js';
import { lostWorkerResult } from './build-result.js';
import { removeAndVerify } from './remove-and-verify.js';
import type { ExecutePairDeps } from './execute-pair-types.js';
import type {
  ClaimedPairDeps,
  FinishOutcome,
  PairHooks,
  PairPlan,
  RunningHandle,
} from './claimed-pair-types.js';
import { limitsOf, reattachClaimed } from './execute.js';
import { finishClaimed } from './finish.js';

/** What a lost pair's result needs: where its evidence lies, how long a stop may take, what to mask. */
export interface LostPairPlan extends Pick<
  PairPlan,
  'jobRel' | 'stopBudgetSec' | 'allowedHttpStatuses' | 'onResultUnwritten'
> {
  /** The values to mask, given the environment a container of the claim holds (null: none could be read). */
  readonly secretsOf: (environment: Readonly<Record<string, string>> | null) => readonly string[];
  /** `evidence_write_failed`: the pair had ended and only its result.json could not be written. */
  readonly fault?: 'evidence_write_failed';
}

export type Recovery =
  /** The container lives, the host did not reboot, the environment resolves: run it to its end (a batch's resume). */
  | {
      readonly reattach: true;
      readonly containerId: string;
      readonly plan: PairPlan;
      /** The whole lifecycle's ports (a lost pair needs only `RecoveryDeps`'). */
      readonly execute: ExecutePairDeps;
    }
  /** Nobody would watch it (`pair recover`), or it is gone: these containers of the claim removed, `lost_worker`. */
  | { readonly reattach: false; readonly containers: readonly string[] };

export interface Recovered {
  readonly result: ResultRecord;
  readonly finish: FinishOutcome;
  readonly cleanup: CleanupRecord;
}

/** The ports a recovery needs: the store, the registry, and of the lifecycle's, those a lost pair's result reads. */
export interface RecoveryDeps extends Omit<ClaimedPairDeps, 'execute'> {
  readonly execute: Pick<ExecutePairDeps, 'runtime' | 'clock' | 'logger' | 'fs' | 'outcomes'>;
}

export async function recoverClaimedPair(
  deps: RecoveryDeps,
  receipt: Receipt,
  plan: LostPairPlan,
  hooks: PairHooks,
  how: Recovery,
): Promise<Recovered> {
  if (how.reattach) {
    const result = await reattach(
      { ...deps, execute: how.execute },
      receipt,
      how.plan,
      hooks,
      how.containerId,
    );
    return {
      result,
      finish: await finishClaimed(deps, plan, hooks, receipt, result),
      cleanup: result.cleanup,
    };
  }
  const { cleanup, secrets } = await removeClaimContainers(deps, plan, how.containers);
  // The verdict is the pair's private copy (the host outcome_path is only written once a run finished).
  const result = await lostWorkerResult(deps.execute, {
    store: deps.store,
    jobRel: plan.jobRel,
    receipt,
    containerId: how.containers[0] ?? null,
    cleanup,
    secrets,
    allowedHttpStatuses: plan.allowedHttpStatuses,
    ...(plan.fault !== undefined ? { fault: plan.fault } : {}),
  });
  return { result, finish: await finishClaimed(deps, plan, hooks, receipt, result), cleanup };
}

async function reattach(
  deps: ClaimedPairDeps,
  receipt: Receipt,
  plan: PairPlan,
  hooks: PairHooks,
  containerId: string,
): Promise<ResultRecord> {
  const deadlineMs = wallDeadlineFromClaim(receipt.claimed_at, plan.timeoutSeconds);
  const handle: RunningHandle = {
    jobId: plan.job.job_id,
    containerId,
    startedAt: receipt.claimed_at,
    deadline: new Date(deadlineMs).toISOString(),
    terminate: new AbortController(),
    killNow: new AbortController(),
  };
  hooks.onRunning?.(handle);
  return reattachClaimed(deps, plan, {
    job: plan.job,
    handle,
    deadlineMs,
    limits: await limitsOf(plan),
    containerId,
    claimedAtMs: Date.parse(receipt.claimed_at),
  });
}

/** Each container stopped and removed with verification, its variables read first (to mask them). */
async function removeClaimContainers(
  deps: RecoveryDeps,
  plan: LostPairPlan,
  containers: readonly string[],
): Promise<{ readonly cleanup: CleanupRecord; readonly secrets: string[] }> {
  const { runtime, logger, clock } = deps.execute;
  let cleanup: CleanupRecord = { removed: false, verified_absent: true, attempts: 0 };
  const secrets = new Set<string>(plan.secretsOf(null));
  for (const id of containers) {
    for (const value of plan.secretsOf(await runtime.environmentOf(id).catch(() => null))) secrets.add(value);
    const one = await removeAndVerify({ runtime, logger, clock }, id, plan.stopBudgetSec);
    cleanup = {
      removed: cleanup.removed || one.removed,
      verified_absent: cleanup.verified_absent && one.verified_absent,
      attempts: cleanup.attempts + one.attempts,
    };
  }
  return { cleanup, secrets: [...secrets] };
}
