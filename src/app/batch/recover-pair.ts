import { referencedName, type ResolvedJobEnvironment } from '../../core/manifest/environment.js';
import type { Job } from '../../core/manifest/schema.js';
import { classOfReason } from '../../core/classify.js';
import { knownEntry } from '../../core/journal-events.js';
import { wallDeadlineFromClaim } from '../../core/wall-budget.js';
import type { Receipt } from '../../core/receipt.js';
import { lostWorkerResult } from '../build-result.js';
import { removeAndVerify } from '../remove-and-verify.js';
import {
  executeInBatch,
  type BatchPairContext,
  type BatchPairDeps,
  type RunningHandle,
} from './batch-pair.js';
import { finishPair, type FinishReport } from './finish-pair.js';
import { jobRel } from './layout.js';

/**
 * A claimed pair without a result, found by a new supervisor (SPEC §5 resume). Never launches it again:
 * a container still there (running or exited) is reattached and finished; one that is gone, never started,
 * or from a previous boot makes the pair a harness failure `lost_worker`.
 */
export async function recoverPair(
  deps: BatchPairDeps,
  ctx: BatchPairContext,
  job: Job,
  receipt: Receipt,
  env: ResolvedJobEnvironment | undefined,
  onRunning: (handle: RunningHandle) => void,
): Promise<FinishReport> {
  const { runtime } = deps.execute;
  const found = await runtime.listByLabel({ 'roboguide.claim': receipt.claim_id });
  const containerId = receipt.container_id ?? found[0]?.id ?? null;
  const state = containerId === null ? null : await runtime.inspect(containerId);
  const rebooted =
    receipt.host_boot_id !== null && receipt.host_boot_id !== (await deps.execute.host.bootId());
  const deadlineMs = wallDeadlineFromClaim(receipt.claimed_at, job.timeout_seconds);

  if (
    state !== null &&
    containerId !== null &&
    !rebooted &&
    state.status !== 'created' &&
    env !== undefined
  ) {
    await deps.journal('recovered', {
      job_id: job.job_id,
      action: 'reattach',
      container_id: containerId,
      status: state.status,
    });
    const handle: RunningHandle = {
      jobId: job.job_id,
      containerId,
      startedAt: receipt.claimed_at,
      deadline: new Date(deadlineMs).toISOString(),
      terminate: new AbortController(),
      killNow: new AbortController(),
    };
    onRunning(handle);
    const secrets = await secretsFor(runtime, containerId, job, env.secrets);
    const result = await executeInBatch(
      deps,
      ctx,
      job,
      { claimId: receipt.claim_id, values: env.values, secrets, handle, deadlineMs },
      { reattach: { containerId, claimedAtMs: Date.parse(receipt.claimed_at) } },
    );
    return finishPair(deps, receipt, result);
  }

  const unwritten = await resultWriteFailed(deps, job.job_id);
  await deps.journal('recovered', {
    job_id: job.job_id,
    action: 'lost_worker',
    container_id: containerId,
    rebooted,
  });
  // Read before the container is removed.
  const secrets = await secretsFor(
    runtime,
    containerId !== null && state !== null ? containerId : null,
    job,
    env?.secrets ?? [],
  );
  const cleanup =
    containerId !== null && state !== null
      ? await removeAndVerify(
          { runtime, logger: deps.execute.logger, clock: deps.execute.clock },
          containerId,
          ctx.manifest.stop_budget_seconds,
        )
      : { removed: false, verified_absent: true, attempts: 0 };
  const result = await lostWorkerResult(deps.execute, {
    store: deps.store,
    jobRel: jobRel(job.job_id),
    receipt,
    containerId,
    cleanup,
    secrets,
    allowedHttpStatuses: ctx.manifest.provider?.allowed_http_statuses ?? [],
    ...(unwritten ? { fault: 'evidence_write_failed' as const } : {}),
  });
  const report = await finishPair(deps, receipt, result);
  // The write failure already paused the batch, and the operator resumed once there was room: the rebuilt result
  // does not pause it a second time (before issue 27, two resumes were needed). Any other harness fault still does.
  if (!unwritten || !report.released) return report;
  const otherHarness = result.reasons.some(
    (r) => r !== 'evidence_write_failed' && classOfReason(r) === 'harness_failure',
  );
  return otherHarness
    ? report
    : { ...report, pauseReasons: report.pauseReasons.filter((r) => r !== 'harness') };
}

/** The previous supervisor journalled that this pair's result.json could not be written (its pair had ended). */
async function resultWriteFailed(deps: BatchPairDeps, jobId: string): Promise<boolean> {
  const records = await deps.store.readJournal().catch(() => []);
  return records.some((r) => {
    const e = knownEntry(r);
    return e?.type === 'harness_fault' && e.job_id === jobId && e.fault === 'result_write_failed';
  });
}

/**
 * The values to mask: the resuming shell's, plus those the container really holds for the job's `${NAME}`
 * variables (the shell may export rotated or placeholder ones, or none).
 */
async function secretsFor(
  runtime: BatchPairDeps['execute']['runtime'],
  containerId: string | null,
  job: Job,
  shellSecrets: readonly string[],
): Promise<string[]> {
  const inContainer =
    containerId === null ? {} : ((await runtime.environmentOf(containerId).catch(() => null)) ?? {});
  const referenced = Object.entries(job.environment).filter(([, v]) => referencedName(v) !== undefined);
  return [
    ...new Set([...shellSecrets, ...referenced.flatMap(([k]) => (inContainer[k] ? [inContainer[k]] : []))]),
  ];
}
