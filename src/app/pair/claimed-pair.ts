/**
 * One claimed pair (docs/claimed-pair-design.md): admit → receipt → claim → execute → finish. `pair run`, serve's
 * pairs and the batch supervisor all run it; what differs between them is the plan (data) and the hooks (effects).
 * A slot is given back by terminal reconciliation, or by the one rule in `claim.ts` when no container was created.
 */
import { wallDeadlineMs } from '../../core/wall-budget.js';
import { mountGuardFor } from './execute-pair.js';
import type { MountGuard } from './mount-guard.js';
import { admitClaimed } from './admit.js';
import { publishClaim, releaseUnstarted } from './claim.js';
import type {
  ClaimedPairDeps,
  ClaimedPairOutcome,
  PairHooks,
  PairPlan,
  RunningHandle,
} from './claimed-pair-types.js';
import { executeClaimed, limitsOf } from './execute.js';
import { finishClaimed } from './finish.js';
import { claimedReceipt } from './receipt.js';

export async function runClaimedPair(
  deps: ClaimedPairDeps,
  plan: PairPlan,
  hooks: PairHooks,
): Promise<ClaimedPairOutcome> {
  const admitted = await admitClaimed(deps.registry, plan);
  if (admitted.kind === 'refused') return admitted;
  const { reservationId, job } = admitted;
  hooks.failpoint?.('after_reserve');
  const now = deps.execute.clock.now();
  const claim = { receipt: await claimedReceipt(deps, plan, reservationId, now) };
  const limits = await limitsOf(plan);
  // The launch's mount rules resolve (reads only) while the claim is written (issue 26); a pair's own output
  // directory is one of them, so `pair run` resolves them once it exists.
  const guardOf = (): Promise<MountGuard> => {
    const guard = mountGuardFor(deps.execute, { store: deps.store, mountRules: plan.mountRules });
    guard.catch(() => undefined); // awaited before the create (not an unhandled rejection meanwhile)
    return guard;
  };
  const early = plan.createsRoot ? null : guardOf();
  const failed = await publishClaim(deps, plan, hooks, claim.receipt);
  if (failed !== null) return failed;
  hooks.failpoint?.('after_claim');
  hooks.onClaimed?.(claim.receipt);
  const deadlineMs = wallDeadlineMs(now.getTime(), plan.timeoutSeconds);
  const handle = await runningHandle(plan, hooks, claim.receipt, deadlineMs);
  hooks.failpoint?.('before_create');
  const run = { job, handle, deadlineMs, limits, reservationId, claim, mountGuard: early ?? guardOf() };
  const { result, released } = await executeClaimed(deps, plan, hooks, run).catch(async (err: unknown) => {
    // Nothing ran until a container exists: the release rule decides whether the slot goes back now.
    await releaseUnstarted(deps, plan, claim.receipt, 'published');
    throw err;
  });
  // The staging points' umount runs beside the result's writing and the reconciliation; the pair is done after both.
  try {
    const finish = await finishClaimed(deps, plan, hooks, claim.receipt, result);
    return { kind: 'ran', receipt: claim.receipt, result, finish };
  } finally {
    await released;
  }
}

/** The `claimed` journal record (claimed_at and deadline: what status shows of a running pair), then the handle. */
async function runningHandle(
  plan: PairPlan,
  hooks: PairHooks,
  receipt: { readonly claimed_at: string; readonly reservation_id: string | null },
  deadlineMs: number,
): Promise<RunningHandle> {
  const deadline = new Date(deadlineMs).toISOString();
  await hooks.journal?.('claimed', {
    job_id: plan.job.job_id,
    claim_id: plan.claimId,
    reservation_id: receipt.reservation_id ?? '',
    claimed_at: receipt.claimed_at,
    deadline,
  });
  const handle: RunningHandle = {
    jobId: plan.job.job_id,
    containerId: null,
    startedAt: receipt.claimed_at,
    deadline,
    terminate: new AbortController(),
    killNow: new AbortController(),
  };
  hooks.onRunning?.(handle);
  return handle;
}
