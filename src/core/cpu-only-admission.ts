/**
 * CPU-only admission (issue 40 item 5, docs/spec.md 8.2): a batch that declares no GPUs — no job asks for `gpus` or
 * `gpu_mib`, and `capacity` sets none of `gpu_total_mib`, `gpu_baseline_mib`, `gpu_fraction` — is not held to the
 * GPU seed rule (a second worker only from a measured GPU peak): nothing it runs could ever report one. Its pairs are
 * admitted by memory and CPU instead, up to `capacity.max_workers`: the pairs at once must fit the host's memory less
 * the supervisor's reserve (each pair counted at its memory limit, issue 22) and, for the pairs with a CPU quota, the
 * host's logical CPUs (a pair without a quota takes a fair share and counts for none). Pure: plain facts in, a budget
 * or a decision out.
 */
import { memoryReserveBytes } from './pair-limits.js';

const MIB = 1024 * 1024;

/** One job's limits as admission counts them. */
export interface CpuOnlyJobLimits {
  readonly memoryMib: number;
  /** The CPU quota; null: none (a fair share). */
  readonly cpus: number | null;
}

/** What the pairs of a CPU-only batch share: the host's memory less the reserve, its CPUs, each job's limits. */
export interface CpuOnlyBudget {
  readonly memoryMib: number;
  readonly cpus: number;
  readonly limits: Readonly<Record<string, CpuOnlyJobLimits>>;
}

interface JobGpuFields {
  readonly job_id: string;
  readonly gpus?: unknown;
  readonly gpu_mib?: number | undefined;
  readonly memory_mib?: number | undefined;
  readonly cpus?: number | undefined;
}

interface CapacityGpuFields {
  readonly gpu_total_mib?: number | undefined;
  readonly gpu_baseline_mib?: number | undefined;
  readonly gpu_fraction?: number | undefined;
}

const CAPACITY_GPU_FIELDS = ['gpu_total_mib', 'gpu_baseline_mib', 'gpu_fraction'] as const;

/** Whether a manifest declares no GPUs at all (raw or parsed: only the presence of the fields is read). */
export function declaresNoGpus(
  jobs: readonly Partial<Record<'gpus' | 'gpu_mib', unknown>>[],
  capacity: Partial<Record<(typeof CAPACITY_GPU_FIELDS)[number], unknown>> | undefined,
): boolean {
  if (jobs.some((j) => j.gpus !== undefined || j.gpu_mib !== undefined)) return false;
  return CAPACITY_GPU_FIELDS.every((f) => capacity?.[f] === undefined);
}

/**
 * The budget of a CPU-only batch, or why there is none: a GPU batch (`gpu`), or a host whose memory was not known
 * at start (`memory_unknown`: serial, the pairs' sum cannot be checked). `defaultMemoryMib` is the memory limit of a
 * job that gives none (the batch's recorded defaults).
 */
export function cpuOnlyBudget(input: {
  readonly jobs: readonly JobGpuFields[];
  readonly capacity: CapacityGpuFields;
  readonly hostMemoryBytes: number | null;
  readonly hostCpus: number | null;
  readonly defaultMemoryMib: number;
}):
  | { readonly kind: 'cpu_only'; readonly budget: CpuOnlyBudget }
  | { readonly kind: 'gpu' }
  | { readonly kind: 'memory_unknown' } {
  if (!declaresNoGpus(input.jobs, input.capacity)) return { kind: 'gpu' };
  const total = input.hostMemoryBytes;
  if (total === null || !Number.isFinite(total) || total <= 0) return { kind: 'memory_unknown' };
  const limits: Record<string, CpuOnlyJobLimits> = {};
  for (const j of input.jobs)
    limits[j.job_id] = { memoryMib: j.memory_mib ?? input.defaultMemoryMib, cpus: j.cpus ?? null };
  const cpus = input.hostCpus !== null && input.hostCpus > 0 ? input.hostCpus : 1;
  return {
    kind: 'cpu_only',
    budget: { memoryMib: Math.floor((total - memoryReserveBytes(total)) / MIB), cpus, limits },
  };
}

/**
 * Whether `next` may start beside the pairs `running` (none running: always, a pair larger than the whole budget then
 * runs alone). Unknown jobs count at nothing (they cannot be running pairs of this batch).
 */
export function fitsBeside(budget: CpuOnlyBudget, running: Iterable<string>, next: string): boolean {
  let memoryMib = 0;
  let cpus = 0;
  let count = 0;
  for (const id of [...running, next]) {
    const l = budget.limits[id];
    count += 1;
    if (l === undefined) continue;
    memoryMib += l.memoryMib;
    cpus += l.cpus ?? 0;
  }
  if (count <= 1) return true;
  return memoryMib <= budget.memoryMib && cpus <= budget.cpus;
}

/** Why a batch that declares no GPUs stays serial: its host's memory is not known (status, report). */
export const CPU_ONLY_MEMORY_UNKNOWN_NOTE =
  "admission: CPU-only, but the host's memory was not recorded at start: serial";

/** The rule in force, in words (status, report): `admission: CPU-only, by memory and CPU (N workers)`. */
export function cpuOnlyNote(budget: CpuOnlyBudget, maxWorkers: number): string {
  return `admission: CPU-only, by memory and CPU (${maxWorkers} worker${maxWorkers === 1 ? '' : 's'}; pairs at once within ${budget.memoryMib} MiB and ${budget.cpus} CPUs)`;
}
