import { describe, expect, it } from 'vitest';
import {
  decideAdmission,
  expectedGpuMib,
  fitsSomeBudget,
  nodesInTurn,
  pinnedPlacement,
  reservedPorts,
  type AdmissionFacts,
} from '../../../src/core/admission-rule.js';

const ask = { batchId: 'b', jobId: 'j', gpuMib: 400 };
const facts = (over: Partial<AdmissionFacts> = {}): AdmissionFacts => ({
  existing: null,
  node: 'n1',
  budget: { maxReservations: 2, gpuMib: 1_000 },
  held: { count: 1, gpuMib: 500 },
  portHolders: [],
  ...over,
});

describe('decideAdmission (the one admission rule)', () => {
  it('admits a request that fits the slots, the GPU budget and the ports', () => {
    expect(decideAdmission(ask, facts())).toEqual({ kind: 'admit' });
    expect(decideAdmission(ask, facts({ budget: { maxReservations: 2, gpuMib: null } }))).toEqual({
      kind: 'admit',
    });
  });

  it('the same claim again is the same admission; a claim of another run is taken', () => {
    const existing = { id: 'r1', batchId: 'b', jobId: 'j' };
    expect(decideAdmission(ask, facts({ existing, held: { count: 9, gpuMib: 9_999 } }))).toEqual({
      kind: 'already_admitted',
      reservationId: 'r1',
    });
    expect(decideAdmission(ask, facts({ existing: { ...existing, jobId: 'other' } }))).toEqual({
      kind: 'claim_taken',
      batchId: 'b',
      jobId: 'other',
    });
  });

  it('refuses in order: slots, then GPU budget (the request not counted in held), then the lowest held port', () => {
    const holders = [
      { port: 9000, batchId: 'x' },
      { port: 8000, batchId: 'y' },
    ];
    expect(decideAdmission(ask, facts({ held: { count: 2, gpuMib: 900 }, portHolders: holders }))).toEqual({
      kind: 'refused',
      reason: 'host_full',
      held: 2,
      limit: 2,
      node: 'n1',
    });
    expect(decideAdmission(ask, facts({ held: { count: 1, gpuMib: 601 }, portHolders: holders }))).toEqual({
      kind: 'refused',
      reason: 'gpu_budget',
      held: 601,
      limit: 1_000,
      node: 'n1',
    });
    expect(decideAdmission(ask, facts({ held: { count: 1, gpuMib: 600 } }))).toEqual({ kind: 'admit' });
    expect(decideAdmission(ask, facts({ portHolders: holders }))).toEqual({
      kind: 'refused',
      reason: 'port_held',
      held: 1,
      limit: 1,
      node: 'n1',
      port: 8000,
      holderBatchId: 'y',
    });
  });
});

describe('the rule around it', () => {
  it('expectedGpuMib: none without GPUs, else the largest usable peak rounded up, else the declared figure', () => {
    expect(expectedGpuMib({}, [900])).toBe(0);
    expect(expectedGpuMib({ gpus: 1 }, [300.2, Number.NaN, -5, Infinity])).toBe(301);
    expect(expectedGpuMib({ gpu_mib: 700 }, [])).toBe(700);
    expect(expectedGpuMib({ gpus: 1 }, [0])).toBe(0);
  });

  it('nodesInTurn: the nodes not down, starting `turn` places along', () => {
    expect(nodesInTurn(['a', 'b', 'c'], new Set(['b']), 0)).toEqual(['a', 'c']);
    expect(nodesInTurn(['a', 'b', 'c'], new Set(['b']), 3)).toEqual(['c', 'a']);
    expect(nodesInTurn(['a'], new Set(['a']), 1)).toEqual([]);
  });

  it('ports once each, ascending; a placement pinned to its node; a figure fits a budget or no budget', () => {
    expect(reservedPorts([9000, 80, 9000])).toEqual([80, 9000]);
    expect(reservedPorts(undefined)).toEqual([]);
    expect(pinnedPlacement(['node.labels.gpu==1'], 'n2')).toEqual([
      'node.labels.gpu==1',
      'node.hostname==n2',
    ]);
    expect(pinnedPlacement(undefined, null)).toBeUndefined();
    expect(fitsSomeBudget(1_500, [1_000, null])).toBe(true);
    expect(fitsSomeBudget(1_500, [1_000, 1_200])).toBe(false);
  });
});
