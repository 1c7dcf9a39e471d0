/** What a walk of some host folders found (src/adapters/fs/disk-usage-walker.ts). */
export interface DiskUsageReport {
  /** Allocated bytes (blocks, so a sparse file counts what it holds), every hard-linked file once. */
  readonly bytes: number;
  /** Files, folders and links seen. */
  readonly entries: number;
  /** False when the budget ran out first: `bytes` is then a lower bound. */
  readonly complete: boolean;
}

export interface DiskUsageBudget {
  /** Stop after this many entries. */
  readonly maxEntries: number;
  /** Stop after this long (ms). */
  readonly maxMs: number;
}

/**
 * The bytes under host folders, as kubelet measures ephemeral storage where no quota exists: a walk that never
 * follows a symbolic link and never leaves the folders' file systems. A missing folder counts 0.
 */
export interface DiskUsage {
  measure(paths: readonly string[], budget: DiskUsageBudget): Promise<DiskUsageReport>;
}
