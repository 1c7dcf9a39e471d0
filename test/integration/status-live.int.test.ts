import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EvidenceStore } from '../../src/app/evidence/evidence-store.js';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { SqliteCapacityRegistry } from '../../src/adapters/registry/sqlite-capacity-registry.js';
import { readStatus } from '../../src/app/batch/read-status.js';
import { prepareBatch } from '../../src/app/batch/start-batch.js';
import type { BatchStatus } from '../../src/app/batch/status-shapes.js';
import { supervise } from '../../src/app/batch/supervisor.js';
import { systemClock } from '../../src/adapters/system-clock.js';
import { silentLogger } from '../../src/app/ports/logger.js';
import { createExecutePairDeps } from '../../src/composition-root.js';
import { containersLabelled, DRIVER_IMAGE, noDocker, runtime } from '../support/docker.js';
import { procHostIdentity } from '../../src/adapters/host-identity.js';

/**
 * `e1-batch status` while a live supervisor runs a batch on the real engine: sampled as fast as it answers, it
 * never reports one of that supervisor's containers as a leftover — not between create and start, not between
 * exit and removal — and counts the pair as running. (Before the fix every pair showed as
 * `leftover container … job_not_running` in those windows.)
 */
const rt = runtime();
let work: string;

describe.skipIf(noDocker)('status during a live batch', () => {
  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'rg-status-live-'));
  });
  afterAll(async () => {
    await rm(work, { recursive: true, force: true });
  });

  it('never lists a container of the live supervisor as a leftover, and counts its pair as running', async () => {
    await mkdir(join(work, 'cwd'));
    const ids = ['s1', 's2', 's3', 's4'];
    const manifest = {
      schema: 'roboguide.e1.batch/v0.1',
      image: DRIVER_IMAGE,
      jobs: ids.map((id) => ({
        job_id: id,
        argv: ['/opt/driver/run', 'numbered=200', 'outcome=completed'],
        cwd: join(work, 'cwd'),
        outcome_path: join(work, 'out', `${id}.json`),
        timeout_seconds: 60,
      })),
      stop_budget_seconds: 5,
    };
    await writeFile(join(work, 'm.json'), JSON.stringify(manifest));
    const output = join(work, 'batch');
    const registryPath = join(work, 'registry.db');
    const { batch_id: batchId } = await prepareBatch(
      { fs: new NodeFileSystem(), host: procHostIdentity, runtime: rt, clock: systemClock },
      {
        manifestPath: join(work, 'm.json'),
        output,
        registryPath,
        bindAddress: '127.0.0.1',
        environment: {},
        codeVersion: 'test',
      },
    );
    const store = new EvidenceStore(new NodeFileSystem(), output);
    const registry = SqliteCapacityRegistry.open({ path: registryPath });
    let done = false;
    const supervising = supervise(
      {
        store,
        registry,
        execute: createExecutePairDeps(rt, silentLogger),
        logger: silentLogger,
        environment: {},
        handleSignals: false,
      },
      'start',
    ).finally(() => {
      done = true;
      registry.closeSync();
    });
    const samples: BatchStatus[] = [];
    while (!done) {
      const s = await readStatus(store, rt, new Date(), procHostIdentity).catch(() => null);
      // Only samples taken while the supervisor was live and had work in hand say anything.
      if (s && s.supervisor?.alive && s.state === 'running') samples.push(s);
    }
    expect(await supervising).toBe('drained');
    const leftovers = samples.flatMap((s) => s.leftovers);
    expect(leftovers).toEqual([]);
    const running = samples.filter((s) => s.running.length > 0);
    expect(running.length).toBeGreaterThan(0);
    for (const s of running) {
      expect(s.counts.running).toBe(s.running.length);
      expect(s.running.length).toBeLessThanOrEqual(1); // max_workers 1
    }
    expect(await containersLabelled({ 'roboguide.batch': batchId })).toEqual([]);
  });
});
