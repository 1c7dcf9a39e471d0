import { referencedName, type ResolvedJobEnvironment } from '../../core/manifest/environment.js';
import type { Job } from '../../core/manifest/schema.js';
import { classOfReason } from '../../core/classify.js';
import { knownEntry } from '../../core/journal-events.js';
import type { Receipt } from '../../core/receipt.js';
import type { ContainerState } from '../ports/container-runtime.js';
import { recoverClaimedPair, type LostPairPlan, type Recovery } from '../pair/recover.js';
import type { RunningHandle } from '../pair/claimed-pair-types.js';
import { batchHooks, batchPlan, type BatchPairContext, type BatchPairDeps } from './batch-pair.js';
import { finishReportOf, type FinishReport } from './finish-pair.js';
import { jobRel } from './layout.js';

/**
 * A claimed pair without a result, found by a new supervisor (SPEC §5 resume). Never launches it again:
 * a container still there (running or exited) is reattached and finished; one that is gone, never started,
 * or from a previous boot makes the pair a harness failure `lost_worker` (src/app/pair/recover.ts).
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
  const live = containerId !== null && state !== null ? containerId : null;
  const unwritten = await resultWriteFailed(deps, job.job_id);
  const shellSecrets = env?.secrets ?? [];
  const lost: LostPairPlan = {
    jobRel: jobRel(job.job_id),
    stopBudgetSec: ctx.manifest.stop_budget_seconds,
    allowedHttpStatuses: ctx.manifest.provider?.allowed_http_statuses ?? [],
    onResultUnwritten: 'pause',
    secretsOf: (inContainer) => secretsFor(inContainer, job, shellSecrets),
    ...(unwritten ? { fault: 'evidence_write_failed' as const } : {}),
  };
  const how = await recoveryOf(deps, ctx, job, receipt, env, { live, state, rebooted });
  await deps.journal(
    'recovered',
    how.reattach
      ? { job_id: job.job_id, action: 'reattach', container_id: how.containerId, status: state?.status ?? '' }
      : { job_id: job.job_id, action: 'lost_worker', container_id: containerId, rebooted },
  );
  const recovered = await recoverClaimedPair(deps, receipt, lost, batchHooks(deps, onRunning), how);
  const report = finishReportOf(receipt, recovered.result, recovered.finish);
  // The write failure already paused the batch, and the operator resumed once there was room: the rebuilt result
  // does not pause it a second time (before issue 27, two resumes were needed). Any other harness fault still does.
  if (how.reattach || !unwritten || !report.released) return report;
  const otherHarness = recovered.result.reasons.some(
    (r) => r !== 'evidence_write_failed' && classOfReason(r) === 'harness_failure',
  );
  return otherHarness
    ? report
    : { ...report, pauseReasons: report.pauseReasons.filter((r) => r !== 'harness') };
}

/** Reattach when the container lives (not merely created), the host did not reboot and the environment resolves. */
async function recoveryOf(
  deps: BatchPairDeps,
  ctx: BatchPairContext,
  job: Job,
  receipt: Receipt,
  env: ResolvedJobEnvironment | undefined,
  found: { readonly live: string | null; readonly state: ContainerState | null; readonly rebooted: boolean },
): Promise<Recovery> {
  const { live, state, rebooted } = found;
  if (live === null || state === null || rebooted || state.status === 'created' || env === undefined)
    return { reattach: false, containers: live !== null ? [live] : [] };
  const inContainer = await deps.execute.runtime.environmentOf(live).catch(() => null);
  const secrets = secretsFor(inContainer, job, env.secrets);
  const plan = batchPlan(deps, ctx, job, { values: env.values, secrets }, receipt.claim_id, null);
  return { reattach: true, containerId: live, plan, execute: deps.execute };
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
function secretsFor(
  inContainer: Readonly<Record<string, string>> | null,
  job: Job,
  shellSecrets: readonly string[],
): string[] {
  const held = inContainer ?? {};
  const referenced = Object.entries(job.environment).filter(([, v]) => referencedName(v) !== undefined);
  return [...new Set([...shellSecrets, ...referenced.flatMap(([k]) => (held[k] ? [held[k]] : []))])];
}
