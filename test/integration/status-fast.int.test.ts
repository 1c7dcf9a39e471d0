import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EvidenceStore } from '../../src/app/evidence/evidence-store.js';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { procHostIdentity } from '../../src/adapters/host-identity.js';
import { SqliteCapacityRegistry } from '../../src/adapters/registry/sqlite-capacity-registry.js';
import { readStatusFull } from '../../src/app/batch/read-status.js';
import { prepareBatch } from '../../src/app/batch/start-batch.js';
import type { BatchStatus } from '../../src/app/batch/status-shapes.js';
import { supervise } from '../../src/app/batch/supervisor.js';
import { systemClock } from '../../src/adapters/system-clock.js';
import { silentLogger } from '../../src/app/ports/logger.js';
import { renderStatus } from '../../src/cli/status-view.js';
import { createExecutePairDeps } from '../../src/composition-root.js';
import { cli } from '../support/cli.js';
import { DRIVER_IMAGE, noDocker, runtime, sweep } from '../support/docker.js';
import {
  BUNDLED_OCLIF,
  loadedFiles,
  LOADED_RECORD_VARIABLE,
  writeLoadRecorder,
} from '../support/loaded-files.js';

/**
 * `e1-batch status` of a live batch answered by bin/run.js's fast path (src/status-entry.ts, issue 26): without
 * oclif, dockerode or zod, with the same answer and view as the full derivation; once the supervisor is gone the
 * command answers the full way (oclif), still the same.
 */
const rt = runtime();
let work: string;
let hook: string;

interface CliRun {
  readonly code: number | null;
  readonly stdout: string;
  readonly loaded: string[];
}

async function statusCli(args: string[]): Promise<CliRun> {
  const record = join(work, `loaded-${Math.random().toString(36).slice(2)}.txt`);
  const run = await cli(['e1-batch', 'status', ...args], {
    nodeArgs: ['--import', hook],
    env: { [LOADED_RECORD_VARIABLE]: record },
  });
  return { code: run.code, stdout: run.stdout, loaded: await loadedFiles(record) };
}

const withoutTime = (s: BatchStatus): Omit<BatchStatus, 'updated_at'> => {
  const { updated_at: _ignored, ...rest } = s;
  return rest;
};
/** The view without what moves between two processes (a running pair's elapsed seconds, the ETA). */
const steadyView = (view: string): string => view.replace(/elapsed \d+s/g, '').replace(/^ETA .*$/m, '');

describe.skipIf(noDocker)('e1-batch status fast path (bin/run.js, no oclif)', () => {
  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'rg-status-fast-'));
    hook = await writeLoadRecorder(work);
  });
  afterAll(async () => {
    await rm(work, { recursive: true, force: true });
  });

  it('answers a live batch without oclif, dockerode or zod, as the full derivation does', async () => {
    await mkdir(join(work, 'cwd'), { recursive: true });
    const ids = ['f1'];
    const manifest = {
      schema: 'roboguide.e1.batch/v0.1',
      image: DRIVER_IMAGE,
      jobs: ids.map((id) => ({
        job_id: id,
        argv: ['/opt/driver/run', 'sleep=40', 'outcome=completed'],
        cwd: join(work, 'cwd'),
        outcome_path: join(work, 'out', `${id}.json`),
        timeout_seconds: 60,
      })),
      stop_budget_seconds: 5,
    };
    await writeFile(join(work, 'm.json'), JSON.stringify(manifest));
    const output = join(work, 'live');
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
    ).finally(async () => {
      done = true;
      await registry.close();
    });
    let compared = 0;
    try {
      // Until the pair runs (claimed, its container started): from then on the batch holds still for a while.
      while (
        !done &&
        (await readStatusFull(store, rt, new Date(), procHostIdentity)).running.every(
          (r) => r.container_id === null,
        )
      ) {
        await new Promise((r) => setTimeout(r, 200));
      }
      // Issue 42 item 4: a running pair's egress.jsonl (as an allowlisted pair's proxy writes it, masked), with a
      // torn last line, is read live by the fast path; the full derivation (final figures only) has none.
      await writeFile(
        join(output, 'jobs', 'f1', 'egress.jsonl'),
        `${JSON.stringify({ time: new Date().toISOString(), via: 'connect', host: 'evil.test', address: '198.18.1.10', port: 443, method: null, decision: 'refused', bytes_up: 0, bytes_down: 0, source: '172.30.0.2' })}\n{"time":`,
      );
      while (!done && compared < 1) {
        const full = await readStatusFull(store, rt, new Date(), procHostIdentity);
        const before = withoutTime(full);
        const fast = await statusCli(['--output', output, '--json']);
        const view = await statusCli(['--output', output]);
        const after = withoutTime(await readStatusFull(store, rt, new Date(), procHostIdentity));
        // Compared only while the batch held still (a pair running, nothing finished or claimed meanwhile).
        if (JSON.stringify(before) !== JSON.stringify(after) || before.running.length === 0) continue;
        expect(fast.code).toBe(0);
        const live = withoutTime(JSON.parse(fast.stdout) as BatchStatus);
        expect(live.egress).toEqual({
          pairs: 0,
          allowed: 0,
          refused: 0,
          refused_pairs: [],
          more: 0,
          running: {
            pairs: 1,
            allowed: 0,
            refused: 1,
            refused_pairs: [
              { job_id: 'f1', running: true, allowed: 0, refused: 1, refused_hosts: ['evil.test:443'] },
            ],
          },
        });
        expect(live).toEqual({ ...before, egress: live.egress });
        expect(view.code).toBe(0);
        expect(view.stdout).toContain('  egress f1 (running)  refused 1  allowed 0  (evil.test:443)');
        expect(steadyView(view.stdout)).toBe(
          steadyView(
            `${renderStatus({ ...full, ...(live.egress ? { egress: live.egress } : {}) }, new Date())}\n`,
          ),
        );
        expect(view.stdout).toContain(`batch ${batchId}  state RUNNING`);
        for (const run of [fast, view]) {
          expect(
            run.loaded.filter(
              (f) => /\/node_modules\/(@oclif|dockerode|zod)\//.test(f) || BUNDLED_OCLIF.test(f),
            ),
          ).toEqual([]);
          expect(run.loaded.some((f) => f.endsWith('/dist/status-entry.js'))).toBe(true);
        }
        compared++;
      }
      expect(await supervising).toBe('drained');
    } finally {
      await supervising.catch(() => undefined);
      await sweep({ 'roboguide.batch': batchId });
    }
    expect(compared).toBeGreaterThan(0);
    // A drained batch (supervisor gone): the command answers the full way (cold), the same as the full derivation.
    const cold = await statusCli(['--output', output, '--json']);
    expect(cold.code).toBe(0);
    expect(cold.loaded.some((f) => f.includes('/dist/bundle/chunks/oclif-'))).toBe(true);
    expect(withoutTime(JSON.parse(cold.stdout) as BatchStatus)).toEqual(
      withoutTime(await readStatusFull(store, rt, new Date(), procHostIdentity)),
    );
  });
});
