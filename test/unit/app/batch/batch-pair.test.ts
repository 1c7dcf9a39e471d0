/**
 * One batch pair (dispatchPair) and what a new supervisor finds (runningSupervisor), with fakes behind the ports:
 * refusals, a claim that already stands, a receipt that cannot be written, a full run whose journal and receipt
 * carry the host identity.
 */
import { isReceipt } from '../../../../src/core/receipt.js';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NodeFileSystem } from '../../../../src/adapters/fs/node-file-system.js';
import { SqliteCapacityRegistry } from '../../../../src/adapters/registry/sqlite-capacity-registry.js';
import {
  dispatchPair,
  type BatchPairContext,
  type BatchPairDeps,
} from '../../../../src/app/batch/batch-pair.js';
import { BATCH_SCHEMA, type BatchRecord } from '../../../../src/app/batch/layout.js';
import { SUPERVISOR_FILE } from '../../../../src/core/evidence-names.js';
import type { SupervisorRecord } from '../../../../src/core/supervisor-record.js';
import { runningSupervisor } from '../../../../src/app/batch/supervisor-liveness.js';
import { EvidenceStore } from '../../../../src/app/evidence/evidence-store.js';
import type { ExecutePairDeps } from '../../../../src/app/pair/execute-pair-types.js';
import type { FileSystem } from '../../../../src/app/ports/file-system.js';
import { parseManifest } from '../../../../src/core/manifest/parse.js';
import type { Manifest } from '../../../../src/core/manifest/schema.js';
import { FakeHost, FakePairRuntime, fakeExecuteDeps, SUPERVISOR } from '../../../support/fake-pair-world.js';
import { FaultyFileSystem } from '../../../support/faulty-file-system.js';

let dir: string;
let registry: SqliteCapacityRegistry;
let runtime: FakePairRuntime;
let journal: { type: string; fields: Record<string, unknown> }[];

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-batch-pair-'));
  registry = SqliteCapacityRegistry.open({ path: join(dir, 'registry.db') });
  runtime = new FakePairRuntime();
  journal = [];
  await mkdir(join(dir, 'D'), { mode: 0o700 });
});
afterEach(async () => {
  await registry.close();
  await rm(dir, { recursive: true, force: true });
});

function manifest(): Manifest {
  const parsed = parseManifest(
    JSON.stringify({
      schema: 'roboguide.e1.batch/v0.1',
      image: 'driver:1',
      jobs: [
        {
          job_id: 'j1',
          argv: ['/run'],
          cwd: join(dir, 'cwd'),
          outcome_path: join(dir, 'out', 'j1.json'),
          timeout_seconds: 60,
        },
      ],
    }),
  );
  if (!parsed.ok) throw new Error(`set-up: ${JSON.stringify(parsed.issues)}`);
  return parsed.manifest;
}

const batch: BatchRecord = {
  schema: BATCH_SCHEMA,
  batch_id: 'e1-test',
  created_at: '2026-12-03T08:00:00.000Z',
  manifest_sha256: 'a'.repeat(64),
  code_version: 'test',
  host_boot_id: SUPERVISOR.boot_id,
  engine: { id: 'fake', version: '0', api_version: '1.43' },
  registry_path: ':memory:',
  bind_address: '127.0.0.1',
  gpu_observation: null,
};

function setUp(
  fs: FileSystem = new NodeFileSystem(),
  executeOverrides: Partial<ExecutePairDeps> = {},
): {
  deps: BatchPairDeps;
  ctx: BatchPairContext;
  store: EvidenceStore;
  m: Manifest;
} {
  const store = new EvidenceStore(fs, join(dir, 'D'));
  const m = manifest();
  const deps: BatchPairDeps = {
    store,
    registry,
    execute: fakeExecuteDeps(runtime, new FakeHost(), executeOverrides),
    journal: (type, fields) => {
      journal.push({ type, fields });
      return Promise.resolve();
    },
  };
  return { deps, ctx: { batch, manifest: m }, store, m };
}

const env = { values: {}, secrets: [], warnings: [] };

describe('dispatchPair', () => {
  it('runs a pair: the receipt carries the host identity, the journal its claim and container, the slot is given back', async () => {
    const { deps, ctx, store, m } = setUp();
    const running: string[] = [];
    const attempt = await dispatchPair(deps, ctx, m.jobs[0]!, env, (h) => running.push(h.jobId));
    expect(attempt.kind).toBe('ran');
    if (attempt.kind !== 'ran') return;
    expect(attempt.finish.released).toBe(true);
    expect(running).toEqual(['j1']);
    const receipt = (await store.readJson('jobs/j1/receipt.json', isReceipt))!;
    expect(receipt.supervisor).toEqual(SUPERVISOR);
    expect(receipt.host_boot_id).toBe(SUPERVISOR.boot_id);
    expect(receipt.container_id).not.toBeNull();
    const claimed = journal.find((e) => e.type === 'claimed')!;
    expect(claimed.fields['claimed_at']).toBe(receipt.claimed_at);
    expect(claimed.fields['deadline']).toBe('2026-12-03T08:01:00.000Z');
    expect(journal.map((e) => e.type)).toContain('container_created');
    expect(await registry.held()).toEqual([]);
  });

  it('the launch mount rules resolve while the claim is written, and the container is created after both (issue 26)', async () => {
    const fs = new FaultyFileSystem(new NodeFileSystem());
    const { deps, ctx, m } = setUp(fs, { fs });
    const attempt = await dispatchPair(deps, ctx, m.jobs[0]!, env, () => undefined);
    expect(attempt.kind).toBe('ran');
    const firstRealpath = fs.calls.findIndex((c) => c.op === 'realpath');
    const claimLinked = fs.calls.findIndex((c) => c.op === 'link' && /receipt\.json$/.test(c.paths[1] ?? ''));
    expect(firstRealpath).toBeGreaterThanOrEqual(0);
    expect(claimLinked).toBeGreaterThanOrEqual(0);
    expect(firstRealpath).toBeLessThan(claimLinked);
    expect(runtime.created).toBe(1);
  });

  it('a claim that fails while the mount rules resolve creates nothing and leaves no stray rejection', async () => {
    const { deps, ctx, store, m } = setUp(new NodeFileSystem(), {
      hostMountRules: () => Promise.reject(new Error('engine data root unreadable')),
    });
    await store.ensureDir('jobs/j1');
    await store.publishExclusive('jobs/j1/receipt.json', { left: 'over' });
    const stray: unknown[] = [];
    const onStray = (err: unknown): number => stray.push(err);
    process.on('unhandledRejection', onStray);
    try {
      const attempt = await dispatchPair(deps, ctx, m.jobs[0]!, env, () => undefined);
      expect(attempt).toEqual({ kind: 'claim_failed', reason: 'already_claimed' });
      await new Promise((resolve) => setTimeout(resolve, 20));
    } finally {
      process.off('unhandledRejection', onStray);
    }
    expect(stray).toEqual([]);
    expect(runtime.created).toBe(0);
  });

  it('mount rules that cannot be resolved fail the claimed pair before any create', async () => {
    const { deps, ctx, m } = setUp(new NodeFileSystem(), {
      hostMountRules: () => Promise.reject(new Error('engine data root unreadable')),
    });
    await expect(dispatchPair(deps, ctx, m.jobs[0]!, env, () => undefined)).rejects.toThrow(
      'engine data root unreadable',
    );
    expect(runtime.created).toBe(0);
  });

  it('a full host is a refusal: no receipt, nothing held', async () => {
    await registry.setLimits({ maxReservations: 1, gpuMib: null });
    await registry.admit({ batchId: 'other', jobId: 'x', claimId: 'c-x', gpuMib: 0 });
    const { deps, ctx, store, m } = setUp();
    const attempt = await dispatchPair(deps, ctx, m.jobs[0]!, env, () => undefined);
    expect(attempt).toEqual({ kind: 'refused', reason: 'host_full' });
    expect(await store.exists('jobs/j1/receipt.json')).toBe(false);
    expect(runtime.created).toBe(0);
  });

  it('a claim that already stands (a crash left-over) is not run again, and the new reservation is released', async () => {
    const { deps, ctx, store, m } = setUp();
    await store.ensureDir('jobs/j1');
    await store.publishExclusive('jobs/j1/receipt.json', { left: 'over' });
    const attempt = await dispatchPair(deps, ctx, m.jobs[0]!, env, () => undefined);
    expect(attempt).toEqual({ kind: 'claim_failed', reason: 'already_claimed' });
    expect(runtime.created).toBe(0);
    expect(await registry.held()).toEqual([]);
  });

  it('a receipt that cannot be written fails closed: journalled as a harness fault, nothing run, the slot given back at once', async () => {
    const fs = new FaultyFileSystem(new NodeFileSystem(), {
      rules: [{ op: 'link', path: /receipt\.json$/, code: 'EIO' }],
    });
    const { deps, ctx, m } = setUp(fs);
    const attempt = await dispatchPair(deps, ctx, m.jobs[0]!, env, () => undefined);
    expect(attempt).toEqual({ kind: 'claim_failed', reason: 'receipt_write_failed' });
    expect(journal).toEqual([
      {
        type: 'harness_fault',
        fields: { job_id: 'j1', fault: 'receipt_write_failed', err: expect.any(String) as unknown },
      },
    ]);
    expect(runtime.created).toBe(0);
    // No claim stands and no container was ever created: the slot is free before the failure is reported
    // (it used to wait for resume's "reservation without claim").
    expect(await registry.held()).toEqual([]);
  });

  it('a launch that fails before any container keeps the slot of the standing claim for resume to reconcile', async () => {
    const { deps, ctx, store, m } = setUp(new NodeFileSystem(), {
      hostMountRules: () => Promise.reject(new Error('engine data root unreadable')),
    });
    await expect(dispatchPair(deps, ctx, m.jobs[0]!, env, () => undefined)).rejects.toThrow(
      'engine data root unreadable',
    );
    expect(runtime.created).toBe(0);
    expect(await store.exists('jobs/j1/receipt.json')).toBe(true);
    expect((await registry.held()).length).toBe(1);
  });
});

describe('runningSupervisor', () => {
  const record: SupervisorRecord = { ...SUPERVISOR, started_at: '2026-12-03T08:00:00.000Z', mode: 'start' };

  it('none recorded, or recorded but not alive on this host: null', async () => {
    const { store } = setUp();
    const host = new FakeHost();
    expect(await runningSupervisor(store, host)).toBeNull();
    await store.writeJsonAtomic(SUPERVISOR_FILE, record);
    expect(await runningSupervisor(store, host)).toBeNull();
  });

  it('alive and started: the record; alive but it journalled its exit since: null (a foreground supervisor returned)', async () => {
    const { store } = setUp();
    const host = new FakeHost();
    host.alive.add(SUPERVISOR.pid);
    await store.writeJsonAtomic(SUPERVISOR_FILE, record);
    await store.appendJournal({
      type: 'supervisor_started',
      at: record.started_at,
      mode: 'start',
      pid: record.pid,
      start_ticks: record.start_ticks,
      boot_id: record.boot_id,
    });
    expect(await runningSupervisor(store, host)).toEqual(record);
    await store.appendJournal({ type: 'supervisor_exited', at: record.started_at, state: 'drained' });
    expect(await runningSupervisor(store, host)).toBeNull();
  });

  it('another boot: the same pid is not the same process', async () => {
    const { store } = setUp();
    const host = new FakeHost();
    host.alive.add(SUPERVISOR.pid);
    host.bootIdNow = 'boot-after-reboot';
    await store.writeJsonAtomic(SUPERVISOR_FILE, record);
    expect(await runningSupervisor(store, host)).toBeNull();
  });
});
