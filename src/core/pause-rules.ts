import { classOfReason, type Classified } from './classify.js';
import type { PauseCause } from './pause-cause.js';
import type { Classification } from './result.js';

/**
 * The pause policy (SPEC §5), in one place: which outcomes pause the batch and why (`pausesFor`), the streak of
 * infrastructure failures, and what `resume` clears. Pure. The supervisor's machine (src/core/supervisor-machine.ts)
 * records the pauses this returns; finishing a pair (src/app/batch/finish-pair.ts) and the start-up recovery
 * (src/app/batch/supervisor.ts) ask it; none of them decides a pause itself.
 */

/** `registry_unavailable`: a registry call timed out or could not reach its server (issue 27); resume clears it. */
export type PauseReason =
  | 'fatal'
  | 'infrastructure_streak'
  | 'provider'
  | 'harness'
  | 'registry_unavailable'
  | 'image_registry_unavailable'
  | 'inputs_changed';

/** Stable order of pause reasons in status.json. */
export const PAUSE_REASONS: readonly PauseReason[] = [
  'fatal',
  'infrastructure_streak',
  'provider',
  'harness',
  'registry_unavailable',
  'image_registry_unavailable',
  'inputs_changed',
];

/** Consecutive infrastructure failures, on this many different pairs, pause the batch. */
export const INFRA_STREAK_LENGTH = 3;

export interface FinishedPair {
  readonly jobId: string;
  readonly classification: Classification;
}

/** What happened, for the pause policy to judge. */
export type PauseTrigger =
  /** A pair's classified result. */
  | { readonly kind: 'pair_result'; readonly result: Classified }
  /** The evidence disk refused a pair's result.json: the pair's own pauses, and the harness's. */
  | { readonly kind: 'result_unwritten'; readonly result: Classified }
  /**
   * A finished pair's terminal reconciliation (`result`: the pair's result when it has just finished; none when a
   * resume reconciles it again).
   */
  | {
      readonly kind: 'reconciled';
      readonly result?: Classified;
      readonly released: boolean;
      readonly registryUnavailable: boolean;
      readonly nodeLost: boolean;
    }
  /** Start-up recovery reconciled a finished pair whose slot the previous supervisor had not released. */
  | { readonly kind: 'recovered'; readonly released: boolean }
  /** The source pins were checked (before the first dispatch, at the drain). */
  | { readonly kind: 'sources_checked'; readonly ok: boolean }
  /** A pair's exclusive receipt was not published. */
  | { readonly kind: 'claim_failed'; readonly reason: 'receipt_write_failed' | 'already_claimed' }
  /** The supervisor itself, or a pair's task, failed. */
  | { readonly kind: 'fault'; readonly cause?: PauseCause | undefined }
  /** The results finished since the batch started or was last resumed, in finish order. */
  | { readonly kind: 'finished_since_resume'; readonly finished: readonly FinishedPair[] };

/** Does this pause the batch, and why: the reasons (empty: the batch goes on). */
export function pausesFor(trigger: PauseTrigger): PauseReason[] {
  switch (trigger.kind) {
    case 'pair_result':
      return pauseReasonsFor(trigger.result);
    case 'result_unwritten':
      return union(pauseReasonsFor(trigger.result), ['harness']);
    case 'reconciled': {
      const own = trigger.result === undefined ? [] : pauseReasonsFor(trigger.result);
      // A registry that timed out or could not be reached keeps the slot (and the evidence) for `resume` to
      // reconcile once it answers (issue 27). A pair whose node was lost keeps its slot until the node's engine
      // confirms the removal or the operator declares the node down; the batch goes on with the other nodes.
      if (trigger.released) return own;
      if (trigger.registryUnavailable) return union(own, ['registry_unavailable']);
      return trigger.nodeLost ? own : union(own, ['harness']);
    }
    case 'recovered':
      return trigger.released ? [] : ['harness'];
    case 'sources_checked':
      // Changed inputs: the operator cannot wave them away with `resume`.
      return trigger.ok ? [] : ['fatal', 'inputs_changed'];
    case 'claim_failed':
      // Already claimed (another process won the receipt): it stays claimed, nothing ran here.
      return trigger.reason === 'receipt_write_failed' ? ['harness'] : [];
    case 'fault':
      return [pauseReasonOfFault(trigger.cause)];
    case 'finished_since_resume':
      return infrastructureStreak(trigger.finished) ? ['infrastructure_streak'] : [];
  }
}

/**
 * The pauses a classified pair causes. An infrastructure failure alone pauses nothing (see the streak).
 * `inputs_changed` is never a pair's: the batch-level pin check sets it.
 */
export function pauseReasonsFor(c: Classified): PauseReason[] {
  const classes = new Set(c.reasons.map(classOfReason));
  const pauses = new Set<PauseReason>();
  if (classes.has('fatal')) pauses.add('fatal');
  if (classes.has('provider_stop')) pauses.add('provider');
  if (classes.has('harness_failure')) pauses.add('harness');
  return PAUSE_REASONS.filter((p) => pauses.has(p));
}

function union(first: readonly PauseReason[], then: readonly PauseReason[]): PauseReason[] {
  return [...new Set([...first, ...then])];
}

/**
 * The pause a fault of the supervisor (or of a pair's task) causes: a registry that timed out or could not be
 * reached pauses as `registry_unavailable` (resume retries once it answers); anything else as `harness`.
 */
export function pauseReasonOfFault(cause: PauseCause | undefined): PauseReason {
  if (cause?.code === 'E_IMAGE_REGISTRY_UNAVAILABLE') return 'image_registry_unavailable';
  return cause?.code === 'E_REGISTRY_UNAVAILABLE' ? 'registry_unavailable' : 'harness';
}

/**
 * True when the trailing run of consecutive `infrastructure_failure` results (any other
 * classification breaks it) covers at least INFRA_STREAK_LENGTH different pairs. `finished` is
 * in finish order; the caller passes the results finished since the batch started or was last
 * resumed, so a streak the operator resumed past does not pause the batch again at once.
 */
export function infrastructureStreak(finished: readonly FinishedPair[]): boolean {
  const pairs = new Set<string>();
  for (let i = finished.length - 1; i >= 0; i -= 1) {
    const pair = finished[i];
    if (pair?.classification !== 'infrastructure_failure') return false;
    pairs.add(pair.jobId);
    if (pairs.size >= INFRA_STREAK_LENGTH) return true;
  }
  return false;
}

/** Pauses that `resume` never clears: the operator cannot wave away a fatal fault or changed inputs. */
const SURVIVES_RESUME: ReadonlySet<PauseReason> = new Set<PauseReason>(['fatal', 'inputs_changed']);

/** The pause reasons left after `resume` (it clears stopped, infrastructure_streak, harness, provider). */
export function survivingResume(reasons: readonly PauseReason[]): PauseReason[] {
  return [...new Set(reasons)].filter((r) => SURVIVES_RESUME.has(r));
}
