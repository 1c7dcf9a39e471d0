/** The ledger's data shapes (claims, finish facts, failed pairs, the status.json basis) and reading finish facts from a record. Pure. */
import type { JournalFoldState } from './batch-state.js';
import type { JournalEntry } from './journal-events.js';
import { CLASSIFICATIONS, type Classification } from './result.js';
import { egressFactsOf, type EgressBasis, type EgressFacts } from './egress/egress-tally.js';

/** A claim without a result. `index`: the job's position in the manifest (status lists claims in that order). */
export interface OpenClaim {
  readonly job_id: string;
  readonly index: number;
  readonly claim_id: string;
  readonly claimed_at: string;
  readonly deadline: string;
  readonly container_id: string | null;
  /** Swarm executor: the node the pair was placed on (`pair_placed`), once known. */
  readonly node?: string;
}

/** A finished pair, as status counts it. `gpu_peak_mib`: a completed pair's usable GPU peak, else null. */
export interface FinishFacts {
  readonly classification: Classification;
  readonly started_at: string;
  readonly finished_at: string;
  readonly gpu_peak_mib: number | null;
  /** The first of the pair's reasons (none for a completed pair). */
  readonly first_reason?: string;
  /** The first broken rule of its outcome, `path: message` (result.json `outcome_problems`), when there was one. */
  readonly first_problem?: string;
  /** Why it failed in words and what would let it through (core/next-steps.ts `explainResult`), when there is more to say. */
  readonly why?: readonly string[];
  /** An allowlisted pair's attempts (result.json `egress`, masked): counted in status (docs/spec.md §5.6). */
  readonly egress?: EgressFacts;
}

/** A failed pair as status names it. */
export interface FailedPair {
  readonly job_id: string;
  readonly classification: Exclude<Classification, 'completed'>;
  readonly reason: string | null;
  readonly problem: string | null;
  readonly finished_at: string;
  /** Why it failed in words (issue 40); absent when there is nothing to add to the reason and problem. */
  readonly why?: readonly string[];
}

/** How many failed pairs status names (the most recent); the report lists every one. */
export const FAILED_SHOWN = 10;

export const BASIS_SCHEMA = 'roboguide.e1.status_basis/v1' as const;

/** What status.json keeps of the ledger: its size grows with the claims without result, never with the batch. */
export interface LedgerBasis {
  readonly schema: typeof BASIS_SCHEMA;
  /** The last journal record folded in, and the byte offset just past it. */
  readonly journal_seq: number;
  readonly journal_bytes: number;
  readonly total: number;
  /** Jobs with a claim, finished ones included. */
  readonly claimed: number;
  readonly finished: Readonly<Record<Classification, number>>;
  /** Summed durations (whole milliseconds) of the finished pairs with a usable duration, and how many. */
  readonly duration_ms: number;
  readonly timed: number;
  readonly gpu_peak_mib: number | null;
  readonly gpu_peaks: number;
  readonly open: readonly OpenClaim[];
  readonly fold: JournalFoldState;
  /** The most recent failed pairs (at most FAILED_SHOWN, oldest first); absent from a basis written before. */
  readonly failed_recent?: readonly FailedPair[];
  /** The allowlisted pairs' attempts (issue 42); absent when none finished, or from a basis written before. */
  readonly egress?: EgressBasis;
}

export interface LedgerJob {
  readonly job_id: string;
  readonly timeout_seconds: number;
}

export type ApplyOutcome = 'applied' | 'unsure';

export function zeroFinished(): Record<Classification, number> {
  return Object.fromEntries(CLASSIFICATIONS.map((c) => [c, 0])) as Record<Classification, number>;
}

export function str(value: unknown): string | null {
  return typeof value === 'string' ? value : null;
}

/** Milliseconds from start to finish, when both parse and the difference is not negative. */
export function durationMs(facts: FinishFacts): number | null {
  const ms = new Date(facts.finished_at).getTime() - new Date(facts.started_at).getTime();
  return Number.isFinite(ms) && ms >= 0 ? ms : null;
}

/** The finish facts a `pair_finished` record carries (records from before they did: null, read the result). */
export function finishFactsOf(r: Extract<JournalEntry, { type: 'pair_finished' }>): FinishFacts | null {
  const classification = r.classification;
  const startedAt = str(r.started_at);
  const finishedAt = str(r.finished_at);
  const peak = r.gpu_peak_mib;
  if (typeof classification !== 'string' || !(CLASSIFICATIONS as readonly string[]).includes(classification))
    return null;
  if (startedAt === null || finishedAt === null || !Object.hasOwn(r, 'gpu_peak_mib')) return null;
  if (peak !== null && (typeof peak !== 'number' || !Number.isFinite(peak) || peak <= 0)) return null;
  const reason = Array.isArray(r.reasons) && typeof r.reasons[0] === 'string' ? r.reasons[0] : undefined;
  const problem = Array.isArray(r.outcome_problems)
    ? (r.outcome_problems[0] as { path?: unknown; message?: unknown } | undefined)
    : undefined;
  const firstProblem =
    typeof problem?.path === 'string' && typeof problem.message === 'string'
      ? `${problem.path}: ${problem.message}`
      : undefined;
  const why = Array.isArray(r.why) ? r.why.filter((l): l is string => typeof l === 'string') : [];
  const egress = egressFactsOf(r.egress);
  return {
    classification: classification as Classification,
    started_at: startedAt,
    finished_at: finishedAt,
    gpu_peak_mib: peak,
    ...(reason !== undefined ? { first_reason: reason } : {}),
    ...(firstProblem !== undefined ? { first_problem: firstProblem } : {}),
    ...(why.length > 0 ? { why } : {}),
    ...(egress !== null ? { egress } : {}),
  };
}
