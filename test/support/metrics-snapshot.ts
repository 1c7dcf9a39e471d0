import type { BatchSnapshot, FinishedPair, HostSnapshot } from '../../src/core/metrics/host-snapshot.js';

/** A finished pair as the exporter folds it (every field set: phases, logs). */
export function finishedPair(overrides: Partial<FinishedPair> = {}): FinishedPair {
  return {
    classification: 'completed',
    reasons: [],
    durationSec: 42,
    phasesSec: { create: 0.2, run: 40, drain: 0.1, collect: 0.5, remove: 0.3 },
    logBytes: { stdout: 1000, stderr: 10 },
    outcomeRedactions: 0,
    ...overrides,
  };
}

/** One batch's snapshot with every optional series present (ETA, a pause cause, a recent failure). */
export function batchSnapshot(overrides: Partial<BatchSnapshot> = {}): BatchSnapshot {
  return {
    batchId: 'e1-20261205-aaaaaaaa',
    state: 'running',
    pauseReasons: [],
    pauseCauses: [{ reason: 'registry_unavailable', code: 'E_REGISTRY_UNAVAILABLE' }],
    counts: {
      total: 10,
      pending: 5,
      claimed: 1,
      running: 1,
      completed: 2,
      infrastructure_failure: 1,
      fatal: 0,
      provider_stop: 0,
      harness_failure: 1,
    },
    workersAllowed: 1,
    etaSec: 600,
    supervisor: { up: true, heartbeatAgeSec: 3 },
    recentFailures: [{ jobId: 'j7', classification: 'infrastructure_failure', reason: 'timeout' }],
    containersUnverified: 0,
    finished: [
      finishedPair(),
      finishedPair({ classification: 'infrastructure_failure', reasons: ['timeout'] }),
    ],
    reset: false,
    ...overrides,
  };
}

export function hostSnapshot(overrides: Partial<HostSnapshot> = {}): HostSnapshot {
  return {
    batches: [batchSnapshot()],
    registry: {
      nodes: [{ node: 'gpu-host-1', slotsHeld: 1, slotsLimit: 2, gpuMibHeld: 20_000, gpuMibBudget: 80_000 }],
    },
    unreadable: 0,
    discovered: 1,
    ...overrides,
  };
}
