/**
 * An estimate of the time left in a batch, from the durations of the pairs finished so far. Pure.
 *
 * Work left = (pending pairs × mean duration) + for each running pair max(0, mean − its elapsed time), spread over
 * the workers the dispatch rule allows. No finished pair yet, or nothing left: no estimate (null), never a guess.
 */
export interface EtaInput {
  /** Wall durations of finished pairs, seconds. */
  readonly finishedDurationsSec: readonly number[];
  readonly pending: number;
  /** Elapsed seconds of each running pair. */
  readonly runningElapsedSec: readonly number[];
  readonly workersAllowed: number;
}

export interface Eta {
  readonly remaining_sec: number;
  /** The mean pair duration the estimate rests on. */
  readonly mean_pair_sec: number;
  /** How many finished pairs it was measured on. */
  readonly basis_pairs: number;
}

export function estimateEta(input: EtaInput): Eta | null {
  const durations = input.finishedDurationsSec.filter((d) => Number.isFinite(d) && d >= 0);
  if (durations.length === 0) return null;
  const mean = durations.reduce((a, b) => a + b, 0) / durations.length;
  return estimateEtaFromMean({ meanSec: mean, basisPairs: durations.length }, input);
}

/** The same estimate from a mean already known (status keeps a running sum, not every duration). */
export function estimateEtaFromMean(
  basis: { readonly meanSec: number; readonly basisPairs: number } | null,
  input: Omit<EtaInput, 'finishedDurationsSec'>,
): Eta | null {
  if (basis === null || basis.basisPairs === 0) return null;
  if (input.pending === 0 && input.runningElapsedSec.length === 0) return null;
  const mean = basis.meanSec;
  const runningLeft = input.runningElapsedSec.reduce((sum, elapsed) => sum + Math.max(0, mean - elapsed), 0);
  const workers = Math.max(1, input.workersAllowed);
  return {
    remaining_sec: Math.round((input.pending * mean + runningLeft) / workers),
    mean_pair_sec: Math.round(mean * 10) / 10,
    basis_pairs: basis.basisPairs,
  };
}
