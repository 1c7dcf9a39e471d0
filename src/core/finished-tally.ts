import type { Classification } from './result.js';
import { CLASSIFICATIONS } from './result.js';
import {
  durationMs,
  FAILED_SHOWN,
  zeroFinished,
  type FailedPair,
  type FinishFacts,
  type LedgerBasis,
} from './ledger-facts.js';
import { EgressTally, type EgressStatus } from './egress/egress-tally.js';

/**
 * What the batch ledger knows of its finished pairs, as sums: how many per classification, their summed durations
 * (for the ETA), their largest GPU peak and the most recent failures. Pure. `add` and `remove` keep the sums equal
 * to those of the finished jobs the ledger holds (the ledger calls `remove` when a job's files replace what it had).
 */
export class FinishedTally {
  readonly #finished = zeroFinished();
  #durationMs = 0;
  #timed = 0;
  #peak: number | null = null;
  #peaks = 0;
  /** The most recent failed pairs, oldest first, at most FAILED_SHOWN. */
  #failed: FailedPair[] = [];
  #egress = new EgressTally();

  /** The sums a status.json basis kept. */
  static restore(basis: LedgerBasis): FinishedTally {
    const tally = new FinishedTally();
    for (const c of CLASSIFICATIONS) tally.#finished[c] = basis.finished[c];
    tally.#durationMs = basis.duration_ms;
    tally.#timed = basis.timed;
    tally.#peak = basis.gpu_peak_mib;
    tally.#peaks = basis.gpu_peaks;
    const failed: unknown = basis.failed_recent;
    tally.#failed = Array.isArray(failed) ? (failed as FailedPair[]).slice(-FAILED_SHOWN) : [];
    tally.#egress = EgressTally.restore(basis.egress);
    return tally;
  }

  /** Counts one finished pair. */
  add(jobId: string, facts: FinishFacts): void {
    this.#finished[facts.classification]++;
    if (facts.egress !== undefined) this.#egress.add(jobId, facts.finished_at, facts.egress);
    if (facts.classification !== 'completed') {
      this.#failed = this.#failed.filter((f) => f.job_id !== jobId);
      this.#failed.push({
        job_id: jobId,
        classification: facts.classification,
        reason: facts.first_reason ?? null,
        problem: facts.first_problem ?? null,
        finished_at: facts.finished_at,
        ...(facts.why !== undefined && facts.why.length > 0 ? { why: facts.why } : {}),
      });
      // Newest last by finish time (journal order is finish order in a live batch; a cold read settles in any order).
      this.#failed.sort(
        (a, b) => a.finished_at.localeCompare(b.finished_at) || a.job_id.localeCompare(b.job_id),
      );
      if (this.#failed.length > FAILED_SHOWN) this.#failed.shift();
    }
    const ms = durationMs(facts);
    if (ms !== null) {
      this.#durationMs += ms;
      this.#timed++;
    }
    if (facts.gpu_peak_mib !== null) {
      this.#peaks++;
      this.#peak = this.#peak === null ? facts.gpu_peak_mib : Math.max(this.#peak, facts.gpu_peak_mib);
    }
  }

  /**
   * Takes one finished pair out of the sums; `remaining`: the facts of the finished pairs still counted (the
   * largest GPU peak is found again among them).
   */
  remove(jobId: string, facts: FinishFacts, remaining: Iterable<FinishFacts>): void {
    this.#finished[facts.classification]--;
    this.#failed = this.#failed.filter((f) => f.job_id !== jobId);
    if (facts.egress !== undefined) this.#egress.remove(jobId, facts.egress);
    const ms = durationMs(facts);
    if (ms !== null) {
      this.#durationMs -= ms;
      this.#timed--;
    }
    if (facts.gpu_peak_mib !== null) {
      this.#peaks--;
      let peak: number | null = null;
      for (const other of remaining) {
        if (other.gpu_peak_mib !== null)
          peak = peak === null ? other.gpu_peak_mib : Math.max(peak, other.gpu_peak_mib);
      }
      this.#peak = peak;
    }
  }

  /** Finished pairs of one classification. */
  count(classification: Classification): number {
    return this.#finished[classification];
  }

  total(): number {
    return CLASSIFICATIONS.reduce((sum, c) => sum + this.#finished[c], 0);
  }

  /** The usable GPU peaks as the dispatch rule reads them: the largest, or none. */
  gpuPeaks(): number[] {
    return this.#peak === null ? [] : [this.#peak];
  }

  /** The most recent failed pairs, newest first (at most FAILED_SHOWN). */
  failedRecent(): FailedPair[] {
    return [...this.#failed].reverse();
  }

  /** The allowlisted pairs' attempts: totals and the most recent pairs with refusals; null when none finished. */
  egress(): EgressStatus | null {
    return this.#egress.status();
  }

  /** Mean duration (seconds) of the finished pairs with a usable duration, and how many; null before the first. */
  meanDuration(): { readonly meanSec: number; readonly basisPairs: number } | null {
    return this.#timed === 0
      ? null
      : { meanSec: this.#durationMs / 1000 / this.#timed, basisPairs: this.#timed };
  }

  /** The sums as a status.json basis keeps them. */
  basisFields(): Required<
    Pick<LedgerBasis, 'finished' | 'duration_ms' | 'timed' | 'gpu_peak_mib' | 'gpu_peaks' | 'failed_recent'>
  > &
    Pick<LedgerBasis, 'egress'> {
    const egress = this.#egress.basis();
    return {
      ...(egress !== undefined ? { egress } : {}),
      finished: { ...this.#finished },
      duration_ms: this.#durationMs,
      timed: this.#timed,
      gpu_peak_mib: this.#peak,
      gpu_peaks: this.#peaks,
      failed_recent: [...this.#failed],
    };
  }
}
