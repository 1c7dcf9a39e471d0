/**
 * releaseLostSlot's refusals (the integration test drives the happy path on the real engine): every check that keeps
 * a slot held when something may still own it, with a real in-memory registry and a hand-written engine.
 */
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NodeFileSystem } from '../../../src/adapters/fs/node-file-system.js';
import { SqliteCapacityRegistry } from '../../../src/adapters/registry/sqlite-capacity-registry.js';
import { EvidenceStore } from '../../../src/app/evidence/evidence-store.js';
import type { ContainerState } from '../../../src/app/ports/container-runtime.js';
import { releaseLostSlot, type ReleaseLostDeps } from '../../../src/app/release-lost-slot.js';
import { clockAt } from '../../support/fake-time.js';

let dir: string;
let registry: SqliteCapacityRegistry;
let present: Set<string>;
let alive: boolean;

const state = (id: string): ContainerState => ({
  id,
  status: 'running',
  exitCode: null,
  oomKilled: false,
  startedAt: null,
  finishedAt: null,
  labels: {},
});

function deps(): ReleaseLostDeps {
  const proofsDir = join(dir, 'proofs');
  return {
    registry,
    runtime: {
      inspect: (id) => Promise.resolve(present.has(id) ? state(id) : null),
      listByLabel: () => Promise.resolve([]),
    },
    host: { isAlive: () => alive },
    clock: clockAt(() => new Date('2026-12-05T00:00:00Z')),
    exists: async (path) => (await stat(path).catch(() => null)) !== null,
    proofs: new EvidenceStore(new NodeFileSystem(), proofsDir),
    proofsDir,
    ensureProofsDir: async () => {
      const { mkdir } = await import('node:fs/promises');
      await mkdir(proofsDir, { recursive: true });
    },
  };
}

async function admit(options: { container?: string; node?: string } = {}): Promise<string> {
  const result = await registry.admit({
    batchId: 'b1',
    jobId: 'j1',
    claimId: 'c1',
    gpuMib: 0,
    evidenceFolder: join(dir, 'gone-evidence'),
    writableMounts: [join(dir, 'work')],
    ...(options.node !== undefined ? { node: options.node } : {}),
  });
  if (result.kind !== 'admitted') throw new Error(result.kind);
  if (options.container !== undefined)
    await registry.attachContainer(result.reservationId, options.container);
  return result.reservationId;
}

const ask = { batchId: 'b1', jobId: 'j1', mode: 'execute' } as const;

describe('releaseLostSlot', () => {
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'rg-release-unit-'));
    registry = SqliteCapacityRegistry.open({ path: ':memory:' });
    present = new Set();
    alive = false;
  });
  afterEach(async () => {
    await registry.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('keeps the slot while the batch supervisor is alive', async () => {
    await admit({ container: 'abc' });
    await registry.acquireLease('b1', { pid: 4242, start_ticks: '1', boot_id: 'boot' }, () => false);
    alive = true;
    const result = await releaseLostSlot(deps(), ask);
    expect(result).toMatchObject({ kind: 'refused', reason: 'supervisor_alive' });
    expect(result.kind === 'refused' && result.detail).toContain('pid 4242');
    expect(await registry.held()).toHaveLength(1);
  });

  it('keeps a slot that never recorded a container (its pair may be starting)', async () => {
    await admit();
    expect(await releaseLostSlot(deps(), ask)).toMatchObject({
      kind: 'refused',
      reason: 'no_container_recorded',
    });
    expect(await registry.held()).toHaveLength(1);
  });

  it('keeps a slot on another node', async () => {
    await admit({ container: 'abc', node: 'elsewhere' });
    expect(await releaseLostSlot(deps(), ask)).toMatchObject({ kind: 'refused', reason: 'other_node' });
  });

  it('keeps the slot while its container exists', async () => {
    await admit({ container: 'abc' });
    present.add('abc');
    expect(await releaseLostSlot(deps(), ask)).toMatchObject({
      kind: 'refused',
      reason: 'container_present',
    });
    expect(await registry.held()).toHaveLength(1);
  });

  it('needs only the evidence folder gone: the working folder may remain', async () => {
    const { mkdir } = await import('node:fs/promises');
    await mkdir(join(dir, 'work'));
    await admit({ container: 'abc' });
    const preview = await releaseLostSlot(deps(), { ...ask, mode: 'preview' });
    expect(preview.kind).toBe('would_release');
    expect(await stat(join(dir, 'proofs')).catch(() => null)).toBeNull(); // a preview writes nothing
    const done = await releaseLostSlot(deps(), ask);
    expect(done.kind).toBe('released');
    expect(await registry.held()).toHaveLength(0);
    expect((await registry.board({ claimId: 'c1' }))[0]).toMatchObject({
      state: 'terminal',
      classification: 'infrastructure_failure',
    });
    expect(await releaseLostSlot(deps(), ask)).toMatchObject({ kind: 'already_released' });
  });

  it('refuses when the evidence folder still exists', async () => {
    const { mkdir } = await import('node:fs/promises');
    await mkdir(join(dir, 'gone-evidence'));
    await admit({ container: 'abc' });
    expect(await releaseLostSlot(deps(), ask)).toMatchObject({ kind: 'refused', reason: 'evidence_present' });
  });

  it('a run reconciliation made terminal: already released, its proof not ours to name', async () => {
    const id = await admit({ container: 'abc' });
    await registry.commitTerminal({
      batchId: 'b1',
      jobId: 'j1',
      claimId: 'c1',
      reservationId: id,
      classification: 'completed',
      outcomeSha256: null,
      proofSha256: 'f'.repeat(64),
    });
    expect(await releaseLostSlot(deps(), ask)).toMatchObject({
      kind: 'already_released',
      proof_path: null,
      proof_sha256: 'f'.repeat(64),
    });
  });

  it('names an unknown batch or job', async () => {
    expect(await releaseLostSlot(deps(), ask)).toMatchObject({
      kind: 'refused',
      reason: 'no_such_reservation',
    });
  });
});
