import type { PauseReason } from './classify.js';
import type { Classification } from './result.js';

/**
 * When the batch pauses, and what `resume` clears (SPEC §5). Pure.
 */

/** Consecutive infrastructure failures, on this many different pairs, pause the batch. */
export const INFRA_STREAK_LENGTH = 3;

export interface FinishedPair {
  readonly jobId: string;
  readonly classification: Classification;
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
