import { exitCodeOf, explainResult } from '../next-steps.js';
import { RESULT_FILE, STDERR_LOG, STDOUT_LOG } from '../evidence-names.js';
import { formatOutcomeProblem, gpuObservation, outcomeProblems, type Outcome } from '../outcome.js';
import type { ResultRecord } from '../result.js';
import { egressFactsOf } from '../egress/egress-tally.js';
import { assignSlots, type Interval } from './slots.js';
import type { PairStatus, ReportInput, ReportJob, ReportPair } from './types.js';
import { wallDeadlineFromClaim } from '../wall-budget.js';

/** The report's pairs: status, times, slot on the timeline and links, one row per job. Pure. */

const ms = (iso: string): number => new Date(iso).getTime();

const LINKS = [
  ['stdout', STDOUT_LOG],
  ['stderr', STDERR_LOG],
  ['result', RESULT_FILE],
] as const;

function peakOf(result: ResultRecord | null): number | null {
  if (result?.classification !== 'completed' || outcomeProblems(result.outcome).length > 0) return null;
  return gpuObservation(result.outcome as Outcome);
}

/** The claimed pairs as time intervals (to now while unfinished), their slots, and the first pair off slot 0. */
export interface Claims {
  readonly intervals: readonly Interval[];
  readonly slots: ReadonlyMap<string, number>;
  readonly byId: ReadonlyMap<string, Interval>;
  readonly secondWorker: Interval | undefined;
}

export function claimsOf(input: ReportInput, nowMs: number): Claims {
  const claimed = input.jobs.filter((j) => j.receipt !== null || j.result !== null);
  const intervals = claimed.map((j) => ({
    id: j.job_id,
    startMs: ms(j.result?.started_at ?? j.receipt!.claimed_at),
    endMs: j.result ? ms(j.result.finished_at) : nowMs,
  }));
  const slots = assignSlots(intervals);
  let secondWorker: Interval | undefined;
  for (const i of intervals) {
    if ((slots.get(i.id) ?? 0) > 0 && (secondWorker === undefined || i.startMs < secondWorker.startMs))
      secondWorker = i;
  }
  return { intervals, slots, byId: new Map(intervals.map((i) => [i.id, i])), secondWorker };
}

function statusOf(j: ReportJob, alive: boolean): PairStatus {
  if (j.result) return 'finished';
  if (j.receipt === null) return 'pending';
  return alive ? 'running' : 'unfinished';
}

export function reportPair(j: ReportJob, alive: boolean, claims: Claims): ReportPair {
  const r = j.result;
  const span = claims.byId.get(j.job_id);
  const links: { stdout?: string; stderr?: string; result?: string; outcome?: string } = {};
  for (const [key, name] of LINKS) if (j.files.includes(name)) links[key] = `jobs/${j.job_id}/${name}`;
  // The evidence's copy of the outcome (secrets masked), when the driver wrote one: `outcome/<file>` of the pair.
  const outcome = j.receipt?.private_outcome;
  const egress = egressFactsOf(r?.egress);
  if (outcome !== undefined && r?.outcome_sha256 != null && j.files.includes(outcome.split('/')[0] ?? ''))
    links.outcome = `jobs/${j.job_id}/${outcome}`;
  return {
    job_id: j.job_id,
    status: statusOf(j, alive),
    classification: r?.classification ?? null,
    reasons: r?.reasons ?? [],
    started_at: r?.started_at ?? j.receipt?.claimed_at ?? null,
    finished_at: r?.finished_at ?? null,
    duration_sec: span === undefined ? null : Math.max(0, Math.round((span.endMs - span.startMs) / 100) / 10),
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
    slot: claims.slots.get(j.job_id) ?? null,
    links,
    outcome_problems: (r?.outcome_problems ?? []).map(formatOutcomeProblem),
    why:
      r === undefined || r === null || r.classification === 'completed'
        ? []
        : explainResult({ reasons: r.reasons, outcome: r.outcome, exit_code: exitCodeOf(r) }),
    ...(egress !== null ? { egress } : {}),
  };
}
