import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { SqliteCapacityRegistry } from '../../src/adapters/registry/sqlite-capacity-registry.js';
import { prepareBatch } from '../../src/app/batch/start-batch.js';
import { checkResumable } from '../../src/app/batch/resume-batch.js';
import { supervise } from '../../src/app/batch/supervisor.js';
import type { SupervisorDeps } from '../../src/app/batch/supervisor-deps.js';
import { currentProcessIdentity } from '../../src/adapters/host-identity.js';
import { EvidenceStore } from '../../src/app/evidence/evidence-store.js';
import { silentLogger } from '../../src/app/ports/logger.js';
import { buildFinishedPair } from '../support/finished-pair.js';
import { answeringEngine, executeDeps } from '../support/fakes.js';
import { procHostIdentity } from '../../src/adapters/host-identity.js';
import { fileOutcomeReader } from '../../src/adapters/outcome-reader.js';
import { clockAt } from '../support/fake-time.js';

/**
 * The supervisor end to end without an engine: the paths where no pair runs (a source pin that no longer matches, a
 * pause that survives resume, a reservation without a claim, a start that fails). The engine fake answers only what
 * preparing a batch asks; a pair dispatched here would fail loudly.
 */
const engine = answeringEngine(
  {},
  {
    listByLabel: () => Promise.resolve([]),
    inspect: (id) =>
      Promise.resolve(
        present.has(id)
          ? {
              id,
              status: 'exited',
              exitCode: 0,
              oomKilled: false,
              startedAt: null,
              finishedAt: null,
              labels: {},
            }
          : null,
      ),
  },
);
/** Containers the fake engine says exist (by id). */
const present = new Set<string>();

const clock = clockAt(() => new Date('2026-12-03T10:00:00Z'));
let dir: string;
let registry: SqliteCapacityRegistry;

function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

/** A prepared two-job batch pinning one source file; returns its store. */
async function prepared(
  environment: Record<string, string> = {},
  jobEnv: Record<string, string> = {},
): Promise<{ store: EvidenceStore; source: string; batchId: string }> {
  const source = join(dir, 'driver.py');
  await writeFile(source, 'print("v1")\n');
  const job = (id: string) => ({
    job_id: id,
    argv: ['/opt/driver/run'],
    cwd: join(dir, 'cwd'),
    outcome_path: join(dir, 'out', `${id}.json`),
    environment: jobEnv,
  });
  const manifest = {
    schema: 'roboguide.e1.batch/v0.1',
    image: 'roboguide/pair-driver:1',
    jobs: [job('j1'), job('j2')],
    capacity: { max_workers: 1 },
    source_sha256: { [source]: sha256('print("v1")\n') },
  };
  const path = join(dir, 'manifest.json');
  await writeFile(path, JSON.stringify(manifest));
  const output = join(dir, 'batch');
  const record = await prepareBatch(
    {
      fs: new NodeFileSystem(),
      host: procHostIdentity,
      runtime: engine,
      clock,
      observeGpus: () => Promise.resolve({ kind: 'unobservable', reason: 'binary_missing', detail: 'test' }),
    },
    {
      manifestPath: path,
      output,
      registryPath: join(dir, 'r.db'),
      bindAddress: '127.0.0.1',
      environment,
      codeVersion: 't',
    },
  );
  return { store: new EvidenceStore(new NodeFileSystem(), output), source, batchId: record.batch_id };
}

function depsOf(store: EvidenceStore, environment: Record<string, string> = {}): SupervisorDeps {
  const execute = executeDeps({
    runtime: engine,
    clock,
    logger: silentLogger,
    fs: new NodeFileSystem(),
    host: procHostIdentity,
    outcomes: fileOutcomeReader,
  });
  return { store, registry, execute, logger: silentLogger, environment, handleSignals: false };
}

async function journalTypes(store: EvidenceStore): Promise<string[]> {
  return (await store.readJournal()).map((r) => r.type);
}

describe('supervise, without an engine', () => {
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'rg-supervise-'));
    registry = SqliteCapacityRegistry.open({ path: join(dir, 'r.db'), clock });
  });
  afterEach(async () => {
    await registry.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('a source pin changed since start: pauses fatal + inputs_changed before the first dispatch, claims nothing', async () => {
    const { store, source } = await prepared();
    await writeFile(source, 'print("v2")\n');
    expect(await supervise(depsOf(store), 'start')).toBe('paused');
    expect(await journalTypes(store)).toEqual([
      'batch_created',
      'supervisor_started',
      'source_check',
      'paused',
      'supervisor_exited',
    ]);
    const journal = await store.readJournal();
    expect(journal[2]).toMatchObject({
      type: 'source_check',
      phase: 'before_first_dispatch',
      ok: false,
      checked: 1,
      mismatched: [source],
    });
    expect(journal[3]).toMatchObject({ type: 'paused', reasons: ['fatal', 'inputs_changed'] });
    expect(journal[3]).not.toHaveProperty('job_id');
    expect(journal[4]).toMatchObject({ type: 'supervisor_exited', state: 'paused' });
    const status = JSON.parse(await readFile(store.resolve('status.json'), 'utf8'));
    expect(status).toMatchObject({
      state: 'paused',
      pause_reasons: ['fatal', 'inputs_changed'],
      counts: { pending: 2, claimed: 0 },
    });
    const summary = JSON.parse(await readFile(store.resolve('SUMMARY.json'), 'utf8'));
    expect(summary.source_checks).toHaveLength(1);
    expect(await store.exists('jobs/j1/receipt.json')).toBe(false);
  });

  it('resume keeps a fatal pause: leaves at once, paused, recording what it cleared and kept', async () => {
    const { store, source } = await prepared();
    await writeFile(source, 'print("v2")\n');
    await supervise(depsOf(store), 'start');
    await writeFile(source, 'print("v1")\n');
    expect(await supervise(depsOf(store), 'resume')).toBe('paused');
    const journal = await store.readJournal();
    expect(journal.filter((r) => r.type === 'resumed')).toMatchObject([
      { cleared: [], kept: ['fatal', 'inputs_changed'] },
    ]);
    expect(
      journal.filter((r) => r.type === 'supervisor_started').map((r) => ('mode' in r ? r.mode : null)),
    ).toEqual(['start', 'resume']);
    // No second source check: nothing was dispatched.
    expect(journal.filter((r) => r.type === 'source_check')).toHaveLength(1);
  });

  it('releases a reservation whose claim was never published, and journals it', async () => {
    const { store, source, batchId } = await prepared();
    await writeFile(source, 'print("v2")\n');
    const admitted = await registry.admit({
      batchId,
      jobId: 'j1',
      claimId: 'claim-never-published',
      gpuMib: 0,
    });
    expect(admitted.kind).toBe('admitted');
    await supervise(depsOf(store), 'start');
    expect(await registry.held({ batchId })).toEqual([]);
    const released = (await store.readJournal()).filter((r) => r.type === 'reservation_released_unclaimed');
    expect(released).toMatchObject([
      { job_id: 'j1', reservation_id: admitted.kind === 'admitted' ? admitted.reservationId : '' },
    ]);
  });

  it('a batch whose every job has a result exits drained at once, checking the sources at the drain', async () => {
    const { store, source } = await prepared();
    await writeFile(source, 'print("v2")\n');
    await supervise(depsOf(store), 'start');
    await writeFile(source, 'print("v1")\n');
    for (const id of ['j1', 'j2']) {
      await store.ensureDir(`jobs/${id}`);
      await store.writeJsonAtomic(`jobs/${id}/receipt.json`, {
        claim_id: `k-${id}`,
        claimed_at: '2026-12-03T09:00:00.000Z',
        container_id: null,
      });
      await store.writeJsonAtomic(`jobs/${id}/result.json`, {
        classification: 'completed',
        reasons: [],
        outcome: {},
        started_at: '2026-12-03T09:00:00.000Z',
        finished_at: '2026-12-03T09:01:00.000Z',
      });
    }
    expect(await supervise(depsOf(store), 'resume')).toBe('drained');
    const checks = (await store.readJournal()).filter((r) => r.type === 'source_check');
    expect(checks.map((r) => ('phase' in r ? r.phase : null))).toEqual(['before_first_dispatch', 'drain']);
  });

  it('a start that fails (a variable missing) leaves no signal listener behind and releases the lease', async () => {
    const { store } = await prepared({ TOKEN: 'a-long-secret-value' }, { TOKEN: '${TOKEN}' });
    const before = process.listenerCount('SIGUSR2');
    await expect(supervise(depsOf(store, {}), 'start')).rejects.toMatchObject({ code: 'E_ENV_MISSING' });
    expect(process.listenerCount('SIGUSR2')).toBe(before);
    // The lease is free again: a second attempt fails for the same reason, not E_SUPERVISOR_ALIVE.
    await expect(supervise(depsOf(store, {}), 'start')).rejects.toMatchObject({ code: 'E_ENV_MISSING' });
  });

  it.each([
    ['gone', false, 'committed', []],
    ['still there', true, 'hold', [{ type: 'paused', reasons: ['harness'], job_id: 'j1' }]],
  ])(
    'resume finishes a pair whose result was written but whose slot is held (container %s)',
    async (_name, stillThere, kind, pauses) => {
      const { store, source, batchId } = await prepared();
      const pair = await buildFinishedPair({
        root: store.root,
        outcomeDir: join(dir, 'outcomes'),
        registry,
        batchId,
        jobId: 'j1',
      });
      if (stillThere) present.add(pair.containerId);
      // The sources changed: nothing is dispatched after the recovery.
      await writeFile(source, 'print("v2")\n');
      expect(await supervise(depsOf(store), 'resume')).toBe('paused');
      const journal = await store.readJournal();
      expect(journal.filter((r) => r.type === 'recovered')).toMatchObject([
        { job_id: 'j1', action: 'reconcile_finished' },
      ]);
      expect(journal.filter((r) => r.type === 'reconciled')).toMatchObject([{ job_id: 'j1', kind }]);
      expect(journal.filter((r) => r.type === 'paused' && 'job_id' in r)).toMatchObject(pauses);
      expect((await registry.reservation(pair.reservationId))?.state === 'held').toBe(stillThere);
      present.clear();
    },
  );

  describe('checkResumable', () => {
    it('counts the unfinished jobs when no supervisor lives and every variable is set', async () => {
      const { store } = await prepared({ TOKEN: 'a-long-secret-value' }, { TOKEN: '${TOKEN}' });
      expect(await checkResumable(store, { TOKEN: 'a-long-secret-value' }, procHostIdentity)).toBe(2);
    });

    it('refuses while the recorded supervisor lives (this process, no exit record)', async () => {
      const { store } = await prepared();
      const me = await currentProcessIdentity();
      await store.writeJsonAtomic('supervisor.json', {
        ...me,
        started_at: clock.now().toISOString(),
        mode: 'start',
      });
      await store.appendJournal({
        type: 'supervisor_started',
        at: clock.now().toISOString(),
        mode: 'start',
        pid: me.pid,
        start_ticks: me.start_ticks,
        boot_id: me.boot_id,
      });
      await expect(checkResumable(store, {}, procHostIdentity)).rejects.toMatchObject({
        code: 'E_SUPERVISOR_ALIVE',
      });
      // Once it journalled its exit, it is no longer the batch's supervisor.
      await store.appendJournal({
        type: 'supervisor_exited',
        at: clock.now().toISOString(),
        state: 'stopped',
      });
      expect(await checkResumable(store, {}, procHostIdentity)).toBe(2);
    });

    it('names a variable the unfinished jobs reference that is not set', async () => {
      const { store } = await prepared({ TOKEN: 'a-long-secret-value' }, { TOKEN: '${TOKEN}' });
      await expect(checkResumable(store, {}, procHostIdentity)).rejects.toMatchObject({
        code: 'E_ENV_MISSING',
      });
    });

    it('counts only the jobs without a result', async () => {
      const { store } = await prepared();
      await store.ensureDir('jobs/j1');
      await store.writeJsonAtomic('jobs/j1/result.json', { classification: 'completed' });
      expect(await checkResumable(store, {}, procHostIdentity)).toBe(1);
    });
  });
});
