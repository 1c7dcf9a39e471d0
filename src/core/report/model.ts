import {
  countJobs,
  deriveState,
  foldJournal,
  type BatchState,
  type Counts,
  type PauseHistoryEntry,
} from '../batch-state.js';
import { workersAllowed, type CapacityConfig } from '../dispatch-policy.js';
import { gpuObservation, outcomeProblems, type Outcome } from '../outcome.js';
import type { Classification, ResultRecord } from '../result.js';
import { estimateEta, type Eta } from './eta.js';
import { assignSlots } from './slots.js';
import { wallDeadlineFromClaim } from '../wall-budget.js';

/**
 * The batch report's data (`e1-batch report --json`, and what report.html draws). Pure: built only from evidence
 * that is already redacted — the journal, receipts, results and the names of the files in each job folder —
 * never from the manifest's argv or environment, so nothing secret can reach it.
 */
export const REPORT_SCHEMA = 'roboguide.e1.report/v1' as const;

export interface ReportJob {
  readonly job_id: string;
  readonly timeout_seconds: number;
  readonly receipt: { readonly claimed_at: string; readonly container_id: string | null } | null;
  readonly result: ResultRecord | null;
  /** Names of the files in `jobs/<id>/`: a link is offered only to a file that exists. */
  readonly files: readonly string[];
}

export interface ReportInput {
  readonly batchId: string;
  readonly createdAt: string;
  readonly capacity: CapacityConfig;
  /** The host's GPUs could not be observed at start: the batch stays serial whatever the pairs report. */
  readonly gpuUnobservable: boolean;
  readonly journal: readonly {
    readonly type: string;
    readonly at: string;
    readonly [field: string]: unknown;
  }[];
  readonly jobs: readonly ReportJob[];
  readonly supervisorAlive: boolean;
  readonly now: string;
}

/** pending: never claimed; running: claimed, its live supervisor owns it; unfinished: claimed, no result, no supervisor. */
export type PairStatus = 'pending' | 'running' | 'unfinished' | 'finished';

export interface ReportPair {
  readonly job_id: string;
  readonly status: PairStatus;
  readonly classification: Classification | null;
  readonly reasons: readonly string[];
  readonly started_at: string | null;
  readonly finished_at: string | null;
  readonly duration_sec: number | null;
  readonly deadline: string | null;
  readonly exit_code: number | null;
  readonly timed_out: boolean;
  readonly provider_failure_kind: string | null;
  readonly provider_http_status: number | null;
  readonly provider_failure_error_kind: string | null;
  readonly cleanup_verified: boolean | null;
  readonly gpu_peak_mib: number | null;
  /** Worker slot on the timeline (0-based); null for a pair never claimed. */
  readonly slot: number | null;
  /** Paths relative to the batch directory, only for files that exist. */
  readonly links: { readonly stdout?: string; readonly stderr?: string; readonly result?: string };
}

export interface TimelineMarker {
  readonly at: string;
  readonly kind:
    'source_check' | 'supervisor_started' | 'supervisor_exited' | 'stop_requested' | 'second_worker';
  readonly label: string;
  /** For source checks: did the pinned files match. */
  readonly ok?: boolean;
}

export interface PauseSpan {
  readonly from: string;
  /** Null: still paused at the end of the timeline. */
  readonly to: string | null;
  readonly reasons: readonly string[];
  readonly job_id: string | null;
}

export interface GpuRule {
  readonly total_mib: number;
  readonly baseline_mib: number;
  readonly fraction: number;
  /** The largest peak that still admits a second worker: (fraction × total − baseline) / 2. */
  readonly two_worker_peak_limit_mib: number;
}

export interface ReportModel {
  readonly schema: typeof REPORT_SCHEMA;
  readonly batch_id: string;
  readonly state: BatchState;
  readonly generated_at: string;
  readonly created_at: string;
  readonly supervisor_alive: boolean;
  readonly pause_reasons: readonly string[];
  readonly pause_history: readonly PauseHistoryEntry[];
  readonly counts: Counts;
  readonly elapsed_sec: number;
  readonly eta: Eta | null;
  readonly workers_allowed: number;
  readonly timeline: {
    readonly start: string;
    readonly end: string;
    readonly slots: number;
    readonly pauses: readonly PauseSpan[];
    readonly markers: readonly TimelineMarker[];
    readonly second_worker_at: string | null;
  };
  readonly gpu: {
    readonly max_workers: 1 | 2;
    readonly rule: GpuRule | null;
    readonly largest_peak_mib: number | null;
    readonly note: string;
  };
  readonly pairs: readonly ReportPair[];
}

const ms = (iso: string): number => new Date(iso).getTime();

function peakOf(result: ResultRecord | null): number | null {
  if (result?.classification !== 'completed' || outcomeProblems(result.outcome).length > 0) return null;
  return gpuObservation(result.outcome as Outcome);
}

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
  if (input.gpuUnobservable) return 'GPUs not observable at start: serial';
  if (rule === null) return 'no GPU budget in the manifest: serial';
  if (largest === null) return 'no measured GPU peak from a completed pair yet: serial';
  const fits = rule.baseline_mib + 2 * largest <= rule.fraction * rule.total_mib;
  return `${rule.baseline_mib} + 2 × ${largest} ${fits ? '≤' : '>'} ${rule.fraction} × ${rule.total_mib} MiB: ${fits ? 'two workers' : 'serial'}`;
}

/** A journal field shown as a word: strings only (the journal is ours, but never print an object). */
function word(value: unknown): string {
  return typeof value === 'string' ? value : '';
}

function markersOf(journal: ReportInput['journal']): TimelineMarker[] {
  const markers: TimelineMarker[] = [];
  for (const e of journal) {
    if (e.type === 'source_check') {
      const ok = e['ok'] === true;
      markers.push({
        at: e.at,
        kind: 'source_check',
        ok,
        label: `source check (${word(e['phase'])}): ${ok ? 'match' : 'MISMATCH'}`,
      });
    } else if (e.type === 'supervisor_started') {
      markers.push({ at: e.at, kind: 'supervisor_started', label: `supervisor ${word(e['mode'])}` });
    } else if (e.type === 'supervisor_exited') {
      markers.push({ at: e.at, kind: 'supervisor_exited', label: `supervisor exited (${word(e['state'])})` });
    } else if (e.type === 'stop_requested') {
      markers.push({
        at: e.at,
        kind: 'stop_requested',
        label: e['terminate'] === true ? 'stop --terminate' : 'stop requested',
      });
    }
  }
  return markers;
}

function pauseSpans(history: readonly PauseHistoryEntry[]): PauseSpan[] {
  const spans: PauseSpan[] = [];
  let open: { from: string; reasons: string[]; job_id: string | null } | null = null;
  for (const h of history) {
    if (h.event === 'paused') {
      if (open === null) open = { from: h.at, reasons: [...h.reasons], job_id: h.job_id };
      else open.reasons.push(...h.reasons.filter((r) => !open!.reasons.includes(r)));
    } else if (open !== null) {
      spans.push({ ...open, to: h.at });
      open = null;
    }
  }
  if (open !== null) spans.push({ ...open, to: null });
  return spans;
}

const LINKS = [
  ['stdout', 'stdout.log'],
  ['stderr', 'stderr.log'],
  ['result', 'result.json'],
] as const;

export function buildReportModel(input: ReportInput): ReportModel {
  const nowMs = ms(input.now);
  const alive = input.supervisorAlive;
  const claimed = input.jobs.filter((j) => j.receipt !== null || j.result !== null);
  const intervals = claimed.map((j) => ({
    id: j.job_id,
    startMs: ms(j.result?.started_at ?? j.receipt!.claimed_at),
    endMs: j.result ? ms(j.result.finished_at) : nowMs,
  }));
  const slots = assignSlots(intervals);
  const byId = new Map(intervals.map((i) => [i.id, i]));
  let secondWorker: (typeof intervals)[number] | undefined;
  for (const i of intervals) {
    if ((slots.get(i.id) ?? 0) > 0 && (secondWorker === undefined || i.startMs < secondWorker.startMs))
      secondWorker = i;
  }

  const pairs: ReportPair[] = input.jobs.map((j) => {
    const r = j.result;
    const status: PairStatus = r
      ? 'finished'
      : j.receipt === null
        ? 'pending'
        : alive
          ? 'running'
          : 'unfinished';
    const startedAt = r?.started_at ?? j.receipt?.claimed_at ?? null;
    const span = byId.get(j.job_id);
    const links: { stdout?: string; stderr?: string; result?: string } = {};
    for (const [key, name] of LINKS) if (j.files.includes(name)) links[key] = `jobs/${j.job_id}/${name}`;
    return {
      job_id: j.job_id,
      status,
      classification: r?.classification ?? null,
      reasons: r?.reasons ?? [],
      started_at: startedAt,
      finished_at: r?.finished_at ?? null,
      duration_sec:
        span === undefined ? null : Math.max(0, Math.round((span.endMs - span.startMs) / 100) / 10),
      deadline: j.receipt
        ? new Date(wallDeadlineFromClaim(j.receipt.claimed_at, j.timeout_seconds)).toISOString()
        : null,
      exit_code: r?.container.exit_code ?? null,
      timed_out: r?.container.timed_out ?? false,
      provider_failure_kind: r?.provider_failure?.kind ?? null,
      provider_http_status: r?.provider_failure?.http_status ?? null,
      provider_failure_error_kind: r?.provider_failure_error_kind ?? null,
      cleanup_verified: r ? r.cleanup.verified_absent : null,
      gpu_peak_mib: peakOf(r),
      slot: slots.get(j.job_id) ?? null,
      links,
    };
  });

  const fold = foldJournal(input.journal);
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
  const allowed = input.gpuUnobservable ? 1 : workersAllowed(input.capacity, peaks, finished.length);
  const state = deriveState(fold, counts, alive);
  const eta =
    state === 'running'
      ? estimateEta({
          finishedDurationsSec: finished.map((p) => p.duration_sec ?? 0),
          pending: counts.pending,
          runningElapsedSec: running.map((p) => p.duration_sec ?? 0),
          workersAllowed: allowed,
        })
      : null;

  // Journal times are all toISOString() output: the latest is the greatest string, parsed once.
  let lastAt = input.createdAt;
  for (const e of input.journal) if (e.at > lastAt) lastAt = e.at;
  let lastEventMs = Number.isFinite(ms(lastAt))
    ? Math.max(ms(lastAt), ms(input.createdAt))
    : ms(input.createdAt);
  for (const i of intervals) if (i.endMs > lastEventMs) lastEventMs = i.endMs;
  const endMs = alive ? Math.max(nowMs, lastEventMs) : lastEventMs;
  const markers = markersOf(input.journal);
  if (secondWorker)
    markers.push({
      at: new Date(secondWorker.startMs).toISOString(),
      kind: 'second_worker',
      label: `second worker admitted (${secondWorker.id})`,
    });
  const rule = gpuRule(input.capacity);
  const largest = peaks.length > 0 ? peaks.reduce((a, b) => Math.max(a, b)) : null;

  return {
    schema: REPORT_SCHEMA,
    batch_id: input.batchId,
    state,
    generated_at: input.now,
    created_at: input.createdAt,
    supervisor_alive: alive,
    pause_reasons: fold.pauseReasons,
    pause_history: fold.pauseHistory,
    counts,
    elapsed_sec: Math.max(0, Math.round((endMs - ms(input.createdAt)) / 1000)),
    eta,
    workers_allowed: allowed,
    timeline: {
      start: input.createdAt,
      end: new Date(endMs).toISOString(),
      slots: [...slots.values()].reduce((n, s) => Math.max(n, s + 1), 1),
      pauses: pauseSpans(fold.pauseHistory),
      markers: markers.sort((a, b) => ms(a.at) - ms(b.at)),
      second_worker_at: secondWorker ? new Date(secondWorker.startMs).toISOString() : null,
    },
    gpu: {
      max_workers: input.capacity.maxWorkers,
      rule,
      largest_peak_mib: largest,
      note: gpuNote(input, rule, largest),
    },
    pairs,
  };
}
