/** A file among the largest a walk saw (src/adapters/fs/disk-usage-walker.ts). */
export interface DiskUsageEntry {
  /** Its path relative to the measured folder it lies in. */
  readonly path: string;
  /** Its allocated bytes. */
  readonly bytes: number;
}

/** What a walk of some host folders found (src/adapters/fs/disk-usage-walker.ts). */
export interface DiskUsageReport {
  /** Allocated bytes (blocks, so a sparse file counts what it holds), every hard-linked file once. */
  readonly bytes: number;
  /** Files, folders and links seen. */
  readonly entries: number;
  /** False when the budget ran out first: `bytes` is then a lower bound. */
  readonly complete: boolean;
  /** The largest files seen (most bytes first, at most DISK_LARGEST_ENTRIES); absent where not tracked. */
  readonly largest?: readonly DiskUsageEntry[];
}

/** How many of the largest files a walk names. */
export const DISK_LARGEST_ENTRIES = 5;

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

/** What the open-file scan of a container's processes found (src/adapters/fs/proc-open-files.ts). */
export interface UnlinkedOpenFiles {
  /** Allocated bytes of the regular files its processes hold open (or mapped) that no folder names any more. */
  readonly bytes: number;
  /** How many such files (each inode once). */
  readonly files: number;
  /** Descriptors and mappings looked at. */
  readonly entries: number;
  /**
   * False when the scan could not see every process's descriptors (the budget ran out, a process's fd table was
   * unreadable, its processes could not be listed): `bytes` is then a lower bound.
   */
  readonly complete: boolean;
  /**
   * Why this host cannot scan the container's processes at all, whatever the pair does (the supervisor is not root,
   * the engine's processes are not on this host): the scan is off for the pair and named in its disk record, not
   * counted as an unmeasured poll. A pair cannot cause it: on a local engine under root the scan always runs.
   */
  readonly unavailable?: string;
}

/**
 * The disk a container's processes hold through files that were deleted while open (containment round two):
 * invisible to any walk and to the writable layer's size, they stay allocated until the last descriptor closes.
 * Read on the host from the processes of the container `containerId` whose first process is `pid`; a `pid` whose
 * cgroup does not name the container (an engine on another host, a pid reused) is not scanned: incomplete.
 */
export interface OpenFileScan {
  unlinkedOpenFiles(
    container: { readonly id: string; readonly pid: number },
    budget: DiskUsageBudget,
  ): Promise<UnlinkedOpenFiles>;
}
