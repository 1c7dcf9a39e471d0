import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { EvidenceStore } from '../../src/app/evidence/evidence-store.js';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { loadBatch, readJobFiles } from '../../src/app/batch/batch-context.js';
import { prepareBatch } from '../../src/app/batch/start-batch.js';
import { buildStatus } from '../../src/app/batch/status.js';
import type { BatchStatus } from '../../src/app/batch/status-shapes.js';
import type { ContainerState, ContainerStatus } from '../../src/app/ports/container-runtime.js';
import { RECEIPT_SCHEMA, type Receipt } from '../../src/core/receipt.js';
import { procHostIdentity } from '../../src/adapters/host-identity.js';
import { answeringEngine } from '../support/fakes.js';
import { clockAt } from '../support/fake-time.js';

/**
 * `status` and the containers of a live supervisor: between create and start, and between exit and removal (or
 * after an engine restart stopped it), a claimed pair's container belongs to the supervisor — running, never a
 * leftover. Without a live supervisor the same container is a leftover for resume to handle.
 */
const clock = clockAt(() => new Date('2026-12-02T10:00:30Z'));
let dir: string;
let store: EvidenceStore;
let batchId: string;
let containers: ContainerState[];

const engine = answeringEngine(
  {},
  {
    listByLabel: (labels) =>
      Promise.resolve(containers.filter((c) => Object.entries(labels).every(([k, v]) => c.labels[k] === v))),
  },
);

function container(id: string, jobId: string, claimId: string, status: ContainerStatus): ContainerState {
  return {
    id,
    status,
    exitCode: null,
    oomKilled: false,
    startedAt: null,
    finishedAt: null,
    labels: { 'roboguide.batch': batchId, 'roboguide.job': jobId, 'roboguide.claim': claimId },
  };
}

async function claim(jobId: string, claimId: string, claimedAt = '2026-12-02T10:00:00.000Z'): Promise<void> {
  const receipt: Receipt = {
    schema: RECEIPT_SCHEMA,
    batch_id: batchId,
    job_id: jobId,
    attempt: 1,
    claim_id: claimId,
    claimed_at: claimedAt,
    host_boot_id: null,
    supervisor: { pid: 1, start_ticks: null, boot_id: null },
    reservation_id: null,
    image: 'roboguide/pair-driver:1',
    outcome_path: join(dir, 'out', `${jobId}.json`),
    source_sha256: {},
    code_version: 't',
    container_id: null,
    container_name: `roboguide-${jobId}`,
  };
  await store.ensureDir(`jobs/${jobId}`);
  await store.publishExclusive(`jobs/${jobId}/receipt.json`, receipt);
}

async function status(supervisorAlive: boolean, running?: BatchStatus['running']): Promise<BatchStatus> {
  const { batch, manifest } = await loadBatch(store);
  return buildStatus({
    store,
    batch,
    manifest,
    files: await readJobFiles(store, manifest),
    journal: await store.readJournal(),
    runtime: engine,
    now: clock.now(),
    supervisorAlive,
    ...(running ? { running } : {}),
  });
}

describe('status: containers owned by the live supervisor', () => {
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'rg-status-own-'));
    containers = [];
    const manifest = {
      schema: 'roboguide.e1.batch/v0.1',
      image: 'roboguide/pair-driver:1',
      jobs: ['a', 'b', 'c'].map((id) => ({
        job_id: id,
        argv: ['/opt/driver/run'],
        cwd: join(dir, 'cwd'),
        outcome_path: join(dir, 'out', `${id}.json`),
        timeout_seconds: 120,
      })),
    };
    await writeFile(join(dir, 'm.json'), JSON.stringify(manifest));
    const output = join(dir, 'batch');
    const record = await prepareBatch(
      { fs: new NodeFileSystem(), host: procHostIdentity, runtime: engine, clock },
      {
        manifestPath: join(dir, 'm.json'),
        output,
        registryPath: join(dir, 'r.db'),
        bindAddress: '127.0.0.1',
        environment: {},
        codeVersion: 't',
      },
    );
    batchId = record.batch_id;
    store = new EvidenceStore(new NodeFileSystem(), output);
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  for (const state of ['created', 'exited', 'running'] as const) {
    it(`a claimed pair's ${state} container is running, not a leftover, while the supervisor lives`, async () => {
      await claim('a', 'claim-a');
      containers = [container('c-a', 'a', 'claim-a', state)];
      const s = await status(true);
      expect(s.leftovers).toEqual([]);
      expect(s.running).toEqual([
        {
          job_id: 'a',
          container_id: 'c-a',
          started_at: '2026-12-02T10:00:00.000Z',
          deadline: '2026-12-02T10:02:00.000Z',
        },
      ]);
      expect(s.counts.running).toBe(1);
    });
  }

  it('a claim whose container does not exist yet is running under a live supervisor', async () => {
    await claim('a', 'claim-a');
    const s = await status(true);
    expect(s.running.map((r) => [r.job_id, r.container_id])).toEqual([['a', null]]);
    expect(s.counts.running).toBe(1);
  });

  it('in the supervisor itself (its own running view), its created container is not a leftover either', async () => {
    await claim('a', 'claim-a');
    containers = [container('c-a', 'a', 'claim-a', 'created')];
    // The handle is in the view before onCreated records the container id.
    const s = await status(true, [
      {
        job_id: 'a',
        container_id: null,
        started_at: '2026-12-02T10:00:00.000Z',
        deadline: '2026-12-02T10:02:00.000Z',
      },
    ]);
    expect(s.leftovers).toEqual([]);
  });

  it('without a live supervisor the exited container of a claim without result is a leftover', async () => {
    await claim('a', 'claim-a');
    containers = [container('c-a', 'a', 'claim-a', 'exited')];
    const s = await status(false);
    expect(s.leftovers).toEqual([
      { container_id: 'c-a', job_id: 'a', status: 'exited', why: 'job_not_running' },
    ]);
    expect(s.running).toEqual([]);
  });

  it('a container whose claim label is not the claim on disk, or whose job is unknown, stays a leftover', async () => {
    await claim('a', 'claim-a');
    containers = [
      container('c-old', 'a', 'claim-old', 'exited'),
      container('c-x', 'zzz', 'claim-x', 'created'),
    ];
    const s = await status(true);
    expect(s.leftovers.map((l) => [l.container_id, l.why])).toEqual([
      ['c-old', 'job_not_running'],
      ['c-x', 'unknown_job'],
    ]);
  });

  it('ETA and deadlines: running pairs carry their deadline; no ETA before the first result', async () => {
    await claim('a', 'claim-a');
    const s = await status(true);
    expect(s.state).toBe('running');
    expect(s.eta).toBeNull();
    expect(s.running[0]!.deadline).toBe('2026-12-02T10:02:00.000Z');
  });
});
