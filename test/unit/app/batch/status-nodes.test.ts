import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { EvidenceStore } from '../../../../src/app/evidence/evidence-store.js';
import { NodeFileSystem } from '../../../../src/adapters/fs/node-file-system.js';
import { loadBatch, readJobFiles } from '../../../../src/app/batch/batch-context.js';
import { prepareBatch } from '../../../../src/app/batch/start-batch.js';
import { buildStatus } from '../../../../src/app/batch/status.js';
import type { BatchStatus } from '../../../../src/app/batch/status-shapes.js';
import { InvalidInputError } from '../../../../src/core/errors.js';
import type { ExecutorConfig } from '../../../../src/core/executor.js';
import { procHostIdentity } from '../../../../src/adapters/host-identity.js';
import { fakeRuntime } from '../../../support/fakes.js';
import { clockAt } from '../../../support/fake-time.js';

/** A swarm batch (issue 13): batch.json keeps the executor and its nodes; status shows which pair runs where. */
const clock = clockAt(() => new Date('2026-12-03T10:00:30Z'));
const SWARM: ExecutorConfig = {
  kind: 'swarm',
  manager: 'unix:///m.sock',
  node_engines: { 'gpu-1': 'unix:///n1.sock', 'gpu-2': 'unix:///n2.sock' },
};
const engine = fakeRuntime({
  info: () =>
    Promise.resolve({ id: 'cluster-1', version: '20.10.24', apiVersion: '1.41', runtimes: ['runc'] }),
  imageExists: () => Promise.resolve(true),
  listByLabel: () => Promise.resolve([]),
});
let dir: string;

async function start(gpus: unknown, executor: ExecutorConfig = SWARM): Promise<EvidenceStore> {
  const manifest = {
    schema: 'roboguide.e1.batch/v0.1',
    image: 'roboguide/pair-driver:1',
    jobs: ['a', 'b', 'c'].map((id) => ({
      job_id: id,
      argv: ['/opt/driver/run'],
      cwd: join(dir, 'cwd'),
      outcome_path: join(dir, 'out', `${id}.json`),
      gpus,
    })),
  };
  await writeFile(join(dir, 'm.json'), JSON.stringify(manifest));
  const output = join(dir, 'batch');
  await prepareBatch(
    {
      fs: new NodeFileSystem(),
      host: procHostIdentity,
      runtime: engine,
      clock,
      observeGpus: () => Promise.reject(new Error("a swarm batch must not observe this host's GPUs")),
      swarmNodes: () =>
        Promise.resolve([
          { node: 'gpu-1', id: 'id-gpu-1', gpus: 2 },
          { node: 'gpu-2', id: 'id-gpu-2', gpus: 2 },
        ]),
    },
    {
      manifestPath: join(dir, 'm.json'),
      output,
      registryPath: join(dir, 'r.db'),
      bindAddress: '127.0.0.1',
      environment: {},
      codeVersion: 't',
      executor,
    },
  );
  return new EvidenceStore(new NodeFileSystem(), output);
}

async function status(store: EvidenceStore, running: BatchStatus['running']): Promise<BatchStatus> {
  const { batch, manifest } = await loadBatch(store);
  return buildStatus({
    store,
    batch,
    manifest,
    files: await readJobFiles(store, manifest),
    journal: await store.readJournal(),
    now: clock.now(),
    supervisorAlive: true,
    running,
  });
}

describe('swarm batch: batch.json and status nodes', () => {
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'rg-status-nodes-'));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('records the executor, its nodes and slots; no host GPU observation', async () => {
    const store = await start(1);
    const batch = JSON.parse(await readFile(join(store.root, 'batch.json'), 'utf8')) as Record<
      string,
      unknown
    >;
    expect(batch).toMatchObject({
      executor: SWARM,
      executor_slots: 4,
      executor_nodes: [
        { node: 'gpu-1', id: 'id-gpu-1', gpus: 2 },
        { node: 'gpu-2', id: 'id-gpu-2', gpus: 2 },
      ],
      gpu_observation: null,
    });
  });

  it('shows which node runs each pair and per-node GPUs in use (text view fields and --json alike)', async () => {
    const store = await start(1);
    await store.appendJournal({
      type: 'pair_placed',
      at: '2026-12-03T10:00:10Z',
      job_id: 'b',
      node: 'gpu-2',
    });
    const pair = (job: string) => ({
      job_id: job,
      container_id: `svc-${job}`,
      started_at: '2026-12-03T10:00:00Z',
      deadline: '2026-12-03T20:00:00Z',
    });
    const s = await status(store, [{ ...pair('a'), node: 'gpu-1' }, pair('b'), pair('c')]);
    expect(s.running.map((r) => [r.job_id, r.node])).toEqual([
      ['a', 'gpu-1'],
      ['b', 'gpu-2'],
      ['c', undefined],
    ]);
    expect(s.nodes).toEqual([
      { node: 'gpu-1', running: ['a'], gpus_total: 2, gpus_in_use: 1 },
      { node: 'gpu-2', running: ['b'], gpus_total: 2, gpus_in_use: 1 },
    ]);
  });

  it('a local batch has no nodes in its status (its shape is unchanged)', async () => {
    const store = await start(undefined, { kind: 'local' });
    const batch = JSON.parse(await readFile(join(store.root, 'batch.json'), 'utf8')) as Record<
      string,
      unknown
    >;
    expect(batch).not.toHaveProperty('executor');
    expect(await status(store, [])).not.toHaveProperty('nodes');
  });

  it('refuses gpus "all" for a swarm batch, naming the job, before anything is written', async () => {
    await expect(start('all')).rejects.toBeInstanceOf(InvalidInputError);
    // Printed once for the three jobs (issue 40); the error's issues keep each job's path.
    await expect(start('all')).rejects.toThrow(/jobs\[\*\]\.gpus: must be a GPU count .*\(3 jobs: a, b, c\)/);
    await expect(start('all')).rejects.toMatchObject({
      issues: expect.arrayContaining([expect.objectContaining({ path: 'jobs[0].gpus' })]),
    });
    await expect(readFile(join(dir, 'batch', 'batch.json'))).rejects.toMatchObject({ code: 'ENOENT' });
  });
});
