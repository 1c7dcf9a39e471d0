/**
 * The disk limit's rule (docs/spec.md 5.1), pure: what one measurement of a pair's disk means. A measurement is
 * `measured` when every part of it finished (the folders' walk within its budget, the scan of the container's open
 * files); otherwise its bytes are a lower bound. Past the limit is past it even as a lower bound. A pair whose disk
 * cannot be measured is not trusted to be within it: UNMEASURED_POLLS_TO_STOP unmeasured polls in a row while it
 * runs, or an unmeasured last measurement at collection, stop it as `disk_unmeasurable` (fail closed).
 */

/** Unmeasured polls in a row that stop a running pair. */
export const UNMEASURED_POLLS_TO_STOP = 2;

export interface DiskMeasurement {
  /** Bytes beyond the baseline (a lower bound when not `measured`). */
  readonly addedBytes: number;
  readonly limitBytes: number;
  readonly measured: boolean;
  /** Unmeasured polls in a row before this one. */
  readonly unmeasuredBefore: number;
  /** The last measurement, taken at collection (the pair has ended: nothing later can measure it). */
  readonly atCollection: boolean;
}

export type DiskVerdict = 'within' | 'exceeded' | 'unmeasurable';

export function diskVerdict(m: DiskMeasurement): DiskVerdict {
  if (m.addedBytes > m.limitBytes) return 'exceeded';
  if (m.measured) return 'within';
  if (m.atCollection || m.unmeasuredBefore + 1 >= UNMEASURED_POLLS_TO_STOP) return 'unmeasurable';
  return 'within';
}
