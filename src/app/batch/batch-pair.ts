import { JOBS_DIR } from '../../core/evidence-names.js';
import { randomUUID } from 'node:crypto';
import type { EvidenceStore } from '../evidence/evidence-store.js';
import type { JournalAppend } from '../../core/journal-events.js';
import { errorKind } from '../../core/errors.js';
import { jobEgress, jobImage, jobRuntime } from '../../core/manifest/parse.js';
import type { Job, Manifest } from '../../core/manifest/schema.js';
import { buildReceipt, type Receipt } from '../../core/receipt.js';
import type { ResultRecord } from '../../core/result.js';
import { wallDeadlineMs } from '../../core/wall-budget.js';
import { effectiveLimits, limitDefaults } from '../../core/pair-limits.js';
import { executePair, mountGuardFor } from '../execute-pair.js';
import type { ExecutePairDeps } from '../execute-pair-types.js';
import type { MountGuard } from '../mount-guard.js';
import { failpoint, pausepoint } from '../ports/failpoints.js';
import { admitOnNodes } from '../admission.js';
import { expectedGpuMib } from '../../core/admission-rule.js';
import type { CapacityRegistry } from '../ports/capacity-registry.js';
import type { ContainerRuntime } from '../ports/container-runtime.js';
import { EngineError } from '../ports/engine-error.js';
import type { BatchRecord } from './layout.js';
import { jobRel, receiptRel } from './layout.js';
import type { ResolvedJobEnvironment } from '../../core/manifest/environment.js';
import { finishPair, type FinishReport } from './finish-pair.js';

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

export interface RunningHandle {
  readonly jobId: string;
  containerId: string | null;
  readonly startedAt: string;
  readonly deadline: string;
  readonly terminate: AbortController;
  /** Aborted by a third Ctrl-C: the stop budget is cut short (SIGKILL now). */
  readonly killNow: AbortController;
  /** Swarm: the node the pair was placed on, once known. */
  node?: string;
}

/** Admission for one pair, placed where its reservation is (swarm: the registry's limits are per node). */
async function reservePair(
  deps: BatchPairDeps,
  ctx: BatchPairContext,
  job: Job,
  claimId: string,
): Promise<
  | { readonly kind: 'refused'; readonly reason: string }
  | { readonly kind: 'reserved'; readonly reservationId: string; readonly placedJob: Job }
> {
  const peaks = ctx.gpuPeaksByImage?.().get(jobImage(ctx.manifest, job)) ?? [];
  const nodes = ctx.admissionNodes ? await ctx.admissionNodes(job.placement ?? []) : null;
  const request = {
    batchId: ctx.batch.batch_id,
    jobId: job.job_id,
    claimId,
    gpuMib: expectedGpuMib(job, peaks),
    ports: job.ports,
    // Its cwd may not lie inside, or hold, another live container's writable source (it waits, as for a port).
    writableMounts: [job.cwd],
    // Its evidence (and the private outcome folder in it) is no other container's to mount, not even as equal.
    evidenceFolder: deps.store.resolve(`${JOBS_DIR}/${job.job_id}`),
  };
  const { admitted, node } = await admitOnNodes(deps.registry, request, nodes);
  if (admitted.kind === 'refused') return { kind: 'refused', reason: admitted.reason };
  const placedJob: Job =
    node === null ? job : { ...job, placement: [...(job.placement ?? []), `node.hostname==${node}`] };
  return { kind: 'reserved', reservationId: admitted.reservationId, placedJob };
}

/** The exclusive receipt. Null when the claim stands; else why it does not (fail closed). */
async function publishClaim(
  deps: BatchPairDeps,
  job: Job,
  receipt: Receipt,
  reservationId: string,
): Promise<DispatchAttempt | null> {
  let published: 'published' | 'exists';
  try {
    await deps.store.ensureDir(jobRel(job.job_id));
    published = await deps.store.publishExclusive(receiptRel(job.job_id), receipt);
  } catch (err) {
    // Fail closed. If the link happened despite the error the claim stands and resume finds it;
    // otherwise nothing ran and the reservation is released on resume (reservation without claim).
    await deps.journal('harness_fault', {
      job_id: job.job_id,
      fault: 'receipt_write_failed',
      err: errorKind(err),
    });
    return { kind: 'claim_failed', reason: 'receipt_write_failed' };
  }
  if (published === 'exists') {
    await deps.registry.release(reservationId, receipt.claim_id);
    return { kind: 'claim_failed', reason: 'already_claimed' };
  }
  return null;
}

/**
 * One pair of a batch: reserve, claim (exclusive receipt), run, then finish (result + reconciliation).
 * Reservation first: a reservation without a claim is released on resume; a claim always has a reservation.
 */
export async function dispatchPair(
  deps: BatchPairDeps,
  ctx: BatchPairContext,
  job: Job,
  env: ResolvedJobEnvironment,
  onRunning: (handle: RunningHandle) => void,
): Promise<DispatchAttempt> {
  const { store, registry, journal } = deps;
  const claimId = randomUUID();
  const reserved = await reservePair(deps, ctx, job, claimId);
  if (reserved.kind === 'refused') return reserved;
  const { reservationId, placedJob } = reserved;
  failpoint('after_reserve');

  const now = deps.execute.clock.now();
  const image = jobImage(ctx.manifest, job);
  const imageId = pinnedImageId(ctx.batch, image);
  let receipt = buildReceipt({
    batchId: ctx.batch.batch_id,
    jobId: job.job_id,
    claimId,
    claimedAt: now,
    supervisor: await deps.execute.host.current(),
    reservationId,
    image,
    ...(imageId !== undefined ? { imageId } : {}),
    outcomePath: job.outcome_path,
    sourceSha256: ctx.manifest.source_sha256,
    codeVersion: ctx.batch.code_version,
    network: job.network,
    egress: jobEgress(ctx.manifest, job),
    runtime: jobRuntime(ctx.manifest, job),
    mountMode: (await deps.execute.mountStager?.mode()) ?? 'walked',
  });
  // The launch's mount rules resolve (reads only) while the claim is written (issue 26); awaited before the create.
  const mountGuard = mountGuardFor(deps.execute, { store, mountRules: batchMountRules(ctx.batch) });
  mountGuard.catch(() => undefined);
  const refused = await publishClaim(deps, job, receipt, reservationId);
  if (refused !== null) return refused;
  failpoint('after_claim');
  const deadlineMs = wallDeadlineMs(now.getTime(), job.timeout_seconds);
  // claimed_at and deadline: what status shows of a running pair, so that it needs no receipt to show it.
  await journal('claimed', {
    job_id: job.job_id,
    claim_id: claimId,
    reservation_id: reservationId,
    claimed_at: receipt.claimed_at,
    deadline: new Date(deadlineMs).toISOString(),
  });

  const handle: RunningHandle = {
    jobId: job.job_id,
    containerId: null,
    startedAt: now.toISOString(),
    deadline: new Date(deadlineMs).toISOString(),
    terminate: new AbortController(),
    killNow: new AbortController(),
  };
  onRunning(handle);
  const result = await executeInBatch(
    deps,
    ctx,
    placedJob,
    { claimId, secrets: env.secrets, values: env.values, handle, deadlineMs, mountGuard },
    {
      onCreated: async (containerId) => {
        handle.containerId = containerId;
        receipt = { ...receipt, container_id: containerId };
        await store.writeJsonAtomic(receiptRel(job.job_id), receipt);
        await registry.attachContainer(reservationId, containerId);
        await journal('container_created', { job_id: job.job_id, container_id: containerId });
        failpoint('after_container_created');
        await pausepoint('after_container_created');
      },
    },
  );
  return { kind: 'ran', finish: await finishPair(deps, receipt, result) };
}

/** The lifecycle of one batch pair with everything the batch decides (image, budgets, ports, allowlist). */
export async function executeInBatch(
  deps: BatchPairDeps,
  ctx: BatchPairContext,
  job: Job,
  run: {
    claimId: string;
    values: Record<string, string>;
    secrets: readonly string[];
    handle: RunningHandle;
    deadlineMs: number;
    mountGuard?: Promise<MountGuard>;
  },
  how:
    | { onCreated: (containerId: string) => Promise<void> }
    | { reattach: { containerId: string; claimedAtMs: number } },
): Promise<ResultRecord> {
  const execute =
    ctx.pullFailure === undefined
      ? deps.execute
      : { ...deps.execute, runtime: refusingCreate(deps.execute.runtime, ctx.pullFailure) };
  const { result } = await executePair(execute, {
    store: deps.store,
    jobRel: jobRel(job.job_id),
    batchId: ctx.batch.batch_id,
    claimId: run.claimId,
    // The image's id as `start` pinned it: a tag rebuilt since is never followed (status and the report say so).
    job: {
      ...job,
      image: pinnedImageId(ctx.batch, jobImage(ctx.manifest, job)) ?? jobImage(ctx.manifest, job),
      runtime: jobRuntime(ctx.manifest, job),
      egress: jobEgress(ctx.manifest, job),
    },
    environment: run.values,
    secrets: run.secrets,
    sessionsDir: job.sessions_dir ?? ctx.manifest.sessions_dir,
    stopBudgetSec: ctx.manifest.stop_budget_seconds,
    bindAddress: ctx.batch.bind_address,
    allowedHttpStatuses: ctx.manifest.provider?.allowed_http_statuses ?? [],
    terminate: run.handle.terminate.signal,
    killNow: run.handle.killNow.signal,
    deadlineMs: run.deadlineMs,
    readOutcome: (path) => deps.execute.outcomes.read(path),
    mountRules: batchMountRules(ctx.batch),
    ...(run.mountGuard !== undefined ? { mountGuard: run.mountGuard } : {}),
    limits: effectiveLimits(
      job,
      ctx.batch.pair_limit_defaults ??
        limitDefaults({
          memoryTotalBytes: null,
          outputFreeBytes: null,
          maxConcurrentPairs: ctx.manifest.capacity.max_workers,
        }),
    ),
    ...how,
  });
  return result;
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

/** The batch's part of the launch-time mount rules: its registry file (not a PostgreSQL URL) and its `--mount-root` folders. */
function batchMountRules(batch: BatchRecord): { registryPath?: string; mountRoots?: readonly string[] } {
  return {
    ...(batch.registry_path.startsWith('/') ? { registryPath: batch.registry_path } : {}),
    ...(batch.mount_roots !== undefined && batch.mount_roots.length > 0
      ? { mountRoots: batch.mount_roots }
      : {}),
  };
}
