// The claimed pair's launch: `executePair` with the plan's job, limits and evidence, and `onCreated` built once.
import { RECEIPT_FILE } from '../../core/evidence-names.js';
import type { PairLimits } from '../../core/pair-limits.js';
import type { Receipt } from '../../core/receipt.js';
import type { ResultRecord } from '../../core/result.js';
import { executePair } from './execute-pair.js';
import type { ExecutePairDeps, ExecutePairInput, ExecutedPair, PairJob } from './execute-pair-types.js';
import type { MountGuard } from './mount-guard.js';
import type { ContainerRuntime } from '../ports/container-runtime.js';
import { EngineError } from '../ports/engine-error.js';
import type { ClaimedPairDeps, PairHooks, PairPlan, RunningHandle } from './claimed-pair-types.js';
import { pairRel } from './receipt.js';

/** The pair's run as the claim left it: the job as admitted, its handle, its wall deadline and its limits. */
export interface ClaimedRun {
  readonly job: PairJob;
  readonly handle: RunningHandle;
  readonly deadlineMs: number;
  readonly limits: PairLimits;
}

/** The plan's limits (a function is asked once). */
export async function limitsOf(plan: Pick<PairPlan, 'limits'>): Promise<PairLimits> {
  return typeof plan.limits === 'function' ? plan.limits() : plan.limits;
}

/** What `executePair` is given for this pair, whether it creates the container or reattaches to it. */
function inputOf(deps: ClaimedPairDeps, plan: PairPlan, run: ClaimedRun): ExecutePairInput {
  return {
    store: deps.store,
    jobRel: plan.jobRel,
    batchId: plan.batchId,
    claimId: plan.claimId,
    job: run.job,
    environment: plan.environment.values,
    secrets: plan.environment.secrets,
    sessionsDir: plan.sessionsDir,
    stopBudgetSec: plan.stopBudgetSec,
    bindAddress: plan.bindAddress,
    allowedHttpStatuses: plan.allowedHttpStatuses,
    terminate: run.handle.terminate.signal,
    killNow: run.handle.killNow.signal,
    deadlineMs: run.deadlineMs,
    readOutcome: (path) => deps.execute.outcomes.read(path),
    mountRules: plan.mountRules,
    limits: run.limits,
  };
}

/**
 * The container created and run to its end. `onCreated` records the container on the receipt (atomically) and on
 * the reservation (`claim.receipt` follows it, also when the launch throws), then tells the journal; the crash
 * suite's points follow. The result, and the release of the pair's staging points, for the caller to await once the
 * result is written (ExecutedPair).
 */
export async function executeClaimed(
  deps: ClaimedPairDeps,
  plan: PairPlan,
  hooks: PairHooks,
  run: ClaimedRun & {
    readonly reservationId: string;
    readonly claim: { receipt: Receipt };
    readonly mountGuard: Promise<MountGuard>;
  },
): Promise<Pick<ExecutedPair, 'result' | 'released'>> {
  const { claim } = run;
  const onCreated = async (containerId: string): Promise<void> => {
    run.handle.containerId = containerId;
    claim.receipt = { ...claim.receipt, container_id: containerId };
    await deps.store.writeJsonAtomic(pairRel(plan.jobRel, RECEIPT_FILE), claim.receipt);
    await deps.registry.attachContainer(run.reservationId, containerId);
    await hooks.journal?.('container_created', { job_id: plan.job.job_id, container_id: containerId });
    hooks.failpoint?.('after_container_created');
    await hooks.pausepoint?.('after_container_created');
  };
  const { result, released } = await executePair(executeDepsOf(deps.execute, plan), {
    ...inputOf(deps, plan, run),
    mountGuard: run.mountGuard,
    onCreated,
  });
  return { result, released };
}

/** Resume: the container of an earlier supervisor, reattached and run to its end (`claimedAtMs`: its claim). */
export async function reattachClaimed(
  deps: ClaimedPairDeps,
  plan: PairPlan,
  run: ClaimedRun & { readonly containerId: string; readonly claimedAtMs: number },
): Promise<ResultRecord> {
  const { result, released } = await executePair(executeDepsOf(deps.execute, plan), {
    ...inputOf(deps, plan, run),
    reattach: { containerId: run.containerId, claimedAtMs: run.claimedAtMs },
  });
  await released;
  return result;
}

/** The plan's create refusal (an image that could not be pulled) in front of the engine; else the engine. */
function executeDepsOf(execute: ExecutePairDeps, plan: Pick<PairPlan, 'createRefusal'>): ExecutePairDeps {
  return plan.createRefusal === undefined
    ? execute
    : { ...execute, runtime: refusingCreate(execute.runtime, plan.createRefusal) };
}

/** The engine, but a create fails as `image_pull_failed` with the registry's message (nothing is created). */
function refusingCreate(runtime: ContainerRuntime, message: string): ContainerRuntime {
  return new Proxy(runtime, {
    get(target, prop, receiver) {
      if (prop === 'create')
        return () =>
          Promise.reject(
            new EngineError('image_pull_failed', `the image could not be pulled: ${message}`, {
              statusCode: null,
              engineMessage: message,
            }),
          );
      const value: unknown = Reflect.get(target, prop, receiver);
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}
