import { describe, expect, it } from 'vitest';
import { decideDispatch, largestPeakMib, workersAllowed } from '../../../src/core/dispatch-policy.js';
import type { CapacityConfig, DispatchDecision, DispatchState } from '../../../src/core/dispatch-policy.js';

/** The capacity of the SPEC §3 manifest example: 0.9 × 81559 = 73403.1 MiB usable. */
const SPEC_GPU = { gpuTotalMib: 81559, gpuBaselineMib: 1200, gpuFraction: 0.9 } as const;
const TWO: CapacityConfig = { maxWorkers: 2, ...SPEC_GPU };
const JOBS = ['p1', 'p2', 'p3', 'p4'] as const;

const state = (over: Partial<DispatchState> = {}): DispatchState => ({
  jobIds: JOBS,
  claimed: new Set(),
  running: 0,
  finishedCount: 0,
  gpuPeaksMib: [],
  capacity: TWO,
  paused: false,
  stopping: false,
  registryRefused: false,
  ...over,
});

describe('workersAllowed: worked examples with the SPEC numbers', () => {
  it.each([
    [36000, 2], // 1200 + 72000 = 73200 <= 73403.1
    [36100, 2], // 1200 + 72200 = 73400 <= 73403.1
    [36101, 2], // 73402 <= 73403.1
    [36102, 1], // 73404 >  73403.1
    [40000, 1],
  ])('peak %i MiB → %i workers', (peakMib, expected) => {
    expect(workersAllowed(TWO, [peakMib], 1)).toBe(expected);
  });

  it('allows equality with the budget', () => {
    expect(
      workersAllowed(
        { maxWorkers: 2, gpuTotalMib: 100_000, gpuBaselineMib: 0, gpuFraction: 0.5 },
        [25_000],
        1,
      ),
    ).toBe(2);
    expect(
      workersAllowed(
        { maxWorkers: 2, gpuTotalMib: 100_000, gpuBaselineMib: 1, gpuFraction: 0.5 },
        [25_000],
        1,
      ),
    ).toBe(1);
  });

  it('uses the largest peak seen', () => {
    expect(workersAllowed(TWO, [1000, 36000, 500], 3)).toBe(2);
    expect(workersAllowed(TWO, [1000, 40000, 500], 3)).toBe(1);
  });

  it('stays serial without an observation, however many pairs succeeded', () => {
    expect(workersAllowed(TWO, [], 500)).toBe(1);
  });

  it.each([[Number.NaN], [Number.POSITIVE_INFINITY], [Number.NEGATIVE_INFINITY], [0], [-1]])(
    'ignores the unusable peak %d',
    (bad) => {
      expect(workersAllowed(TWO, [bad], 1)).toBe(1);
      expect(workersAllowed(TWO, [bad, 36000], 1)).toBe(2);
      expect(largestPeakMib([bad])).toBeNull();
    },
  );

  it('keeps the first pair alone whatever was observed', () => {
    expect(workersAllowed(TWO, [100], 0)).toBe(1);
  });

  it.each([
    ['max_workers 1', { maxWorkers: 1, ...SPEC_GPU }],
    ['no GPU fields', { maxWorkers: 2 }],
    ['no total', { maxWorkers: 2, gpuBaselineMib: 1200, gpuFraction: 0.9 }],
    ['no baseline', { maxWorkers: 2, gpuTotalMib: 81559, gpuFraction: 0.9 }],
    ['no fraction', { maxWorkers: 2, gpuTotalMib: 81559, gpuBaselineMib: 1200 }],
    ['NaN total', { ...TWO, gpuTotalMib: Number.NaN }],
    ['infinite total', { ...TWO, gpuTotalMib: Number.POSITIVE_INFINITY }],
    ['negative baseline', { ...TWO, gpuBaselineMib: -100_000 }],
    ['fraction above 1', { ...TWO, gpuFraction: 5 }],
  ] satisfies [string, CapacityConfig][])('stays serial with %s', (_name, capacity) => {
    expect(workersAllowed(capacity, [100], 1)).toBe(1);
  });
});

describe('decideDispatch: worked examples', () => {
  it('dispatches the first unclaimed pair in manifest order', () => {
    expect(decideDispatch(state({ claimed: new Set(['p1', 'p3']), finishedCount: 2 }))).toEqual({
      kind: 'dispatch',
      jobId: 'p2',
      workersAllowed: 1,
    });
  });

  it('runs the first pair alone even when two workers would fit', () => {
    const s = state({ claimed: new Set(['p1']), running: 1, gpuPeaksMib: [100] });
    expect(decideDispatch(s)).toEqual({ kind: 'wait', reason: 'first_pair_alone', workersAllowed: 1 });
  });

  it('starts a second worker once a measured pair fits, and waits at two', () => {
    const base = { claimed: new Set(['p1', 'p2']), finishedCount: 1, gpuPeaksMib: [36000] };
    expect(decideDispatch(state({ ...base, running: 1 }))).toEqual({
      kind: 'dispatch',
      jobId: 'p3',
      workersAllowed: 2,
    });
    expect(decideDispatch(state({ ...base, running: 2 }))).toEqual({
      kind: 'wait',
      reason: 'at_capacity',
      workersAllowed: 2,
    });
    expect(decideDispatch(state({ ...base, running: 1, gpuPeaksMib: [36102] }))).toEqual({
      kind: 'wait',
      reason: 'at_capacity',
      workersAllowed: 1,
    });
  });

  it.each([
    ['paused', { paused: true }],
    ['stopping', { stopping: true }],
    ['registry_refused', { registryRefused: true }],
  ] as const)('waits while %s', (reason, over) => {
    expect(decideDispatch(state({ finishedCount: 1, ...over }))).toEqual({
      kind: 'wait',
      reason,
      workersAllowed: 1,
    });
  });

  it('reports drained and idle when nothing is pending, even while paused', () => {
    const all = new Set(JOBS);
    expect(decideDispatch(state({ claimed: all, paused: true }))).toEqual({ kind: 'drained' });
    expect(decideDispatch(state({ claimed: all, running: 1, stopping: true }))).toEqual({
      kind: 'idle',
      reason: 'no_pending',
    });
  });
});

const PEAKS: readonly (readonly number[])[] = [
  [],
  [Number.NaN],
  [Number.POSITIVE_INFINITY],
  [0],
  [-1],
  [36000],
  [36102],
  [Number.NaN, 36000],
  [36000, 36102],
  [-1, 0, 100],
];
const CAPACITIES: readonly CapacityConfig[] = [
  { maxWorkers: 1, ...SPEC_GPU },
  TWO,
  { maxWorkers: 1 },
  { maxWorkers: 2 },
];
const CLAIMED_SETS: readonly ReadonlySet<string>[] = Array.from(
  { length: 2 ** JOBS.length },
  (_, mask) => new Set(JOBS.filter((_j, i) => (mask >> i) & 1)),
);

function expectedAllowed(s: DispatchState): 1 | 2 {
  const usable = s.gpuPeaksMib.filter((p) => Number.isFinite(p) && p > 0);
  const gpu = s.capacity.gpuTotalMib !== undefined;
  const fits = usable.length > 0 && 1200 + 2 * Math.max(...usable) <= 0.9 * 81559;
  return s.capacity.maxWorkers === 2 && s.finishedCount > 0 && gpu && fits ? 2 : 1;
}

/** Invariants every decision must keep; returns the broken ones. */
function broken(s: DispatchState, d: DispatchDecision): string[] {
  const pending = s.jobIds.filter((id) => !s.claimed.has(id));
  const allowed = expectedAllowed(s);
  const out: string[] = [];
  if (pending.length === 0) {
    if (d.kind !== (s.running > 0 ? 'idle' : 'drained')) out.push('drained/idle');
    return out;
  }
  if (d.kind === 'drained' || d.kind === 'idle') return ['drained/idle with pending pairs'];
  if (d.workersAllowed !== allowed) out.push(`workersAllowed ${d.workersAllowed} != ${allowed}`);
  const blocked =
    s.stopping ||
    s.paused ||
    s.registryRefused ||
    s.running >= allowed ||
    (s.finishedCount === 0 && s.running > 0);
  if (d.kind === 'dispatch') {
    if (s.claimed.has(d.jobId)) out.push('dispatched a claimed pair');
    if (d.jobId !== pending[0]) out.push('out of manifest order');
    if (s.running + 1 > d.workersAllowed) out.push('over workersAllowed');
    if (s.finishedCount === 0 && s.running > 0) out.push('first pair not alone');
    if (blocked) out.push('dispatched while blocked');
  } else {
    if (!blocked) out.push(`needless wait (${d.reason})`);
    if (s.stopping && d.reason !== 'stopping') out.push('stopping not reported');
    if (!s.stopping && s.paused && d.reason !== 'paused') out.push('paused not reported');
    if (d.reason === 'at_capacity' && s.running < d.workersAllowed) out.push('at_capacity below capacity');
  }
  return out;
}

describe('decideDispatch: generated grid of states', () => {
  it('keeps every invariant', () => {
    const failures: string[] = [];
    let cases = 0;
    for (const claimed of CLAIMED_SETS)
      for (const running of [0, 1, 2])
        for (const finishedCount of [0, 1, 5])
          for (const gpuPeaksMib of PEAKS)
            for (const capacity of CAPACITIES)
              for (const flags of [0, 1, 2, 3, 4, 5, 6, 7]) {
                const s = state({
                  claimed,
                  running,
                  finishedCount,
                  gpuPeaksMib,
                  capacity,
                  paused: (flags & 1) === 1,
                  stopping: (flags & 2) === 2,
                  registryRefused: (flags & 4) === 4,
                });
                cases += 1;
                const problems = broken(s, decideDispatch(s));
                if (problems.length > 0 && failures.length < 20)
                  failures.push(`${JSON.stringify({ ...s, claimed: [...claimed] })}: ${problems.join('; ')}`);
              }
    expect(failures).toEqual([]);
    expect(cases).toBe(16 * 3 * 3 * PEAKS.length * CAPACITIES.length * 8);
  });

  it('runs a whole simulated batch once each, in order, never above the allowed workers', () => {
    const jobIds = Array.from({ length: 12 }, (_, i) => `pair-${String(i).padStart(2, '0')}`);
    const claimed = new Set<string>();
    const inFlight: string[] = [];
    const dispatched: string[] = [];
    const peaks: number[] = [];
    let finishedCount = 0;
    let maxConcurrent = 0;
    for (let step = 0; step < 100; step += 1) {
      const d = decideDispatch(
        state({ jobIds, claimed, running: inFlight.length, finishedCount, gpuPeaksMib: peaks }),
      );
      if (d.kind === 'drained') break;
      if (d.kind === 'dispatch') {
        claimed.add(d.jobId);
        inFlight.push(d.jobId);
        dispatched.push(d.jobId);
        maxConcurrent = Math.max(maxConcurrent, inFlight.length);
        if (finishedCount === 0) expect(inFlight).toHaveLength(1);
        continue;
      }
      inFlight.shift();
      finishedCount += 1;
      peaks.push(finishedCount === 1 ? Number.NaN : 30000);
    }
    expect(dispatched).toEqual(jobIds);
    expect(maxConcurrent).toBe(2);
    expect(finishedCount).toBe(jobIds.length);
  });
});
