/**
 * result.json `cleanup` (and a session's): whether the container was removed and its absence verified, in how many
 * tries. Its own module because the pair lifecycle's states carry it too (`pair-lifecycle-state.ts`).
 */
export interface CleanupRecord {
  readonly removed: boolean;
  readonly verified_absent: boolean;
  readonly attempts: number;
}
