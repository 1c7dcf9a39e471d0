/**
 * A pair's wall budget is one value: a deadline in epoch milliseconds, fixed when the pair is claimed (the
 * receipt's `claimed_at`, read from the injected clock) as `claimed_at + timeout_seconds`. `pair run`, a batch
 * pair and a resumed pair mean the same by it; the lifecycle only compares the clock with it, and everything
 * shown (the journal's `claimed.deadline`, status, the report) is this value written as ISO 8601.
 */
export function wallDeadlineMs(claimedAtMs: number, timeoutSeconds: number): number {
  return claimedAtMs + timeoutSeconds * 1000;
}

/** The deadline of a pair from its receipt's `claimed_at` (ISO 8601). */
export function wallDeadlineFromClaim(claimedAt: string, timeoutSeconds: number): number {
  return wallDeadlineMs(Date.parse(claimedAt), timeoutSeconds);
}
