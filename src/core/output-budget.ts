/**
 * What a batch's evidence may take on disk at most (issue 10 part 6): every job's two log files at their cap
 * (plus the marker line) and its session files at the extraction limit. Outcomes, receipts, results and the
 * journal are small next to these and are left out. Pure: the caller reads the free space.
 */
export interface BudgetedJob {
  readonly job_id: string;
  readonly log_limit_bytes: number;
}

/** Bytes a log may hold past its cap: the marker line (a few hundred bytes at most). */
const MARKER_ALLOWANCE_BYTES = 256;

export function batchOutputNeedBytes(jobs: readonly BudgetedJob[], sessionsMaxBytes: number): number {
  return jobs.reduce(
    (sum, j) => sum + 2 * (j.log_limit_bytes + MARKER_ALLOWANCE_BYTES) + sessionsMaxBytes,
    0,
  );
}

/** A warning when the free space is less than the batch's caps could need; null when it is enough. */
export function outputSpaceWarning(
  needBytes: number,
  free: { readonly path: string; readonly freeBytes: number },
): string | null {
  if (free.freeBytes >= needBytes) return null;
  return (
    `the output file system (${free.path}) has ${gib(free.freeBytes)} free, less than the ${gib(needBytes)} this batch's ` +
    `caps could need (per job: stdout and stderr at log_limit_bytes, sessions at the extraction limit); ` +
    `a full disk pauses the batch`
  );
}

function gib(bytes: number): string {
  return `${(bytes / 1024 ** 3).toFixed(1)} GiB`;
}
