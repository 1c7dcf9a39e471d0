import type { EvidenceStore, JournalRecord } from '../../adapters/fs/evidence-store.js';
import { runningSupervisor } from './supervisor-liveness.js';
import { countJobs, deriveState, foldJournal, STATUS_SCHEMA, type BatchState, type Counts, type PauseHistoryEntry, type RunningPair } from '../../core/batch-state.js';
import type { PauseReason } from '../../core/classify.js';
import { workersAllowed, type CapacityConfig } from '../../core/dispatch-policy.js';
import type { Manifest } from '../../core/manifest/index.js';
import { gpuObservation, outcomeProblems, type Outcome } from '../../core/outcome.js';
import type { Receipt } from '../../core/receipt.js';
import { estimateEta, type Eta } from '../../core/report/eta.js';
import type { Classification } from '../../core/result.js';
import type { ContainerRuntime } from '../ports/container-runtime.js';
import type { JobFiles } from './batch-context.js';
import { gpuHostUnobservable, SUPERVISOR_FILE, type BatchRecord, type SupervisorRecord } from './layout.js';

export interface Leftover {
  readonly container_id: string;
  readonly job_id: string | null;
  readonly status: string;
  readonly why: 'job_finished' | 'job_not_running' | 'unknown_job';
}

export interface BatchStatus {
  readonly schema: typeof STATUS_SCHEMA;
  readonly batch_id: string;
  readonly output: string;
  readonly state: BatchState;
  readonly pause_reasons: PauseReason[];
  readonly counts: Counts;
  readonly running: RunningPair[];
  readonly workers_allowed: number;
  /**
   * Swarm executor only (absent for local batches): per node, the pairs running there and its GPUs (the node's
   * `NVIDIA-GPU` generic resources seen at start, and those the running pairs asked for).
   */
  readonly nodes?: readonly NodeStatus[];
  readonly gpu_peak_mib: number | null;
  /** Why the batch stays serial on GPU grounds, when it does (null: the dispatch rule alone decides). */
  readonly gpu_note: string | null;
  readonly claims_without_result: string[];
  /** Time left, from the mean duration of the pairs finished so far; null before the first result or when idle. */
  readonly eta: Eta | null;
  readonly leftovers: Leftover[];
  readonly supervisor: (SupervisorRecord & { readonly alive: boolean }) | null;
  readonly updated_at: string;
}

export interface Summary {
  readonly schema: 'roboguide.e1.summary/v1';
  readonly batch_id: string;
  readonly state: BatchState;
  readonly counts: Counts;
  readonly pause_reasons: PauseReason[];
  readonly pause_history: PauseHistoryEntry[];
  readonly jobs: { readonly job_id: string; readonly classification: Classification | null; readonly reasons: readonly string[]; readonly started_at: string | null; readonly finished_at: string | null }[];
  readonly source_checks: unknown[];
  readonly timings: { readonly created_at: string; readonly first_claim_at: string | null; readonly last_finish_at: string | null };
  readonly written_at: string;
}

/** The dispatch policy's view of the manifest's capacity; an unobservable GPU host never gets a second worker. */
export function capacityConfigOf(manifest: Manifest, batch: BatchRecord): CapacityConfig {
  const c = manifest.capacity;
  return {
    maxWorkers: gpuHostUnobservable(batch) ? 1 : c.max_workers,
    ...(c.gpu_total_mib !== undefined ? { gpuTotalMib: c.gpu_total_mib } : {}),
    ...(c.gpu_baseline_mib !== undefined ? { gpuBaselineMib: c.gpu_baseline_mib } : {}),
    ...(c.gpu_fraction !== undefined ? { gpuFraction: c.gpu_fraction } : {}),
    ...(batch.executor?.kind === 'swarm' && batch.executor_slots !== undefined ? { executorSlots: batch.executor_slots } : {}),
  };
}

function gpuNote(batch: BatchRecord, peaks: readonly number[]): string | null {
  const observed = batch.gpu_observation;
  if (observed?.observation.kind === 'unobservable') return `GPUs not observable at start (${observed.observation.reason}): serial`;
  if (peaks.length === 0) return 'no measured GPU peak from a completed pair yet: serial';
  return null;
}

export function gpuPeaksOf(files: readonly JobFiles[]): number[] {
  const peaks: number[] = [];
  for (const f of files) {
    // result.json keeps the outcome as parsed: check its shape again, no need to re-encode it.
    if (f.result?.classification !== 'completed' || outcomeProblems(f.result.outcome).length > 0) continue;
    const peak = gpuObservation(f.result.outcome as Outcome);
    if (peak !== null) peaks.push(peak);
  }
  return peaks;
}

export interface StatusInput {
  readonly store: EvidenceStore;
  readonly batch: BatchRecord;
  readonly manifest: Manifest;
  readonly files: readonly JobFiles[];
  readonly journal: readonly JournalRecord[];
  /** In the supervisor: its own view of running pairs. Elsewhere: derived from receipts and the engine. */
  readonly running?: readonly RunningPair[];
  readonly runtime?: ContainerRuntime;
  readonly now: Date;
  readonly supervisorAlive?: boolean;
}

/**
 * The claimed job without a result whose claim a container carries (labels `roboguide.claim` and `roboguide.job`),
 * while the batch's supervisor is alive: such a container is that supervisor's, never a leftover.
 */
function ownerOf(files: readonly JobFiles[], alive: boolean): (labels: Readonly<Record<string, string>>) => JobFiles | undefined {
  if (!alive) return () => undefined;
  const byClaim = new Map(files.flatMap((f) => (f.receipt !== null && f.result === null ? [[f.receipt.claim_id, f] as const] : [])));
  return (labels) => {
    const f = byClaim.get(labels['roboguide.claim'] ?? '');
    return f !== undefined && labels['roboguide.job'] === f.job.job_id ? f : undefined;
  };
}

function runningPairOf(f: JobFiles, receipt: Receipt, containerId: string | null): RunningPair {
  const deadline = new Date(new Date(receipt.claimed_at).getTime() + f.job.timeout_seconds * 1000).toISOString();
  return { job_id: f.job.job_id, container_id: containerId, started_at: receipt.claimed_at, deadline };
}

/** Seconds from start to finish of every pair with a result. */
function finishedDurationsSec(files: readonly JobFiles[]): number[] {
  return files.flatMap((f) => (f.result ? [(new Date(f.result.finished_at).getTime() - new Date(f.result.started_at).getTime()) / 1000] : []));
}

export interface NodeStatus {
  readonly node: string;
  readonly running: readonly string[];
  readonly gpus_total: number;
  readonly gpus_in_use: number;
}

/** Where each pair was placed (swarm): the supervisor's `pair_placed` journal records, the last one per job. */
function placementsOf(journal: readonly JournalRecord[]): Map<string, string> {
  const placed = new Map<string, string>();
  for (const r of journal) {
    const rec = r as JournalRecord & { job_id?: unknown; node?: unknown };
    if (r.type === 'pair_placed' && typeof rec.job_id === 'string' && typeof rec.node === 'string') placed.set(rec.job_id, rec.node);
  }
  return placed;
}

function gpusOfJob(job: Manifest['jobs'][number] | undefined): number {
  const g = job?.gpus;
  if (g === undefined) return 0;
  if (g === 'all') return 1;
  return typeof g === 'number' ? g : g.length;
}

/** Per-node view of a swarm batch: its nodes at start (plus any a pair was placed on since), the pairs running there, GPUs. */
function nodesStatus(batch: BatchRecord, manifest: Manifest, running: readonly RunningPair[]): NodeStatus[] | undefined {
  if (batch.executor?.kind !== 'swarm') return undefined;
  const jobs = new Map(manifest.jobs.map((j) => [j.job_id, j]));
  const nodes = new Map<string, { running: string[]; gpus_total: number; gpus_in_use: number }>();
  for (const n of batch.executor_nodes ?? []) nodes.set(n.node, { running: [], gpus_total: n.gpus, gpus_in_use: 0 });
  for (const r of running) {
    if (r.node === undefined) continue;
    const n = nodes.get(r.node) ?? { running: [], gpus_total: 0, gpus_in_use: 0 };
    n.running.push(r.job_id);
    n.gpus_in_use += gpusOfJob(jobs.get(r.job_id));
    nodes.set(r.node, n);
  }
  return [...nodes].map(([node, n]) => ({ node, ...n }));
}

/** status.json: derived from the journal and the job files, never the source of truth. */
export async function buildStatus(input: StatusInput): Promise<BatchStatus> {
  const { files, manifest } = input;
  const supervisor = await input.store.readJson<SupervisorRecord>(SUPERVISOR_FILE);
  const alive = input.supervisorAlive ?? (await runningSupervisor(input.store)) !== null;
  const claimsWithoutResult = files.filter((f) => f.receipt !== null && f.result === null).map((f) => f.job.job_id);
  const leftovers: Leftover[] = [];
  const running: RunningPair[] = input.running ? [...input.running] : [];
  const containers = input.runtime ? await input.runtime.listByLabel({ 'roboguide.batch': input.batch.batch_id }) : [];
  const owner = ownerOf(files, alive);
  const byJob = new Map(files.map((f) => [f.job.job_id, f]));
  if (!input.running && alive) {
    // A live supervisor owns every claim without a result (it dispatched or recovered each one): running, from
    // the claim until the result, whatever state its container is in (not created yet, created, exited).
    for (const f of files) {
      if (f.receipt === null || f.result !== null) continue;
      const own = containers.find((c) => owner(c.labels) === f);
      running.push(runningPairOf(f, f.receipt, own?.id ?? f.receipt.container_id));
    }
  }
  for (const c of containers) {
    const jobId = c.labels['roboguide.job'] ?? null;
    const f = jobId === null ? undefined : byJob.get(jobId);
    if (owner(c.labels) !== undefined) continue;
    if (!input.running && !alive && f && f.result === null && c.status === 'running' && f.receipt) {
      // No supervisor, yet the pair's container still runs: shown as running until resume reattaches it.
      running.push(runningPairOf(f, f.receipt, c.id));
      continue;
    }
    if (running.some((r) => r.container_id === c.id)) continue;
    leftovers.push({ container_id: c.id, job_id: jobId, status: c.status, why: !f ? 'unknown_job' : f.result ? 'job_finished' : 'job_not_running' });
  }
  const placements = placementsOf(input.journal);
  for (const [i, r] of running.entries()) {
    const node = r.node ?? placements.get(r.job_id);
    if (node !== undefined && r.node === undefined) running[i] = { ...r, node };
  }
  const nodes = nodesStatus(input.batch, manifest, running);
  const fold = foldJournal(input.journal);
  const counts = countJobs(
    files.map((f) => ({ jobId: f.job.job_id, claimed: f.receipt !== null, classification: f.result?.classification ?? null })),
    running.length,
  );
  const peaks = gpuPeaksOf(files);
  const finished = files.filter((f) => f.result !== null).length;
  const allowed = workersAllowed(capacityConfigOf(manifest, input.batch), peaks, finished);
  const state = deriveState(fold, counts, alive);
  const nowMs = input.now.getTime();
  const eta =
    state === 'running'
      ? estimateEta({
          finishedDurationsSec: finishedDurationsSec(files),
          pending: counts.pending,
          runningElapsedSec: running.map((r) => (nowMs - new Date(r.started_at).getTime()) / 1000),
          workersAllowed: allowed,
        })
      : null;
  return {
    schema: STATUS_SCHEMA,
    batch_id: input.batch.batch_id,
    output: input.store.root,
    state,
    pause_reasons: fold.pauseReasons,
    counts,
    running,
    workers_allowed: allowed,
    ...(nodes !== undefined ? { nodes } : {}),
    gpu_peak_mib: peaks.length > 0 ? Math.max(...peaks) : null,
    gpu_note: gpuNote(input.batch, peaks),
    claims_without_result: claimsWithoutResult,
    eta,
    leftovers,
    supervisor: supervisor === null ? null : { ...supervisor, alive },
    updated_at: input.now.toISOString(),
  };
}

export function buildSummary(status: BatchStatus, batch: BatchRecord, files: readonly JobFiles[], journal: readonly JournalRecord[], now: Date): Summary {
  const fold = foldJournal(journal);
  const claims = files.flatMap((f) => (f.receipt ? [f.receipt.claimed_at] : [])).sort();
  const finishes = files.flatMap((f) => (f.result ? [f.result.finished_at] : [])).sort();
  return {
    schema: 'roboguide.e1.summary/v1',
    batch_id: batch.batch_id,
    state: status.state,
    counts: status.counts,
    pause_reasons: status.pause_reasons,
    pause_history: fold.pauseHistory,
    jobs: files.map((f) => ({
      job_id: f.job.job_id,
      classification: f.result?.classification ?? null,
      reasons: f.result?.reasons ?? [],
      started_at: f.result?.started_at ?? f.receipt?.claimed_at ?? null,
      finished_at: f.result?.finished_at ?? null,
    })),
    source_checks: journal.filter((e) => e.type === 'source_check'),
    timings: { created_at: batch.created_at, first_claim_at: claims[0] ?? null, last_finish_at: finishes.at(-1) ?? null },
    written_at: now.toISOString(),
  };
}
