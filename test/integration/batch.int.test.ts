import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EvidenceStore } from '../../src/app/evidence/evidence-store.js';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { SqliteCapacityRegistry } from '../../src/adapters/registry/sqlite-capacity-registry.js';
import { writeContinuation } from '../../src/app/batch/continuation.js';
import { readStatus } from '../../src/app/batch/read-status.js';
import { prepareBatch } from '../../src/app/batch/start-batch.js';
import { stopBatch } from '../../src/app/batch/stop-batch.js';
import { supervise } from '../../src/app/batch/supervisor.js';
import { systemClock } from '../../src/adapters/system-clock.js';
import { silentLogger } from '../../src/app/ports/logger.js';
import { createExecutePairDeps } from '../../src/composition-root.js';
import { containersLabelled, DRIVER_IMAGE, noDocker, runtime } from '../support/docker.js';
import { procHostIdentity } from '../../src/adapters/host-identity.js';

const rt = runtime();
let work: string;
let registryPath: string;

function manifest(name: string, jobs: [string, string[]][], extra: Record<string, unknown> = {}): string {
  return JSON.stringify({
    schema: 'roboguide.e1.batch/v0.1',
    image: DRIVER_IMAGE,
    jobs: jobs.map(([id, actions]) => ({
      job_id: id,
      argv: ['/opt/driver/run', 'count', ...actions],
      cwd: join(work, name, 'cwd'),
      outcome_path: join(work, name, 'out', `${id}.json`),
      timeout_seconds: 60,
    })),
    stop_budget_seconds: 5,
    ...extra,
  });
}

async function start(name: string, text: string): Promise<{ store: EvidenceStore; batchId: string }> {
  const path = join(work, `${name}.json`);
  await writeFile(path, text);
  const output = join(work, name, 'batch');
  const record = await prepareBatch(
    { fs: new NodeFileSystem(), host: procHostIdentity, runtime: rt, clock: systemClock },
    {
      manifestPath: path,
      output,
      registryPath,
      bindAddress: '127.0.0.1',
      environment: {},
      codeVersion: 'test',
    },
  );
  return { store: new EvidenceStore(new NodeFileSystem(), output), batchId: record.batch_id };
}

function run(store: EvidenceStore, mode: 'start' | 'resume') {
  const registry = SqliteCapacityRegistry.open({ path: registryPath });
  return supervise(
    {
      store,
      registry,
      execute: createExecutePairDeps(rt, silentLogger),
      logger: silentLogger,
      environment: {},
      handleSignals: false,
    },
    mode,
  ).finally(() => registry.close());
}

async function driverRuns(name: string): Promise<string[]> {
  const text = await readFile(join(work, name, 'cwd', 'driver-runs.log'), 'utf8').catch(() => '');
  return text
    .split('\n')
    .filter(Boolean)
    .map((l) => l.split(' ')[0]!);
}

async function heldFor(batchId: string): Promise<number> {
  const registry = SqliteCapacityRegistry.open({ path: registryPath });
  try {
    return (await registry.held({ batchId })).length;
  } finally {
    registry.closeSync();
  }
}

describe.skipIf(noDocker)('e1-batch supervisor against the real engine', () => {
  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'rg-batch-'));
    registryPath = join(work, 'registry.db');
  });
  afterAll(async () => {
    await rm(work, { recursive: true, force: true });
  });

  it('runs a 10-pair batch mixing every classification to the expected SUMMARY, each pair once', async () => {
    const jobs: [string, string[]][] = [
      ['p01', ['outcome=completed']],
      ['p02', ['arm=unavailable', 'outcome=completed']],
      ['p03', ['outcome=infra']],
      ['p04', ['usage=30000', 'outcome=completed']],
      ['p05', []],
      ['p06', ['outcome=wrong_job']],
      ['p07', ['outcome=completed']],
      ['p08', ['outcome=invalid_json']],
      ['p09', ['outcome=provider_status=502']],
      ['p10', ['session=429', 'outcome=provider_status=429']],
    ];
    // p06 (fatal) pauses the batch: what follows stays unclaimed, exactly as a fatal pause must.
    const { store, batchId } = await start(
      'mixed',
      manifest('mixed', jobs, { provider: { allowed_http_statuses: [502] } }),
    );
    expect(await run(store, 'start')).toBe('paused');
    const summary = JSON.parse(await readFile(store.resolve('SUMMARY.json'), 'utf8'));
    const byJob = Object.fromEntries(
      summary.jobs.map((j: { job_id: string; classification: string | null }) => [
        j.job_id,
        j.classification,
      ]),
    );
    expect(byJob).toMatchObject({
      p01: 'completed',
      p02: 'completed',
      p03: 'infrastructure_failure',
      p04: 'completed',
      p05: 'infrastructure_failure',
      p06: 'fatal',
      p07: null,
    });
    expect(summary.pause_reasons).toContain('fatal');
    expect(await driverRuns('mixed')).toEqual(['p01', 'p02', 'p03', 'p04', 'p05', 'p06']);
    // A fatal pause survives resume: nothing more is dispatched.
    expect(await run(store, 'resume')).toBe('paused');
    expect(await driverRuns('mixed')).toHaveLength(6);
    const p02 = JSON.parse(await readFile(store.resolve('jobs/p02/result.json'), 'utf8'));
    expect(p02.outcome.arms[0].verdict).toBe('unavailable');
    expect(await heldFor(batchId)).toBe(0);
    expect(await containersLabelled({ 'roboguide.batch': batchId })).toEqual([]);

    // continuation: the unclaimed jobs, referencing the original; the original's claims are refused.
    const next = join(work, 'mixed-2.json');
    const cont = await writeContinuation(store, {
      manifestOut: next,
      codeVersion: 'test+abc',
      fs: new NodeFileSystem(),
      host: procHostIdentity,
    });
    expect(cont.jobs).toBe(4);
    const m2 = JSON.parse(await readFile(next, 'utf8'));
    expect(m2.continuation_of).toMatchObject({ batch_id: batchId, code_version: 'test+abc' });
    expect(m2.jobs.map((j: { job_id: string }) => j.job_id)).toEqual(['p07', 'p08', 'p09', 'p10']);
    // A continuation that slips a job claimed in the original back in is refused before anything is written.
    const claimedAgain = {
      ...JSON.parse(manifest('mixed', [['p01', []]])).jobs[0],
      outcome_path: join(work, 'x', 'p01.json'),
    };
    const sneaky = { ...m2, jobs: [...m2.jobs, claimedAgain] };
    await writeFile(join(work, 'sneaky.json'), JSON.stringify(sneaky));
    await expect(
      prepareBatch(
        { fs: new NodeFileSystem(), host: procHostIdentity, runtime: rt, clock: systemClock },
        {
          manifestPath: join(work, 'sneaky.json'),
          output: join(work, 'sneaky'),
          registryPath,
          bindAddress: '127.0.0.1',
          environment: {},
          codeVersion: 'test',
        },
      ),
    ).rejects.toMatchObject({ exitCode: 2, message: expect.stringContaining('was claimed in batch') });

    // The continuation runs in its own work dir (fresh outcome paths); continuation_of still names the original.
    const continued = JSON.parse(await readFile(next, 'utf8'));
    for (const job of continued.jobs) {
      job.cwd = job.cwd.replace(join(work, 'mixed'), join(work, 'mixed-cont'));
      job.outcome_path = job.outcome_path.replace(join(work, 'mixed'), join(work, 'mixed-cont'));
    }
    const { store: store2 } = await start('mixed-cont', JSON.stringify(continued));
    expect(await run(store2, 'start')).toBe('drained');
    const s2 = JSON.parse(await readFile(store2.resolve('SUMMARY.json'), 'utf8'));
    const byJob2 = Object.fromEntries(
      s2.jobs.map((j: { job_id: string; classification: string | null }) => [j.job_id, j.classification]),
    );
    expect(byJob2).toEqual({
      p07: 'completed',
      p08: 'infrastructure_failure',
      p09: 'completed',
      p10: 'provider_stop',
    });
    const p10 = JSON.parse(await readFile(store2.resolve('jobs/p10/result.json'), 'utf8'));
    expect(p10.provider_failure).toMatchObject({
      kind: 'response_too_many_failed_attempts',
      http_status: 429,
    });
  });

  it('runs the first pair alone, then two at once once a pair measured its GPU peak within the budget', async () => {
    const capacity = { max_workers: 2, gpu_total_mib: 81559, gpu_baseline_mib: 1200, gpu_fraction: 0.9 };
    const { store } = await start(
      'two',
      manifest(
        'two',
        [
          ['w1', ['usage=36000', 'outcome=completed']],
          ['w2', ['sleep=2', 'outcome=completed']],
          ['w3', ['sleep=2', 'outcome=completed']],
        ],
        { capacity },
      ),
    );
    expect(await run(store, 'start')).toBe('drained');
    const times = async (id: string) => {
      const r = JSON.parse(await readFile(store.resolve(`jobs/${id}/result.json`), 'utf8'));
      return { start: Date.parse(r.started_at), end: Date.parse(r.finished_at) };
    };
    const [w1, w2, w3] = [await times('w1'), await times('w2'), await times('w3')];
    expect(w2.start).toBeGreaterThanOrEqual(w1.end); // the first pair ran alone
    expect(w3.start).toBeLessThan(w2.end); // then two workers: w3 started while w2 ran
    const status = JSON.parse(await readFile(store.resolve('status.json'), 'utf8'));
    expect(status).toMatchObject({ workers_allowed: 2, gpu_peak_mib: 36000 });
  });

  it('stays serial when the measured peak does not fit twice in the GPU budget', async () => {
    const capacity = { max_workers: 2, gpu_total_mib: 81559, gpu_baseline_mib: 1200, gpu_fraction: 0.9 };
    const { store } = await start(
      'serial',
      manifest(
        'serial',
        [
          ['v1', ['usage=40000', 'outcome=completed']],
          ['v2', ['sleep=1', 'outcome=completed']],
          ['v3', ['sleep=1', 'outcome=completed']],
        ],
        { capacity },
      ),
    );
    expect(await run(store, 'start')).toBe('drained');
    const r2 = JSON.parse(await readFile(store.resolve('jobs/v2/result.json'), 'utf8'));
    const r3 = JSON.parse(await readFile(store.resolve('jobs/v3/result.json'), 'utf8'));
    expect(Date.parse(r3.started_at)).toBeGreaterThanOrEqual(Date.parse(r2.finished_at));
    expect(JSON.parse(await readFile(store.resolve('status.json'), 'utf8')).workers_allowed).toBe(1);
  });

  it('pauses after three consecutive infrastructure failures on three different pairs', async () => {
    const { store } = await start(
      'streak',
      manifest('streak', [
        ['s1', ['outcome=infra']],
        ['s2', []],
        ['s3', ['outcome=infra']],
        ['s4', ['outcome=completed']],
      ]),
    );
    expect(await run(store, 'start')).toBe('paused');
    const status = JSON.parse(await readFile(store.resolve('status.json'), 'utf8'));
    expect(status.pause_reasons).toEqual(['infrastructure_streak']);
    expect(status.counts).toMatchObject({ infrastructure_failure: 3, pending: 1 });
    expect(await run(store, 'resume')).toBe('drained');
    expect(await driverRuns('streak')).toEqual(['s1', 's2', 's3', 's4']);
  });

  it('stops on request (running pair finishes and is archived), then resumes to the end without re-running', async () => {
    const { store, batchId } = await start(
      'stop',
      manifest('stop', [
        ['t1', ['sleep=3', 'outcome=completed']],
        ['t2', ['outcome=completed']],
        ['t3', ['outcome=completed']],
      ]),
    );
    const supervising = run(store, 'start');
    // Stop once t1 is really running (its container exists), not after a guessed delay.
    for (let i = 0; i < 600; i++) {
      const receipt = await readFile(store.resolve('jobs/t1/receipt.json'), 'utf8').then(
        (t) => JSON.parse(t) as { container_id: string | null },
        () => null,
      );
      if (receipt?.container_id) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    await stopBatch(store, systemClock, false, procHostIdentity);
    expect(await supervising).toBe('stopped');
    const t1 = JSON.parse(await readFile(store.resolve('jobs/t1/result.json'), 'utf8'));
    expect(t1.classification).toBe('completed');
    expect(await driverRuns('stop')).toEqual(['t1']);
    expect(await heldFor(batchId)).toBe(0);
    expect(await run(store, 'resume')).toBe('drained');
    expect(await driverRuns('stop')).toEqual(['t1', 't2', 't3']);
  });

  it('stop --terminate stops the running pair within its stop budget, archives it, and leaves the rest unclaimed', async () => {
    const { store, batchId } = await start(
      'term',
      manifest('term', [
        ['u1', ['numbered=1', 'ignore_term', 'hang']],
        ['u2', ['outcome=completed']],
      ]),
    );
    const supervising = run(store, 'start');
    for (let i = 0; i < 600; i++) {
      const receipt = await readFile(store.resolve('jobs/u1/receipt.json'), 'utf8').then(
        (t) => JSON.parse(t) as { container_id: string | null },
        () => null,
      );
      if (receipt?.container_id) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    await stopBatch(store, systemClock, true, procHostIdentity);
    expect(await supervising).toBe('stopped');
    const u1 = JSON.parse(await readFile(store.resolve('jobs/u1/result.json'), 'utf8'));
    expect(u1.reasons).toContain('terminated');
    expect(u1.container.exit_code).toBe(137); // it ignored SIGTERM: killed after the budget
    expect(u1.cleanup.verified_absent).toBe(true);
    expect(await readFile(store.resolve('jobs/u1/stdout.log'), 'utf8')).toBe(`${'line 1'.padEnd(63)}\n`);
    expect(await driverRuns('term')).toEqual(['u1']);
    expect(await heldFor(batchId)).toBe(0);
    expect(await containersLabelled({ 'roboguide.batch': batchId })).toEqual([]);
  });

  it('status lists a leftover labelled container and a claim without result, for a person to inspect', async () => {
    const { store, batchId } = await start(
      'left',
      manifest('left', [
        ['l1', ['outcome=completed']],
        ['l2', ['outcome=completed']],
      ]),
    );
    expect(await run(store, 'start')).toBe('drained');
    // Simulate what a power loss leaves: a container of the batch still there, a claim whose result is gone.
    const stray = await rt.create({
      name: `roboguide-left-stray-${Date.now()}`,
      image: DRIVER_IMAGE,
      cmd: ['/bin/true'],
      workingDir: '/',
      env: {},
      binds: [],
      ports: [],
      bindAddress: '127.0.0.1',
      deviceRequests: [],
      labels: { 'roboguide.batch': batchId, 'roboguide.job': 'l1', 'roboguide.claim': 'stray' },
      stopTimeoutSec: 1,
    });
    try {
      await rm(store.resolve('jobs/l2/result.json'));
      const status = await readStatus(store, rt, new Date(), procHostIdentity);
      expect(status.leftovers).toEqual([
        { container_id: stray.id, job_id: 'l1', status: 'created', why: 'job_finished' },
      ]);
      expect(status.claims_without_result).toEqual(['l2']);
      expect(status.state).toBe('paused'); // no supervisor, work unaccounted for: fail closed
    } finally {
      await rt.remove(stray.id);
    }
  });

  it('two batches sharing the registry never exceed the host limit', async () => {
    const registry = SqliteCapacityRegistry.open({ path: registryPath });
    await registry.setLimits({ maxReservations: 1, gpuMib: null });
    registry.closeSync();
    try {
      const a = await start(
        'share-a',
        manifest('share-a', [
          ['a1', ['sleep=1', 'outcome=completed']],
          ['a2', ['sleep=1', 'outcome=completed']],
        ]),
      );
      const b = await start(
        'share-b',
        manifest('share-b', [
          ['b1', ['sleep=1', 'outcome=completed']],
          ['b2', ['sleep=1', 'outcome=completed']],
        ]),
      );
      let peak = 0;
      const sampler = setInterval(() => {
        const r = SqliteCapacityRegistry.open({ path: registryPath });
        void r.held().then((held) => {
          peak = Math.max(peak, held.length);
          r.closeSync();
        });
      }, 100);
      const states = await Promise.all([run(a.store, 'start'), run(b.store, 'start')]).finally(() =>
        clearInterval(sampler),
      );
      expect(states).toEqual(['drained', 'drained']);
      expect(peak).toBe(1);
    } finally {
      const r = SqliteCapacityRegistry.open({ path: registryPath });
      await r.setLimits({ maxReservations: 2, gpuMib: null });
      r.closeSync();
    }
  });
});
