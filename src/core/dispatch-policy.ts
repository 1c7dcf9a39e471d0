/**
 * The dispatch policy (SPEC §5): a pure function of the journal and the capacity config.
 *
 * - Manifest order: the first unclaimed pair is next; a claimed pair is never dispatched again.
 * - The first pair always runs alone (until one pair has a result).
 * - A second worker only with `maxWorkers == 2` and a GPU observation from a completed pair:
 *   `gpuBaselineMib + 2 * largestPeak <= gpuFraction * gpuTotalMib`. No observation, or GPU
 *   config missing, → serial. Capacity is never inferred from success rates.
 * - Nothing while paused, stopping, or while the registry refuses the reservation.
 * - A CPU-only batch (`capacity.cpuOnly`, issue 40): no seed rule and no first pair alone; up to `maxWorkers` pairs
 *   whose limits fit the host's memory and CPUs together (`src/core/cpu-only-admission.ts`), else it waits.
 */
import { fitsBeside, type CpuOnlyBudget } from './cpu-only-admission.js';

export interface CapacityConfig {
  maxWorkers: 1 | 2;
  /**
   * Swarm executor (issue 13): pairs the swarm can place at once (GPU slots over its nodes). Each pair gets its own
   * GPUs (generic resources), so the one-GPU sharing rule does not apply: after the first pair, this many workers.
   */
  executorSlots?: number;
  gpuTotalMib?: number;
  gpuBaselineMib?: number;
  gpuFraction?: number;
  /** A batch that declares no GPUs: admitted by memory and CPU up to `maxWorkers` (absent: the GPU seed rule). */
  cpuOnly?: CpuOnlyBudget;
  /** A batch that declares no GPUs on a host whose memory was not recorded at start: serial, and said so. */
  cpuOnlyMemoryUnknown?: true;
}

export interface DispatchState {
  /** Manifest order. */
  readonly jobIds: readonly string[];
  /** A receipt exists: never dispatch again. */
  readonly claimed: ReadonlySet<string>;
  /** Pairs in flight. */
  readonly running: number;
  /** Pairs with a result. */
  readonly finishedCount: number;
  /** Observations from completed pairs (already filtered by `gpuObservation`). */
  readonly gpuPeaksMib: readonly number[];
  readonly capacity: CapacityConfig;
  readonly paused: boolean;
  readonly stopping: boolean;
  /** The last reservation attempt was refused and nothing changed since. */
  readonly registryRefused: boolean;
  /** The pairs in flight, by job (a CPU-only batch checks the next pair's limits beside theirs). */
  readonly inFlight?: ReadonlySet<string>;
}

export type WaitReason =
  | 'paused'
  | 'stopping'
  | 'at_capacity'
  | 'first_pair_alone'
  | 'registry_refused'
  /** A CPU-only batch: the next pair's memory or CPU quota does not fit beside the running ones. */
  | 'host_resources';

export type DispatchDecision =
  | { kind: 'dispatch'; jobId: string; workersAllowed: number }
  | { kind: 'wait'; reason: WaitReason; workersAllowed: number }
  /** Nothing left to dispatch and nothing running. */
  | { kind: 'drained' }
  /** Nothing left to dispatch but pairs still running. */
  | { kind: 'idle'; reason: 'no_pending' };

/** The largest usable peak: finite and positive; NaN, Infinity, zero and negatives are ignored. */
export function largestPeakMib(gpuPeaksMib: readonly number[]): number | null {
  const usable = gpuPeaksMib.filter((p) => Number.isFinite(p) && p > 0);
  return usable.length === 0 ? null : Math.max(...usable);
}

interface GpuBudget {
  readonly totalMib: number;
  readonly baselineMib: number;
  readonly fraction: number;
}

/** The GPU fields, when all are present and sane; otherwise none (→ serial). */
function gpuBudget(capacity: CapacityConfig): GpuBudget | null {
  const { gpuTotalMib: totalMib, gpuBaselineMib: baselineMib, gpuFraction: fraction } = capacity;
  if (totalMib === undefined || baselineMib === undefined || fraction === undefined) return null;
  if (!Number.isFinite(totalMib) || totalMib <= 0) return null;
  if (!Number.isFinite(baselineMib) || baselineMib < 0) return null;
  if (!Number.isFinite(fraction) || fraction <= 0 || fraction > 1) return null;
  return { totalMib, baselineMib, fraction };
}

export function workersAllowed(
  capacity: CapacityConfig,
  gpuPeaksMib: readonly number[],
  finishedCount: number,
): number {
  if (capacity.cpuOnly !== undefined) return capacity.maxWorkers;
  if (finishedCount <= 0) return 1;
  if (capacity.executorSlots !== undefined) return Math.max(1, Math.floor(capacity.executorSlots));
  if (capacity.maxWorkers !== 2) return 1;
  const budget = gpuBudget(capacity);
  const peakMib = largestPeakMib(gpuPeaksMib);
  if (budget === null || peakMib === null) return 1;
  return budget.baselineMib + 2 * peakMib <= budget.fraction * budget.totalMib ? 2 : 1;
}

function waitReason(s: DispatchState, allowed: number, next: string): WaitReason | null {
  if (s.stopping) return 'stopping';
  if (s.paused) return 'paused';
  const cpuOnly = s.capacity.cpuOnly;
  if (cpuOnly === undefined && s.finishedCount <= 0 && s.running >= 1) return 'first_pair_alone';
  if (s.running >= allowed) return 'at_capacity';
  if (cpuOnly !== undefined && s.running > 0 && !fitsBeside(cpuOnly, s.inFlight ?? [], next))
    return 'host_resources';
  if (s.registryRefused) return 'registry_refused';
  return null;
}

export function decideDispatch(s: DispatchState): DispatchDecision {
  const next = s.jobIds.find((id) => !s.claimed.has(id));
  if (next === undefined) return s.running > 0 ? { kind: 'idle', reason: 'no_pending' } : { kind: 'drained' };
  const allowed = workersAllowed(s.capacity, s.gpuPeaksMib, s.finishedCount);
  const reason = waitReason(s, allowed, next);
  if (reason !== null) return { kind: 'wait', reason, workersAllowed: allowed };
  return { kind: 'dispatch', jobId: next, workersAllowed: allowed };
}
