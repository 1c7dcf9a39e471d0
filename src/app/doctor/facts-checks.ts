import type { GpuObservation } from '../../core/gpu/nvidia-smi-parse.js';
import {
  gpuCountMismatch,
  type FileSystemFact,
  type HostFact,
  type HostFactsRecord,
} from '../../core/host-facts.js';
import { formatBytes, ok, warn, type DoctorCheck } from './check.js';

/** Under this much free space on the engine's data root, images, layers and pair logs may not fit. */
export const DATA_ROOT_WARN_BYTES = 5 * 1024 ** 3;

const unknownPart = (what: string, fact: { kind: 'unknown'; reason: string }): string =>
  `${what} unknown (${fact.reason})`;

/** CPU, memory and OS in one line: facts, never a verdict (warn only when none of the three is known). */
export function hostCheck(facts: HostFactsRecord): DoctorCheck {
  const { cpu, memory, os } = facts;
  const parts = [
    cpu.kind === 'known'
      ? `${cpu.model}, ${cpu.cores} core(s) (${cpu.physical_cores} physical)`
      : unknownPart('CPU', cpu),
    memory.kind === 'known'
      ? `${formatBytes(memory.total_bytes)} memory, ${formatBytes(memory.available_bytes)} available`
      : unknownPart('memory', memory),
    os.kind === 'known'
      ? `${[os.distro, os.release].filter((s) => s !== '').join(' ') || 'OS'}, kernel ${os.kernel} (${os.arch})`
      : unknownPart('OS', os),
  ];
  const check =
    cpu.kind === 'unknown' && memory.kind === 'unknown' && os.kind === 'unknown'
      ? warn('host', parts.join('; '), 'check that lscpu, df and /proc are available to this user')
      : ok('host', parts.join('; '));
  return { ...check, facts: { cpu, memory, os } };
}

export function describeFileSystem(fs: FileSystemFact): string {
  return `${fs.type} ${fs.fs} mounted on ${fs.mount}, ${formatBytes(fs.free_bytes)} free of ${formatBytes(fs.size_bytes)}`;
}

/** The file system where the engine keeps images, container layers and the pairs' json-file logs. */
export function dataRootCheck(fact: HostFact<FileSystemFact>): DoctorCheck {
  const name = 'engine data root';
  const facts = { engine_data_root_fs: fact };
  if (fact.kind === 'unknown') {
    return {
      ...warn(
        name,
        `not checked: ${fact.reason}`,
        "run doctor on the engine's host, as a user who can see its data root",
      ),
      facts,
    };
  }
  const detail = `${fact.path}: ${describeFileSystem(fact)}`;
  if (fact.free_bytes < DATA_ROOT_WARN_BYTES) {
    return {
      ...warn(
        name,
        `${detail} (< ${formatBytes(DATA_ROOT_WARN_BYTES)})`,
        'free space on that file system: images, container layers and pair logs live there',
      ),
      facts,
    };
  }
  return { ...ok(name, detail), facts };
}

/**
 * nvidia-smi's GPUs (per-GPU memory: the figures admission uses) with the PCI bus's NVIDIA controllers as a
 * cross-check: a different count is a warning naming both.
 */
export function gpuCheck(seen: GpuObservation, controllers: HostFactsRecord['gpu_controllers']): DoctorCheck {
  const mismatch = gpuCountMismatch(seen.kind === 'observed' ? seen.gpus.length : null, controllers);
  const facts = { gpu_controllers: controllers };
  if (seen.kind === 'unobservable') {
    const detail = `not observable (${seen.reason}): ${seen.detail}${mismatch === null ? '' : `; ${mismatch}`}`;
    return {
      ...warn(
        'gpus',
        detail,
        'install the NVIDIA driver so nvidia-smi works for GPU batches; a batch that declares no GPUs (no job gpus or gpu_mib, no capacity GPU field) does not need it: it runs up to max_workers pairs at once by memory and CPU',
      ),
      facts,
    };
  }
  const each = seen.gpus.map(
    (g) => `#${g.index} ${g.name} ${g.memoryTotalMib ?? '?'} MiB (${g.memoryUsedMib ?? '?'} used)`,
  );
  const detail = `${seen.gpus.length} GPU(s), ${seen.totalMib} MiB in all: ${each.join('; ')}`;
  if (mismatch !== null) {
    return {
      ...warn(
        'gpus',
        `${detail}; ${mismatch}`,
        'compare `nvidia-smi -L` with `lspci | grep -i nvidia`: a GPU the driver does not list cannot be given to a pair',
      ),
      facts,
    };
  }
  return { ...ok('gpus', detail), facts };
}
