/**
 * Host facts (issue 15 item 5): what `doctor` shows and `batch.json` records about the machine, as plain data.
 * Each fact is known (with its fields) or unknown (with the reason: the source failed, or did not answer in time).
 * Field names are snake_case: they are written to evidence files and `doctor --json` as they are.
 */

export type HostFact<T> =
  ({ readonly kind: 'known' } & T) | { readonly kind: 'unknown'; readonly reason: string };

export interface CpuFact {
  readonly model: string;
  /** Logical processors. */
  readonly cores: number;
  readonly physical_cores: number;
}

export interface MemoryFact {
  readonly total_bytes: number;
  /** What can be allocated without swapping (MemAvailable on Linux). */
  readonly available_bytes: number;
}

/** A mounted file system as the fact source lists it. */
export interface MountFact {
  /** The device or source (`/dev/vda`, `server:/export`). */
  readonly fs: string;
  readonly type: string;
  readonly mount: string;
  readonly size_bytes: number;
  /** Free for an unprivileged user (df's Available). */
  readonly free_bytes: number;
}

/** The file system holding `path` (the path as asked, before symlinks are resolved). */
export interface FileSystemFact extends MountFact {
  readonly path: string;
}

export interface OsFact {
  readonly distro: string;
  readonly release: string;
  readonly kernel: string;
  readonly arch: string;
}

export interface GpuController {
  readonly vendor: string;
  readonly model: string;
}

/** Display and 3D controllers on the PCI bus: a cross-check of nvidia-smi's count, nothing more. */
export interface GpuControllersFact {
  readonly controllers: readonly GpuController[];
  /** Controllers whose vendor is NVIDIA. */
  readonly nvidia_count: number;
}

/** `batch.json` `host` and the facts of `doctor`'s host checks. */
export interface HostFactsRecord {
  readonly cpu: HostFact<CpuFact>;
  readonly memory: HostFact<MemoryFact>;
  readonly os: HostFact<OsFact>;
  /** The file system of the output directory (or of its nearest existing ancestor). */
  readonly output_fs: HostFact<FileSystemFact>;
  /** The file system of the engine's data root (DockerRootDir): images, container layers, container logs. */
  readonly engine_data_root_fs: HostFact<FileSystemFact>;
  readonly gpu_controllers: HostFact<GpuControllersFact>;
}

export const NVIDIA_VENDOR = /nvidia/i;

export function gpuControllersFact(controllers: readonly GpuController[]): GpuControllersFact {
  return { controllers, nvidia_count: controllers.filter((c) => NVIDIA_VENDOR.test(c.vendor)).length };
}

/**
 * The mount holding `realPath` (an absolute path with symlinks resolved): the longest mount point that is the path
 * or one of its ancestors; null when none is listed.
 */
export function mountOf(realPath: string, mounts: readonly MountFact[]): MountFact | null {
  let best: MountFact | null = null;
  for (const m of mounts) {
    const inside = m.mount === '/' || realPath === m.mount || realPath.startsWith(`${m.mount}/`);
    if (inside && (best === null || m.mount.length > best.mount.length)) best = m;
  }
  return best;
}

/**
 * The cross-check of nvidia-smi's GPU count against the NVIDIA controllers on the PCI bus: null when they agree
 * (or either side is unknown), else a sentence naming both figures.
 */
export function gpuCountMismatch(
  nvidiaSmiCount: number | null,
  controllers: HostFact<GpuControllersFact>,
): string | null {
  if (controllers.kind !== 'known') return null;
  const smi = nvidiaSmiCount ?? 0;
  if (smi === controllers.nvidia_count) return null;
  const seen =
    nvidiaSmiCount === null ? 'nvidia-smi sees no GPU (not observable)' : `nvidia-smi sees ${smi} GPU(s)`;
  return `${seen} but the PCI bus lists ${controllers.nvidia_count} NVIDIA controller(s)`;
}
