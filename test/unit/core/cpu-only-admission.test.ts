import { describe, expect, it } from 'vitest';
import {
  cpuOnlyBudget,
  cpuOnlyNote,
  declaresNoGpus,
  fitsBeside,
} from '../../../src/core/cpu-only-admission.js';
import { decideDispatch, workersAllowed } from '../../../src/core/dispatch-policy.js';
import type { CapacityConfig, DispatchState } from '../../../src/core/dispatch-policy.js';
import { gpuCheck } from '../../../src/app/doctor/facts-checks.js';
import { capacityConfigOf } from '../../../src/app/batch/capacity-config.js';
import { MANIFEST_SCHEMA_ID } from '../../../src/core/manifest/constants.js';
import { parseManifest } from '../../../src/core/manifest/parse.js';

const GIB = 1024 ** 3;
const JOBS = ['a', 'b', 'c'] as const;

/** A 16 GiB, 4-CPU host: 16 GiB less the 1.6 GiB reserve = 14745 MiB for the pairs. */
function budgetOf(jobs: { job_id: string; memory_mib?: number; cpus?: number; gpu_mib?: number }[]) {
  return cpuOnlyBudget({
    jobs,
    capacity: { gpu_total_mib: undefined },
    hostMemoryBytes: 16 * GIB,
    hostCpus: 4,
    defaultMemoryMib: 7372,
  });
}

function cpuOnly(jobs: Parameters<typeof budgetOf>[0], maxWorkers: 1 | 2 = 2): CapacityConfig {
  const found = budgetOf(jobs);
  if (found.kind !== 'cpu_only') throw new Error(`expected a CPU-only budget, got ${found.kind}`);
  return { maxWorkers, cpuOnly: found.budget };
}

const state = (capacity: CapacityConfig, over: Partial<DispatchState> = {}): DispatchState => ({
  jobIds: JOBS,
  claimed: new Set(),
  running: 0,
  finishedCount: 0,
  gpuPeaksMib: [],
  capacity,
  paused: false,
  stopping: false,
  registryRefused: false,
  ...over,
});

describe('a batch that declares no GPUs (issue 40 item 5)', () => {
  it('is CPU-only only when no job asks for GPUs and capacity sets no GPU field', () => {
    expect(declaresNoGpus([{}, {}], { max_workers: 2 } as Record<string, unknown>)).toBe(true);
    expect(declaresNoGpus([{}, { gpus: 'all' }], {})).toBe(false);
    expect(declaresNoGpus([{ gpu_mib: 1 }], {})).toBe(false);
    expect(declaresNoGpus([{}], { gpu_fraction: 0.9 })).toBe(false);
    expect(budgetOf([{ job_id: 'a', gpu_mib: 10 }]).kind).toBe('gpu');
  });

  it('shares the host memory less the supervisor reserve, and its CPUs; unknown memory gives no budget', () => {
    const found = budgetOf([{ job_id: 'a' }, { job_id: 'b', memory_mib: 512, cpus: 1.5 }]);
    expect(found).toEqual({
      kind: 'cpu_only',
      budget: {
        memoryMib: 14745,
        cpus: 4,
        limits: { a: { memoryMib: 7372, cpus: null }, b: { memoryMib: 512, cpus: 1.5 } },
      },
    });
    expect(
      cpuOnlyBudget({ jobs: [], capacity: {}, hostMemoryBytes: null, hostCpus: 4, defaultMemoryMib: 1 }).kind,
    ).toBe('memory_unknown');
  });

  it('starts a second pair beside the first at once: no seed rule, no first pair alone', () => {
    const capacity = cpuOnly([{ job_id: 'a' }, { job_id: 'b' }, { job_id: 'c' }]);
    expect(workersAllowed(capacity, [], 0)).toBe(2);
    const second = decideDispatch(
      state(capacity, { claimed: new Set(['a']), running: 1, inFlight: new Set(['a']) }),
    );
    expect(second).toEqual({ kind: 'dispatch', jobId: 'b', workersAllowed: 2 });
    const third = decideDispatch(
      state(capacity, { claimed: new Set(['a', 'b']), running: 2, inFlight: new Set(['a', 'b']) }),
    );
    expect(third).toEqual({ kind: 'wait', reason: 'at_capacity', workersAllowed: 2 });
  });

  it('waits (host_resources) when the next pair does not fit beside the running one, by memory or by CPU', () => {
    const byMemory = cpuOnly([
      { job_id: 'a', memory_mib: 10_000 },
      { job_id: 'b', memory_mib: 5_000 },
      { job_id: 'c' },
    ]);
    expect(
      decideDispatch(state(byMemory, { claimed: new Set(['a']), running: 1, inFlight: new Set(['a']) })),
    ).toEqual({ kind: 'wait', reason: 'host_resources', workersAllowed: 2 });
    const byCpu = cpuOnly([
      { job_id: 'a', memory_mib: 100, cpus: 3 },
      { job_id: 'b', memory_mib: 100, cpus: 2 },
      { job_id: 'c' },
    ]);
    expect(
      decideDispatch(state(byCpu, { claimed: new Set(['a']), running: 1, inFlight: new Set(['a']) })),
    ).toMatchObject({ kind: 'wait', reason: 'host_resources' });
    // Exactly the budget fits; a pair alone always runs, however large.
    const exact = cpuOnly([
      { job_id: 'a', memory_mib: 14_000, cpus: 2 },
      { job_id: 'b', memory_mib: 745, cpus: 2 },
    ]);
    expect(fitsBeside(exact.cpuOnly!, ['a'], 'b')).toBe(true);
    expect(fitsBeside(cpuOnly([{ job_id: 'a', memory_mib: 99_999 }]).cpuOnly!, [], 'a')).toBe(true);
  });

  it('max_workers 1 stays serial', () => {
    const capacity = cpuOnly([{ job_id: 'a' }, { job_id: 'b' }], 1);
    expect(
      decideDispatch(state(capacity, { claimed: new Set(['a']), running: 1, inFlight: new Set(['a']) })),
    ).toEqual({ kind: 'wait', reason: 'at_capacity', workersAllowed: 1 });
  });

  it('leaves the GPU seed rule exactly as it was for a GPU batch', () => {
    const gpu: CapacityConfig = { maxWorkers: 2, gpuTotalMib: 81559, gpuBaselineMib: 1200, gpuFraction: 0.9 };
    expect(
      decideDispatch(state(gpu, { claimed: new Set(['a']), running: 1, inFlight: new Set(['a']) })),
    ).toEqual({
      kind: 'wait',
      reason: 'first_pair_alone',
      workersAllowed: 1,
    });
    expect(workersAllowed(gpu, [], 1)).toBe(1);
    expect(workersAllowed(gpu, [36000], 1)).toBe(2);
  });

  it('says the rule in force', () => {
    expect(cpuOnlyNote(cpuOnly([{ job_id: 'a' }]).cpuOnly!, 2)).toBe(
      'admission: CPU-only, by memory and CPU (2 workers; pairs at once within 14745 MiB and 4 CPUs)',
    );
  });
});

describe('doctor on a host without nvidia-smi', () => {
  it('no longer says CPU-only jobs are unaffected: it says what a batch without GPUs gets', () => {
    const check = gpuCheck(
      { kind: 'unobservable', reason: 'nvidia_smi_missing', detail: 'no nvidia-smi' } as never,
      {
        kind: 'unknown',
        reason: 'test',
      },
    );
    const words = JSON.stringify(check);
    expect(words).not.toContain('CPU-only jobs are unaffected');
    expect(words).toContain('a batch that declares no GPUs');
    expect(words).toContain('by memory and CPU');
  });
});

describe('capacityConfigOf: the batch as start recorded it', () => {
  const manifestOf = (capacity: Record<string, unknown>) => {
    const parsed = parseManifest(
      JSON.stringify({
        schema: MANIFEST_SCHEMA_ID,
        image: 'pair-driver:1',
        jobs: [{ job_id: 'a', argv: ['x'], cwd: '/w', outcome_path: '/o/a.json', memory_mib: 512 }],
        capacity,
      }),
    );
    if (!parsed.ok) throw new Error('manifest');
    return parsed.manifest;
  };
  const host = {
    memory: { kind: 'known', total_bytes: 16 * GIB, available_bytes: 8 * GIB },
    cpu: { kind: 'known', model: 'x', cores: 2, physical_cores: 2 },
  };

  it('a CPU-only manifest on a recorded host: the memory-and-CPU budget, even on an unobservable GPU host', () => {
    const batch = { host, gpu_observation: { observation: { kind: 'unobservable' } } } as never;
    const c = capacityConfigOf(manifestOf({ max_workers: 2 }), batch);
    expect(c.maxWorkers).toBe(2);
    expect(c.cpuOnly).toEqual({ memoryMib: 14745, cpus: 2, limits: { a: { memoryMib: 512, cpus: null } } });
  });

  it('host memory not recorded: serial, and the note says why (not a missing gpu_total_mib)', () => {
    const c = capacityConfigOf(manifestOf({ max_workers: 2 }), {} as never);
    expect(c.cpuOnly).toBeUndefined();
    expect(c.cpuOnlyMemoryUnknown).toBe(true);
    expect(workersAllowed(c, [], 3)).toBe(1);
  });

  it('a GPU manifest: no CPU-only budget', () => {
    const c = capacityConfigOf(
      manifestOf({ max_workers: 2, gpu_total_mib: 1000, gpu_baseline_mib: 0, gpu_fraction: 0.9 }),
      { host } as never,
    );
    expect(c.cpuOnly).toBeUndefined();
    expect(c.cpuOnlyMemoryUnknown).toBeUndefined();
  });
});
