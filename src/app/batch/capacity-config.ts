import { cpuOnlyBudget } from '../../core/cpu-only-admission.js';
import type { CapacityConfig } from '../../core/dispatch-policy.js';
import type { Manifest } from '../../core/manifest/schema.js';
import { FALLBACK_MEMORY_MIB } from '../../core/pair-limits.js';
import { gpuHostUnobservable, type BatchRecord } from './layout.js';

/**
 * The dispatch policy's view of the manifest's capacity; an unobservable GPU host never gets a second worker. A local
 * batch that declares no GPUs is admitted by memory and CPU (`cpuOnly`, from the host facts `start` recorded).
 */
export function capacityConfigOf(manifest: Manifest, batch: BatchRecord): CapacityConfig {
  const c = manifest.capacity;
  const found = batch.executor?.kind === 'swarm' ? null : cpuOnlyOf(manifest, batch);
  const cpuOnly = found?.kind === 'cpu_only' ? found.budget : null;
  return {
    maxWorkers: gpuHostUnobservable(batch) && cpuOnly === null ? 1 : c.max_workers,
    ...(cpuOnly !== null ? { cpuOnly } : {}),
    ...(found?.kind === 'memory_unknown' ? { cpuOnlyMemoryUnknown: true as const } : {}),
    ...(c.gpu_total_mib !== undefined ? { gpuTotalMib: c.gpu_total_mib } : {}),
    ...(c.gpu_baseline_mib !== undefined ? { gpuBaselineMib: c.gpu_baseline_mib } : {}),
    ...(c.gpu_fraction !== undefined ? { gpuFraction: c.gpu_fraction } : {}),
    ...(batch.executor?.kind === 'swarm' && batch.executor_slots !== undefined
      ? { executorSlots: batch.executor_slots }
      : {}),
  };
}

/** The memory-and-CPU budget of a batch that declares no GPUs (null: a GPU batch, or the host's memory unknown). */
function cpuOnlyOf(manifest: Manifest, batch: BatchRecord): ReturnType<typeof cpuOnlyBudget> {
  const memory = batch.host?.memory;
  const cpu = batch.host?.cpu;
  const found = cpuOnlyBudget({
    jobs: manifest.jobs,
    capacity: manifest.capacity,
    hostMemoryBytes: memory?.kind === 'known' ? memory.total_bytes : null,
    hostCpus: cpu?.kind === 'known' ? cpu.cores : null,
    defaultMemoryMib: batch.pair_limit_defaults?.memory_mib ?? FALLBACK_MEMORY_MIB,
  });
  return found;
}
