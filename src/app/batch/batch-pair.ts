import { JOBS_DIR } from '../../core/evidence-names.js';
import { randomUUID } from 'node:crypto';
import type { EvidenceStore } from '../evidence/evidence-store.js';
import type { JournalAppend } from '../../core/journal-events.js';
import { jobEgress, jobImage, jobRuntime } from '../../core/manifest/parse.js';
import type { Job, Manifest } from '../../core/manifest/schema.js';
import { effectiveLimits, limitDefaults } from '../../core/pair-limits.js';
import type { ExecutePairDeps } from '../pair/execute-pair-types.js';
import { failpoint, pausepoint } from '../ports/failpoints.js';
import { expectedGpuMib } from '../../core/admission-rule.js';
import type { CapacityRegistry } from '../ports/capacity-registry.js';
import type { BatchRecord } from './layout.js';
import { jobRel } from './layout.js';
import type { ResolvedJobEnvironment } from '../../core/manifest/environment.js';
import { finishReportOf, journalFinished, type FinishReport } from './finish-pair.js';
import { runClaimedPair } from '../pair/claimed-pair.js';
import type { PairHooks, PairPlan, RunningHandle } from '../pair/claimed-pair-types.js';

export interface BatchPairDeps {
  readonly store: EvidenceStore;
  readonly registry: CapacityRegistry;
  readonly execute: ExecutePairDeps;
  readonly journal: JournalAppend;
}

export interface BatchPairContext {
  readonly batch: BatchRecord;
  readonly manifest: Manifest;
  /** The GPU peaks (MiB) the batch has measured so far, per image; admission reserves from them (default none). */
  readonly gpuPeaksByImage?: () => ReadonlyMap<string, readonly number[]>;
  /**
   * Swarm: the nodes a pair with these placement constraints may be admitted to, in the order to try. Admission
   * reserves on the first with room (its slots, GPU budget and published ports in the registry) and pins the
   * pair's service to that node. None: the registry's own node (the local executor).
   */
  readonly admissionNodes?: (constraints: readonly string[]) => Promise<readonly string[]>;
  /**
   * Issue 43: the pair's image could not be pulled (after retries; the registry's message, masked). The pair is
   * claimed and fails as infrastructure with `image_pull_failed`: its create is refused with this message.
   */
  readonly pullFailure?: string;
}

/** The id `start` pinned the image to (batch.json `images`); undefined: the batch runs it by tag. */
export function pinnedImageId(
  batch: Pick<BatchRecord, 'images' | 'image_plan'>,
  image: string,
): string | undefined {
  const planned = batch.image_plan?.images[image]?.ref;
  if (typeof planned === 'string') return planned;
  const id = batch.images?.[image];
  return typeof id === 'string' && id.startsWith('sha256:') ? id : undefined;
}

export type DispatchAttempt =
  | { readonly kind: 'refused'; readonly reason: string }
  | { readonly kind: 'claim_failed'; readonly reason: 'receipt_write_failed' | 'already_claimed' }
  | { readonly kind: 'ran'; readonly finish: FinishReport };

/** The batch's hooks: its journal, the crash suite's points, the supervisor's running set. */
export function batchHooks(deps: BatchPairDeps, onRunning?: (handle: RunningHandle) => void): PairHooks {
  return {
    journal: deps.journal,
    failpoint,
    pausepoint,
    ...(onRunning !== undefined ? { onRunning } : {}),
    onResultWritten: (result) => journalFinished(deps, result),
  };
}

/**
 * One batch pair as a plan: the batch's image (pinned id), budgets, ports, allowlist, the admission's nodes (null:
 * the registry's own); a refusal waits, an unwritten result pauses, a claim standing without a container is
 * finished by resume.
 */
export function batchPlan(
  deps: BatchPairDeps,
  ctx: BatchPairContext,
  job: Job,
  env: { readonly values: Record<string, string>; readonly secrets: readonly string[] },
  claimId: string,
  nodes: readonly string[] | null,
): PairPlan {
  const image = jobImage(ctx.manifest, job);
  const imageId = pinnedImageId(ctx.batch, image);
  const peaks = ctx.gpuPeaksByImage?.().get(image) ?? [];
  return {
    batchId: ctx.batch.batch_id,
    claimId,
    // The image's id as `start` pinned it: a tag rebuilt since is never followed (status and the report say so).
    job: {
      ...job,
      image: imageId ?? image,
      runtime: jobRuntime(ctx.manifest, job),
      egress: jobEgress(ctx.manifest, job),
    },
    admission: {
      request: {
        batchId: ctx.batch.batch_id,
        jobId: job.job_id,
        claimId,
        gpuMib: expectedGpuMib(job, peaks),
        ports: job.ports,
        // Its cwd may not lie inside, or hold, another live container's writable source (it waits, as for a port).
        writableMounts: [job.cwd],
        // Its evidence (and the private outcome folder in it) is no other container's to mount, not even as equal.
        evidenceFolder: deps.store.resolve(`${JOBS_DIR}/${job.job_id}`),
      },
      nodes,
    },
    receipt: {
      image,
      ...(imageId !== undefined ? { imageId } : {}),
      outcomePath: job.outcome_path,
      sourceSha256: ctx.manifest.source_sha256,
      codeVersion: ctx.batch.code_version,
      network: job.network,
      egress: jobEgress(ctx.manifest, job),
      runtime: jobRuntime(ctx.manifest, job),
    },
    jobRel: jobRel(job.job_id),
    createsRoot: false,
    environment: { values: env.values, secrets: env.secrets },
    sessionsDir: job.sessions_dir ?? ctx.manifest.sessions_dir,
    stopBudgetSec: ctx.manifest.stop_budget_seconds,
    timeoutSeconds: job.timeout_seconds,
    bindAddress: ctx.batch.bind_address,
    allowedHttpStatuses: ctx.manifest.provider?.allowed_http_statuses ?? [],
    mountRules: batchMountRules(ctx.batch),
    limits: effectiveLimits(
      job,
      ctx.batch.pair_limit_defaults ??
        limitDefaults({
          memoryTotalBytes: null,
          outputFreeBytes: null,
          maxConcurrentPairs: ctx.manifest.capacity.max_workers,
        }),
    ),
    ...(ctx.pullFailure !== undefined ? { createRefusal: ctx.pullFailure } : {}),
    onAdmitRefused: 'wait',
    onResultUnwritten: 'pause',
    resumeFinishesClaim: true,
  };
}

/**
 * One pair of a batch: the claimed pair (reserve, claim, run, result, reconciliation) with the batch's plan and
 * hooks. Reservation first: a claim always has a reservation; one whose claim failed is given back at once.
 */
export async function dispatchPair(
  deps: BatchPairDeps,
  ctx: BatchPairContext,
  job: Job,
  env: ResolvedJobEnvironment,
  onRunning: (handle: RunningHandle) => void,
): Promise<DispatchAttempt> {
  const nodes = ctx.admissionNodes ? await ctx.admissionNodes(job.placement ?? []) : null;
  const plan = batchPlan(deps, ctx, job, env, randomUUID(), nodes);
  const outcome = await runClaimedPair(deps, plan, batchHooks(deps, onRunning));
  if (outcome.kind === 'refused') return { kind: 'refused', reason: outcome.admitted.reason };
  if (outcome.kind === 'claim_failed') return { kind: 'claim_failed', reason: outcome.reason };
  return { kind: 'ran', finish: finishReportOf(outcome.receipt, outcome.result, outcome.finish) };
}

/** The batch's part of the launch-time mount rules: its registry file (not a PostgreSQL URL) and its `--mount-root` folders. */
function batchMountRules(batch: BatchRecord): { registryPath?: string; mountRoots?: readonly string[] } {
  return {
    ...(batch.registry_path.startsWith('/') ? { registryPath: batch.registry_path } : {}),
    ...(batch.mount_roots !== undefined && batch.mount_roots.length > 0
      ? { mountRoots: batch.mount_roots }
      : {}),
  };
}
