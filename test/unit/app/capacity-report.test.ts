import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SqliteCapacityRegistry } from '../../../src/adapters/registry/sqlite-capacity-registry.js';
import { readCapacity, type CapacityDeps } from '../../../src/app/capacity-report.js';
import type { GpuObservation } from '../../../src/core/gpu/nvidia-smi-parse.js';
import { steppingClock } from '../../support/finished-pair.js';

let dir: string;
let registry: SqliteCapacityRegistry;
const GPU: GpuObservation = {
  kind: 'unobservable',
  reason: 'binary_missing',
  detail: 'nvidia-smi not found',
};

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-capacity-'));
  registry = SqliteCapacityRegistry.open({
    path: join(dir, 'registry.db'),
    clock: steppingClock(),
    localNode: 'here',
  });
});
afterEach(async () => {
  registry.closeSync();
  await rm(dir, { recursive: true, force: true });
});

function deps(): CapacityDeps {
  return { registry, observeGpus: () => Promise.resolve(GPU) };
}

async function admit(
  batchId: string,
  jobId: string,
  node: string,
  gpuMib: number,
  ports: number[] = [],
): Promise<void> {
  const r = await registry.admit({ batchId, jobId, claimId: `${batchId}-${jobId}`, gpuMib, node, ports });
  expect(r.kind).toBe('admitted');
}

describe('readCapacity (`capacity`)', () => {
  it('an empty registry: the default limits, this host as the only node, nothing held, the GPU observation', async () => {
    const view = await readCapacity(deps(), {});
    expect(view).toEqual({
      limits: { maxReservations: 2, gpuMib: null },
      local_node: 'here',
      nodes: [
        {
          node: 'here',
          limits: { maxReservations: 2, gpuMib: null },
          own_limits: false,
          held: 0,
          held_gpu_mib: 0,
          held_ports: [],
        },
      ],
      held: [],
      board: [],
      gpu: GPU,
    });
  });

  it('lists every node that holds something or has its own limits, sorted, with held GPU MiB and ports summed per node', async () => {
    await registry.setLimits({ maxReservations: 5, gpuMib: null });
    await registry.setLimits({ maxReservations: 1, gpuMib: 4096 }, 'gpu-9');
    await admit('b1', 'j1', 'gpu-2', 100, [9002, 9001]);
    await admit('b1', 'j2', 'gpu-2', 28, [8000]);
    await admit('b2', 'j1', 'here', 0);
    const view = await readCapacity(deps(), {});
    expect(
      view.nodes.map((n) => [
        n.node,
        n.held,
        n.held_gpu_mib,
        n.held_ports,
        n.own_limits,
        n.limits.maxReservations,
      ]),
    ).toEqual([
      ['gpu-2', 2, 128, [8000, 9001, 9002], false, 5],
      ['gpu-9', 0, 0, [], true, 1],
      ['here', 1, 0, [], false, 5],
    ]);
    expect(view.held).toHaveLength(3);
    expect(view.board).toHaveLength(3);
  });

  it("--batch keeps only that batch's reservations and board rows (the nodes still show everything)", async () => {
    await admit('b1', 'j1', 'here', 0);
    await admit('b2', 'j1', 'here', 0);
    const view = await readCapacity(deps(), { batchId: 'b2' });
    expect(view.held.map((r) => r.batchId)).toEqual(['b2']);
    expect(view.board.map((r) => r.batchId)).toEqual(['b2']);
    expect(view.nodes[0]?.held).toBe(2);
  });

  it('sets the default limits, one field at a time keeping the other', async () => {
    await readCapacity(deps(), { set: { gpuMib: 8192 } });
    expect(await registry.limits()).toEqual({ maxReservations: 2, gpuMib: 8192 });
    const view = await readCapacity(deps(), { set: { maxReservations: 3 } });
    expect(view.limits).toEqual({ maxReservations: 3, gpuMib: 8192 });
    await readCapacity(deps(), { set: { gpuMib: null } });
    expect(await registry.limits()).toEqual({ maxReservations: 3, gpuMib: null });
  });

  it("--node sets that node's own limits (starting from the default) and lists it even when it holds nothing", async () => {
    await registry.setLimits({ maxReservations: 4, gpuMib: 1000 });
    const view = await readCapacity(deps(), { node: 'gpu-7', set: { maxReservations: 1 } });
    expect(view.limits).toEqual({ maxReservations: 4, gpuMib: 1000 });
    expect(view.nodes.find((n) => n.node === 'gpu-7')).toMatchObject({
      own_limits: true,
      limits: { maxReservations: 1, gpuMib: 1000 },
    });
    const read = await readCapacity(deps(), { node: 'gpu-8' });
    expect(read.nodes.find((n) => n.node === 'gpu-8')).toMatchObject({
      own_limits: false,
      limits: { maxReservations: 4, gpuMib: 1000 },
    });
    expect(await registry.nodeLimits()).toEqual([
      { node: 'gpu-7', limits: { maxReservations: 1, gpuMib: 1000 } },
    ]);
  });

  it('an empty `set` changes nothing', async () => {
    await registry.setLimits({ maxReservations: 4, gpuMib: 10 });
    await readCapacity(deps(), { node: 'gpu-7', set: {} });
    expect(await registry.nodeLimits()).toEqual([]);
    expect(await registry.limits()).toEqual({ maxReservations: 4, gpuMib: 10 });
  });
});
