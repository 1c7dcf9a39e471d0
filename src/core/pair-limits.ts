/**
 * The resource limits of every pair container (issue 22 item 3): what a job may ask for, what it gets when it asks
 * for nothing, and what the engine is told. Pure: the host's facts come in as plain numbers.
 */

const MIB = 1024 * 1024;
const GIB = 1024 * MIB;

/** Processes and threads in one container (the pids cgroup), when the job gives no `pids_limit`. */
export const DEFAULT_PIDS_LIMIT = 4_096;
export const MIN_PIDS_LIMIT = 16;
export const MAX_PIDS_LIMIT = 1_048_576;
/** The engine refuses a memory limit under 6 MiB. */
export const MIN_MEMORY_MIB = 6;
export const MAX_MEMORY_MIB = 16_777_216;
export const MAX_CPUS = 1_024;
export const MIN_DISK_LIMIT_BYTES = MIB;
export const MAX_DISK_LIMIT_BYTES = 1024 ** 5;
/**
 * Open files per process (soft = hard). Never above the engine's own hard limit: without CAP_SYS_RESOURCE a
 * container cannot raise it, and the engine then refuses to start it (seen here: dockerd runs with 20000).
 */
export const NOFILE_LIMIT = 16_384;

/**
 * Memory kept for the supervisor and the system before the rest is shared among the pairs allowed at once:
 * 10 % of the host's memory, at least 1 GiB and at most 8 GiB.
 */
export function memoryReserveBytes(totalBytes: number): number {
  return Math.min(8 * GIB, Math.max(GIB, Math.floor(totalBytes / 10)));
}
/** The default memory limit never goes under this, however small the host (the reserve then protects less). */
export const MIN_DEFAULT_MEMORY_MIB = 256;
/** When the host's memory is unknown. */
export const FALLBACK_MEMORY_MIB = 4_096;
/** The share of the output file system's free space the pairs allowed at once may fill together. */
export const DISK_FREE_SHARE = 0.5;
/** When the output file system's free space is unknown. */
export const FALLBACK_DISK_LIMIT_BYTES = 10 * GIB;
/** A default disk limit under this is worth a warning (`start`, `doctor`). */
export const LOW_DISK_LIMIT_BYTES = GIB;

/** What a job (or a session) asks for; absent fields take the defaults. */
export interface RequestedLimits {
  readonly pids_limit?: number | undefined;
  readonly memory_mib?: number | undefined;
  readonly cpus?: number | undefined;
  readonly disk_limit_bytes?: number | undefined;
}

/** The defaults of one batch (or one `pair run`), derived from the host once. Recorded in batch.json. */
export interface LimitDefaults {
  readonly pids_limit: number;
  readonly memory_mib: number;
  readonly disk_limit_bytes: number;
  /** How they were derived, in words (recorded, printed by `doctor`). */
  readonly basis: string;
}

/** The limits a pair ran under (result.json `limits`). `cpus` null: no CPU quota (a fair share of the CPUs). */
export interface PairLimits {
  readonly pids_limit: number;
  readonly memory_mib: number;
  readonly cpus: number | null;
  readonly disk_limit_bytes: number;
}

export interface HostBasis {
  /** The host's memory, null when unknown. */
  readonly memoryTotalBytes: number | null;
  /** Free bytes of the output file system, null when unknown. */
  readonly outputFreeBytes: number | null;
  /** The most pairs the batch runs at once (`capacity.max_workers`, 1 for `pair run`). */
  readonly maxConcurrentPairs: number;
}

/**
 * Defaults (docs/spec.md 5.1): pids 4096; memory = floor((host memory − reserve) / pairs at once) in MiB, never
 * under 256 MiB; disk = floor(half the output file system's free space / pairs at once). Unknown facts take fixed
 * fallbacks (4 GiB of memory, 10 GiB of disk), said in `basis`.
 */
export function limitDefaults(host: HostBasis): LimitDefaults {
  const pairs = Math.max(1, Math.floor(host.maxConcurrentPairs));
  const words: string[] = [];
  let memoryMib = FALLBACK_MEMORY_MIB;
  if (host.memoryTotalBytes !== null && host.memoryTotalBytes > 0) {
    const shared = host.memoryTotalBytes - memoryReserveBytes(host.memoryTotalBytes);
    memoryMib = Math.max(MIN_DEFAULT_MEMORY_MIB, Math.floor(shared / pairs / MIB));
    words.push(
      `memory: (host ${mib(host.memoryTotalBytes)} MiB − reserve ${mib(memoryReserveBytes(host.memoryTotalBytes))} MiB) / ${pairs} pair(s)`,
    );
  } else words.push(`memory: host memory unknown, fixed ${FALLBACK_MEMORY_MIB} MiB`);
  let diskBytes = FALLBACK_DISK_LIMIT_BYTES;
  if (host.outputFreeBytes !== null && host.outputFreeBytes >= 0) {
    diskBytes = Math.max(MIN_DISK_LIMIT_BYTES, Math.floor((host.outputFreeBytes * DISK_FREE_SHARE) / pairs));
    words.push(
      `disk: ${DISK_FREE_SHARE} × ${host.outputFreeBytes} free bytes of the output file system / ${pairs} pair(s)`,
    );
  } else words.push(`disk: output file system unknown, fixed ${FALLBACK_DISK_LIMIT_BYTES} bytes`);
  return {
    pids_limit: DEFAULT_PIDS_LIMIT,
    memory_mib: memoryMib,
    disk_limit_bytes: diskBytes,
    basis: words.join('; '),
  };
}

/** A job's own fields, else the defaults. */
export function effectiveLimits(requested: RequestedLimits, defaults: LimitDefaults): PairLimits {
  return {
    pids_limit: requested.pids_limit ?? defaults.pids_limit,
    memory_mib: requested.memory_mib ?? defaults.memory_mib,
    cpus: requested.cpus ?? null,
    disk_limit_bytes: requested.disk_limit_bytes ?? defaults.disk_limit_bytes,
  };
}

/**
 * The capabilities a pair keeps (all others dropped, docs/spec.md 5.1): a root driver writing into the operator's
 * folders (DAC_OVERRIDE, FOWNER, CHOWN), dropping to another user (SETUID, SETGID) and signalling its children
 * under that user (KILL).
 */
export const PAIR_CAPABILITIES = ['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'SETUID', 'SETGID', 'KILL'] as const;

/** What the engine is told for these limits (the container's HostConfig, in domain words). */
export interface ContainerLimits {
  readonly pidsLimit: number;
  readonly memoryBytes: number;
  /** Memory + swap: equal to `memoryBytes`, so no swap beyond the memory limit. */
  readonly memorySwapBytes: number;
  /** CPU quota in units of 10⁻⁹ CPUs; absent: none. */
  readonly nanoCpus?: number;
  readonly ulimits: readonly {
    readonly name: 'nofile' | 'nproc';
    readonly soft: number;
    readonly hard: number;
  }[];
}

export function containerLimitsOf(limits: Omit<PairLimits, 'disk_limit_bytes'>): ContainerLimits {
  const memoryBytes = limits.memory_mib * MIB;
  return {
    pidsLimit: limits.pids_limit,
    memoryBytes,
    memorySwapBytes: memoryBytes,
    ...(limits.cpus !== null ? { nanoCpus: Math.round(limits.cpus * 1e9) } : {}),
    // nproc counts a user's processes host-wide and is not enforced for root: the pids cgroup is the real bound.
    ulimits: [
      { name: 'nofile', soft: NOFILE_LIMIT, hard: NOFILE_LIMIT },
      { name: 'nproc', soft: limits.pids_limit, hard: limits.pids_limit },
    ],
  };
}

function mib(bytes: number): number {
  return Math.floor(bytes / MIB);
}
