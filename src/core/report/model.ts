import { countJobs, deriveState, foldJournal, type Counts } from '../batch-state.js';
import type { BatchState } from '../batch-state-name.js';
import { workersAllowed, type CapacityConfig } from '../dispatch-policy.js';
import { CPU_ONLY_MEMORY_UNKNOWN_NOTE, cpuOnlyNote } from '../cpu-only-admission.js';
import { reportImagePlan } from './image-plan.js';
import { estimateEta, type Eta } from './eta.js';
import { claimsOf, reportPair } from './pairs.js';
import { timelineEndMs, timelineOf } from './timeline.js';
import { REPORT_SCHEMA, type GpuRule, type ReportInput, type ReportModel, type ReportPair } from './types.js';

/**
 * The batch report's data (`e1-batch report --json`, and what report.html draws), built from already redacted
 * evidence (src/core/report/types.ts says which). Pure.
 */

const ms = (iso: string): number => new Date(iso).getTime();

function gpuRule(c: CapacityConfig): GpuRule | null {
  const { gpuTotalMib: total, gpuBaselineMib: baseline, gpuFraction: fraction } = c;
  if (total === undefined || baseline === undefined || fraction === undefined) return null;
  return {
    total_mib: total,
    baseline_mib: baseline,
    fraction,
    two_worker_peak_limit_mib: Math.floor((fraction * total - baseline) / 2),
  };
}

function gpuNote(input: ReportInput, rule: GpuRule | null, largest: number | null): string {
  if (input.capacity.maxWorkers === 1) return 'max_workers 1: serial by the manifest';
  if (input.capacity.cpuOnly !== undefined)
    return cpuOnlyNote(input.capacity.cpuOnly, input.capacity.maxWorkers);
  if (input.capacity.cpuOnlyMemoryUnknown === true) return CPU_ONLY_MEMORY_UNKNOWN_NOTE;
  if (input.gpuUnobservable) return 'GPUs not observable at start: serial';
  if (rule === null) return 'no GPU budget in the manifest: serial';
  if (largest === null) return 'no measured GPU peak from a completed pair yet: serial';
  const fits = rule.baseline_mib + 2 * largest <= rule.fraction * rule.total_mib;
  return `${rule.baseline_mib} + 2 × ${largest} ${fits ? '≤' : '>'} ${rule.fraction} × ${rule.total_mib} MiB: ${fits ? 'two workers' : 'serial'}`;
}

/** Counts, the workers the dispatch policy allows now, the batch state and (while running) the ETA. */
function progressOf(
  input: ReportInput,
  pairs: readonly ReportPair[],
  fold: ReturnType<typeof foldJournal>,
): { counts: Counts; allowed: number; state: BatchState; eta: Eta | null; peaks: number[] } {
  const running = pairs.filter((p) => p.status === 'running');
  const counts = countJobs(
    input.jobs.map((j) => ({
      jobId: j.job_id,
      claimed: j.receipt !== null,
      classification: j.result?.classification ?? null,
    })),
    running.length,
  );
  const finished = pairs.filter((p) => p.status === 'finished');
  const peaks = pairs.flatMap((p) => (p.gpu_peak_mib === null ? [] : [p.gpu_peak_mib]));
  const allowed =
    input.gpuUnobservable && input.capacity.cpuOnly === undefined
      ? 1
      : workersAllowed(input.capacity, peaks, finished.length);
  const state = deriveState(fold, counts, input.supervisorAlive);
  const eta =
    state === 'running'
      ? estimateEta({
          finishedDurationsSec: finished.map((p) => p.duration_sec ?? 0),
          pending: counts.pending,
          runningElapsedSec: running.map((p) => p.duration_sec ?? 0),
          workersAllowed: allowed,
        })
      : null;
  return { counts, allowed, state, eta, peaks };
}

export function buildReportModel(input: ReportInput): ReportModel {
  const nowMs = ms(input.now);
  const claims = claimsOf(input, nowMs);
  const pairs = input.jobs.map((j) => reportPair(j, input.supervisorAlive, claims));
  const fold = foldJournal(input.journal);
  const { counts, allowed, state, eta, peaks } = progressOf(input, pairs, fold);
  const endMs = timelineEndMs(input, claims, nowMs);
  const rule = gpuRule(input.capacity);
  const largest = peaks.length > 0 ? peaks.reduce((a, b) => Math.max(a, b)) : null;
  return {
    schema: REPORT_SCHEMA,
    batch_id: input.batchId,
    state,
    generated_at: input.now,
    created_at: input.createdAt,
    supervisor_alive: input.supervisorAlive,
    pause_reasons: fold.pauseReasons,
    images_moved: input.imagesMoved ?? [],
    pause_history: fold.pauseHistory,
    ...(fold.pauseCauses !== undefined ? { pause_causes: fold.pauseCauses } : {}),
    counts,
    elapsed_sec: Math.max(0, Math.round((endMs - ms(input.createdAt)) / 1000)),
    eta,
    workers_allowed: allowed,
    timeline: timelineOf(input, claims, fold.pauseHistory, endMs),
    gpu: {
      max_workers: input.capacity.maxWorkers,
      rule,
      largest_peak_mib: largest,
      note: gpuNote(input, rule, largest),
    },
    pairs,
    image_plan: reportImagePlan(input.imagePlan, input.journal),
  };
}
