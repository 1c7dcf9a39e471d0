import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SqliteCapacityRegistry } from '../../../../src/adapters/registry/sqlite-capacity-registry.js';
import { declareNodeDown, nodesDown, type NodeDownDeps } from '../../../../src/app/batch/node-down.js';
import { NODES_DOWN_FILE } from '../../../../src/core/evidence-names.js';
import { InvalidInputError } from '../../../../src/core/errors.js';
import type { ExecutorConfig } from '../../../../src/core/executor.js';
import { claimJob, finishJob, startTestBatch, type TestBatch } from '../../../support/batch-dir.js';
import { steppingClock } from '../../../support/finished-pair.js';
import { fileOutcomeReader } from '../../../../src/adapters/outcome-reader.js';
import { fakeLogger } from '../../../support/fakes.js';
import { fakeRuntime } from '../../../support/fakes.js';
import { clockAt } from '../../../support/fake-time.js';

const SWARM: ExecutorConfig = {
  kind: 'swarm',
  manager: 'unix:///m.sock',
  node_engines: { 'gpu-1': 'unix:///n1.sock', 'gpu-2': 'unix:///n2.sock' },
};
const silent = fakeLogger();

let dir: string;
let batch: TestBatch;
let registry: SqliteCapacityRegistry;
let runtimes: string[][];
/** Containers the engine of the batch still shows (none: every container is gone). */
let inspected: string[];

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-node-down-'));
  registry = SqliteCapacityRegistry.open({ path: join(dir, 'registry.db'), clock: steppingClock() });
  await registry.setLimits({ maxReservations: 10, gpuMib: null });
  runtimes = [];
  inspected = [];
});
afterEach(async () => {
  registry.closeSync();
  await rm(dir, { recursive: true, force: true });
});

function deps(): NodeDownDeps {
  return {
    store: batch.store,
    registry,
    clock: clockAt(() => new Date('2026-12-02T12:00:00Z')),
    logger: silent,
    outcomes: fileOutcomeReader,
    runtimeFor: (downNodes) => {
      runtimes.push([...downNodes]);
      // The swarm runtime that counts the down nodes' containers gone: every one answers 404.
      return fakeRuntime({
        listByLabel: () => Promise.resolve([]),
        inspect: (id) => {
          inspected.push(id);
          return Promise.resolve(null);
        },
      });
    },
  };
}

/** A claimed, finished pair whose slot is held; `lost`: its node was lost while it ran (removal never verified). */
async function pair(jobId: string, lost: boolean): Promise<void> {
  const claimId = `claim-${jobId}`;
  const admitted = await registry.admit({ batchId: batch.batchId, jobId, claimId, gpuMib: 0, node: 'gpu-1' });
  if (admitted.kind !== 'admitted') throw new Error('test set-up: not admitted');
  await registry.attachContainer(admitted.reservationId, `c-${jobId}`);
  const receipt = await claimJob(batch, jobId, claimId, { reservation_id: admitted.reservationId });
  await finishJob(
    batch,
    receipt,
    lost
      ? {
          classification: 'infrastructure_failure',
          reasons: ['node_lost'],
          container: { id: `c-${jobId}`, exit_code: null, timed_out: false, oom_killed: false },
          cleanup: { removed: false, verified_absent: false, attempts: 0 },
        }
      : {},
  );
}

describe('declareNodeDown (`e1-batch node-down`)', () => {
  it('refuses a local batch: it has no nodes (nothing recorded)', async () => {
    batch = await startTestBatch(dir);
    const err: unknown = await declareNodeDown(deps(), 'gpu-1').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidInputError);
    expect((err as InvalidInputError).issues).toEqual([
      { path: '--output', rule: 'the batch runs on the local executor: it has no nodes' },
    ]);
    expect(await batch.store.exists(NODES_DOWN_FILE)).toBe(false);
  });

  it('refuses a node the batch does not know, naming the ones it does', async () => {
    batch = await startTestBatch(dir, { executor: SWARM });
    const err = (await declareNodeDown(deps(), 'gpu-7').catch((e: unknown) => e)) as InvalidInputError;
    expect(err.issues).toEqual([{ path: '--node', rule: "must be one of the batch's nodes: gpu-1, gpu-2" }]);
    expect(await nodesDown(batch.store)).toEqual([]);
  });

  it('records the node, then releases the held slots of the pairs lost with it (and only those); idempotent', async () => {
    batch = await startTestBatch(dir, { jobs: ['a', 'b', 'c'], executor: SWARM });
    await pair('a', true);
    await pair('b', false); // completed and verified gone: not this command's business
    const report = await declareNodeDown(deps(), 'gpu-1');
    expect(report).toEqual({ node: 'gpu-1', held: ['a'], released: ['a'] });
    expect(await nodesDown(batch.store)).toEqual(['gpu-1']);
    expect(await batch.store.readJson(NODES_DOWN_FILE)).toEqual({
      schema: 'roboguide.e1.nodes_down/v1',
      nodes: [{ node: 'gpu-1', declared_at: '2026-12-02T12:00:00.000Z' }],
    });
    expect((await registry.reservationForClaim('claim-a'))?.state).toBe('released');
    expect((await registry.reservationForClaim('claim-b'))?.state).toBe('held');
    expect(inspected).toContain('c-a');
    expect(runtimes).toEqual([['gpu-1']]);

    const again = await declareNodeDown(deps(), 'gpu-1');
    expect(again).toEqual({ node: 'gpu-1', held: [], released: [] });
    expect(await nodesDown(batch.store)).toEqual(['gpu-1']);
  });

  it('takes a node by its swarm id too, recorded by hostname (what admission and the pullers match)', async () => {
    batch = await startTestBatch(dir, { executor: SWARM });
    const report = await declareNodeDown(deps(), 'id-gpu-2');
    expect(report.node).toBe('gpu-2');
    expect(await nodesDown(batch.store)).toEqual(['gpu-2']);
    expect(runtimes).toEqual([['gpu-2']]);
  });

  it('a second node joins the first in nodes-down.json, and the runtime counts both gone', async () => {
    batch = await startTestBatch(dir, { executor: SWARM });
    await declareNodeDown(deps(), 'gpu-2');
    await declareNodeDown(deps(), 'gpu-1');
    expect(await nodesDown(batch.store)).toEqual(['gpu-2', 'gpu-1']);
    expect(runtimes).toEqual([['gpu-2'], ['gpu-2', 'gpu-1']]);
  });
});
