import { createHash } from 'node:crypto';
import { stat } from 'node:fs/promises';
import { readBootId } from '../../adapters/host-identity.js';
import { readAndMaskOutcome, readOutcomeFile } from '../../adapters/outcome-reader.js';
import { classify } from '../../core/classify.js';
import { referencedName, type Job } from '../../core/manifest/index.js';
import { wallDeadlineFromClaim } from '../../core/wall-budget.js';
import { checkOutcome } from '../../core/outcome.js';
import type { Receipt } from '../../core/receipt.js';
import { RESULT_SCHEMA, type ResultRecord } from '../../core/result.js';
import { outcomeForResult } from '../execute-pair.js';
import { removeAndVerify } from '../pair-lifecycle.js';
import type { ResolvedJobEnvironment } from './batch-context.js';
import { executeInBatch, type BatchPairContext, type BatchPairDeps, type RunningHandle } from './batch-pair.js';
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
  const rebooted = receipt.host_boot_id !== null && receipt.host_boot_id !== (await readBootId());
  const deadlineMs = wallDeadlineFromClaim(receipt.claimed_at, job.timeout_seconds);

  if (state !== null && containerId !== null && !rebooted && state.status !== 'created' && env !== undefined) {
    await deps.journal('recovered', { job_id: job.job_id, action: 'reattach', container_id: containerId, status: state.status });
    const handle: RunningHandle = {
      jobId: job.job_id,
      containerId,
      startedAt: receipt.claimed_at,
      deadline: new Date(deadlineMs).toISOString(),
      terminate: new AbortController(),
    };
    onRunning(handle);
    const secrets = await secretsFor(runtime, containerId, job, env.secrets);
    const result = await executeInBatch(deps, ctx, job, { claimId: receipt.claim_id, values: env.values, secrets, handle, deadlineMs }, { reattach: { containerId, claimedAtMs: Date.parse(receipt.claimed_at) } });
    return finishPair(deps, receipt, result);
  }

  await deps.journal('recovered', { job_id: job.job_id, action: 'lost_worker', container_id: containerId, rebooted });
  // Read before the container is removed.
  const secrets = await secretsFor(runtime, containerId !== null && state !== null ? containerId : null, job, env?.secrets ?? []);
  const cleanup =
    containerId !== null && state !== null
      ? await removeAndVerify({ runtime, logger: deps.execute.logger }, containerId, ctx.manifest.stop_budget_seconds)
      : { removed: false, verified_absent: true, attempts: 0 };
  return finishPair(deps, receipt, await lostWorkerResult(deps, ctx, job, receipt, containerId, cleanup, secrets));
}

/**
 * The values to mask: the resuming shell's, plus those the container really holds for the job's `${NAME}`
 * variables (the shell may export rotated or placeholder ones, or none).
 */
async function secretsFor(runtime: BatchPairDeps['execute']['runtime'], containerId: string | null, job: Job, shellSecrets: readonly string[]): Promise<string[]> {
  const inContainer = containerId === null ? {} : ((await runtime.environmentOf(containerId).catch(() => null)) ?? {});
  const referenced = Object.entries(job.environment).filter(([, v]) => referencedName(v) !== undefined);
  return [...new Set([...shellSecrets, ...referenced.flatMap(([k]) => (inContainer[k] ? [inContainer[k]] : []))])];
}

async function lostWorkerResult(
  deps: BatchPairDeps,
  ctx: BatchPairContext,
  job: Job,
  receipt: Receipt,
  containerId: string | null,
  cleanup: ResultRecord['cleanup'],
  secrets: readonly string[],
): Promise<ResultRecord> {
  // Receipts from before the private folder name only the host outcome_path: the driver's own file, never masked.
  const { read, kept } =
    receipt.private_outcome === undefined
      ? await readOutcomeFile(job.outcome_path).then((r) => ({ read: r, kept: r.state === 'present' ? r.bytes : null, masked: true }))
      : await readAndMaskOutcome(deps.store.resolve(`${jobRel(job.job_id)}/${receipt.private_outcome}`), secrets);
  const check = checkOutcome(read);
  const outcome = outcomeForResult(check, secrets);
  const classified = classify({
    jobId: job.job_id,
    outcome: check,
    timedOut: false,
    terminated: false,
    engineFault: null,
    harnessFaults: cleanup.verified_absent ? ['lost_worker'] : ['lost_worker', 'cleanup_unverified'],
    allowedHttpStatuses: ctx.manifest.provider?.allowed_http_statuses ?? [],
  });
  const logBytes = async (name: string): Promise<number> => {
    try {
      return (await stat(deps.store.resolve(`${jobRel(job.job_id)}/${name}`))).size;
    } catch {
      return 0;
    }
  };
  return {
    schema: RESULT_SCHEMA,
    job_id: job.job_id,
    batch_id: receipt.batch_id,
    claim_id: receipt.claim_id,
    classification: classified.classification,
    reasons: classified.reasons,
    outcome: outcome.value,
    outcome_redactions: outcome.redactions,
    outcome_sha256: kept !== null ? createHash('sha256').update(kept).digest('hex') : null,
    container: { id: containerId, exit_code: null, timed_out: false, oom_killed: false },
    logs: { stdout: { bytes: await logBytes('stdout.log'), closed: false }, stderr: { bytes: await logBytes('stderr.log'), closed: false } },
    sessions: { files: 0, bytes: 0, refusals: [] },
    provider_failure: null,
    provider_failure_error_kind: null,
    cleanup,
    engine_error: null,
    started_at: receipt.claimed_at,
    finished_at: deps.execute.clock.now().toISOString(),
  };
}
