import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EvidenceStore } from '../../src/app/evidence/evidence-store.js';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { SqliteCapacityRegistry } from '../../src/adapters/registry/sqlite-capacity-registry.js';
import { readHotStatus, readStatus, readStatusFull } from '../../src/app/batch/read-status.js';
import { prepareBatch } from '../../src/app/batch/start-batch.js';
import type { BatchStatus } from '../../src/app/batch/status-shapes.js';
import { supervise } from '../../src/app/batch/supervisor.js';
import { systemClock } from '../../src/adapters/system-clock.js';
import { silentLogger } from '../../src/app/ports/logger.js';
import { createExecutePairDeps } from '../../src/composition-root.js';
import {
  batchIdOf,
  resumeUntilDrained,
  runCli,
  startArgs,
  writeCrashFixture,
  type CrashJob,
} from '../support/crash-batch.js';
import { DRIVER_IMAGE, noDocker, runtime, sweep } from '../support/docker.js';
import { procHostIdentity } from '../../src/adapters/host-identity.js';

/**
 * Incremental status on the real engine (issue 14, item 2): while a real supervisor runs, `readStatus` built on its
 * status.json (hot) equals the full derivation from every file; after a supervisor is SIGKILLed between a status.json
 * write and a journal record (either order), status (cold, and `e1-batch status --json` as a process) equals it too.
 */
const rt = runtime();
let work: string;

/** `e1-batch status --json` as a child process (dist/ through bin/run.js): its parsed stdout. */
function statusCli(output: string): Promise<BatchStatus> {
  const child = spawn(
    process.execPath,
    [
      '--disable-warning=ExperimentalWarning',
      resolve('bin/run.js'),
      'e1-batch',
      'status',
      '--output',
      output,
      '--json',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let stdout = '';
  child.stdout.setEncoding('utf8').on('data', (c: string) => (stdout += c));
  return new Promise((ok, fail) => {
    child.on('error', fail);
    child.on('close', (code) =>
      code === 0 ? ok(JSON.parse(stdout) as BatchStatus) : fail(new Error(`status exited ${String(code)}`)),
    );
  });
}

/**
 * `read` against the full derivation, compared only when the full derivation is the same just before and just after
 * it (a container the dead supervisor had just started still moves on its own: created → running → exited).
 */
async function expectSameAsFull(
  full: () => Promise<BatchStatus>,
  read: () => Promise<BatchStatus>,
): Promise<BatchStatus> {
  for (let i = 0; i < 40; i++) {
    const before = withoutTime(await full());
    const got = withoutTime(await read());
    const after = withoutTime(await full());
    if (JSON.stringify(before) === JSON.stringify(after)) {
      // The fields that differ, named with both values (a bare deep-equal says only "{ …(16) }" in CI's summary).
      const differ = fieldsThatDiffer(got, before);
      expect(differ, differ.join('; ')).toEqual([]);
      expect(got).toEqual(before);
      return await full();
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error('the batch never held still');
}

function fieldsThatDiffer(got: object, want: object): string[] {
  const a = got as Record<string, unknown>;
  const b = want as Record<string, unknown>;
  return [...new Set([...Object.keys(a), ...Object.keys(b)])]
    .filter((k) => JSON.stringify(a[k]) !== JSON.stringify(b[k]))
    .map(
      (k) =>
        `${k}: ${JSON.stringify(a[k]) ?? 'absent'} where the full derivation has ${JSON.stringify(b[k]) ?? 'absent'}`,
    );
}

const withoutTime = (s: BatchStatus): Omit<BatchStatus, 'updated_at'> => {
  const { updated_at: _ignored, ...rest } = s;
  return rest;
};

describe.skipIf(noDocker)('incremental status against the full derivation', () => {
  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'rg-status-inc-'));
  });
  afterAll(async () => {
    await rm(work, { recursive: true, force: true });
  });

  it('hot status of a live supervisor equals the full derivation whenever the batch holds still', async () => {
    await mkdir(join(work, 'cwd'), { recursive: true });
    const ids = ['h1', 'h2', 'h3'];
    const manifest = {
      schema: 'roboguide.e1.batch/v0.1',
      image: DRIVER_IMAGE,
      jobs: ids.map((id) => ({
        job_id: id,
        argv: ['/opt/driver/run', 'sleep=2', 'usage=1000', 'outcome=completed'],
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
    const states = new Set<string>();
    try {
      while (!done) {
        const now = new Date();
        const before = await readHotStatus(store, rt, now, procHostIdentity);
        const full = await readStatusFull(store, rt, now, procHostIdentity);
        const after = await readHotStatus(store, rt, now, procHostIdentity);
        // Compared only when nothing moved while the full derivation read every file.
        if (before !== null && after !== null && JSON.stringify(before) === JSON.stringify(after)) {
          expect(before).toEqual(full);
          compared++;
          states.add(`${before.counts.completed}/${before.running.length}`);
        }
        await new Promise((r) => setTimeout(r, 50));
      }
      expect(await supervising).toBe('drained');
    } finally {
      await supervising.catch(() => undefined);
      await sweep({ 'roboguide.batch': batchId });
    }
    expect(compared).toBeGreaterThan(3);
    expect(states.size).toBeGreaterThan(1); // seen at more than one point of the batch
    const now = new Date();
    expect(await readStatus(store, rt, now, procHostIdentity)).toEqual(
      await readStatusFull(store, rt, now, procHostIdentity),
    );
  });

  const jobs: CrashJob[] = [
    { id: 'k1', actions: ['numbered=2', 'usage=1000', 'outcome=completed'], expected: 'completed' },
    { id: 'k2', actions: ['numbered=2', 'outcome=infra'], expected: 'infrastructure_failure' },
  ];
  // after_result: result.json written after the last status.json, killed before `pair_finished`.
  // journal:pair_finished: the record durable, killed before status.json is rewritten.
  // write:status.json:renamed#2: status.json just written, killed before the next journal record.
  for (const site of ['after_result#1', 'journal:pair_finished#1', 'write:status.json:renamed#2']) {
    it(`after a SIGKILL at ${site}, status (in process and as a command) equals the full derivation`, async () => {
      const fx = await writeCrashFixture(await mkdtemp(join(work, 'crash-')), jobs);
      try {
        const killed = await runCli(startArgs(fx), { env: { ROBOGUIDE_FAILPOINT: site } });
        expect(killed.signal).toBe('SIGKILL');
        const store = new EvidenceStore(new NodeFileSystem(), fx.output);
        const now = new Date();
        expect(await readHotStatus(store, rt, now, procHostIdentity)).toBeNull(); // its supervisor is dead
        const full = await expectSameAsFull(
          () => readStatusFull(store, rt, now, procHostIdentity),
          () => readStatus(store, rt, now, procHostIdentity),
        );
        await expectSameAsFull(
          () => readStatusFull(store, rt, new Date(), procHostIdentity),
          () => statusCli(fx.output),
        );
        expect(full.state).toBe('paused');

        const drained = await resumeUntilDrained(fx, 3);
        expect(drained.lastState).toBe('drained');
        const final = await expectSameAsFull(
          () => readStatusFull(store, rt, new Date(), procHostIdentity),
          () => readStatus(store, rt, new Date(), procHostIdentity),
        );
        // k1 completes when the supervisor died after its container started (resume reattaches it); when it died
        // before (a busy machine: the status.json write comes first), k1 is never launched again: lost_worker.
        const k1 = final.failed?.pairs.find((p) => p.job_id === 'k1');
        expect(final.counts).toMatchObject({
          total: 2,
          completed: k1 === undefined ? 1 : 0,
          harness_failure: k1 === undefined ? 0 : 1,
          infrastructure_failure: 1,
          pending: 0,
          claimed: 0,
        });
        if (k1 !== undefined) expect(k1.reason).toBe('lost_worker');
      } finally {
        const id = await batchIdOf(fx);
        if (id) await sweep({ 'roboguide.batch': id });
      }
    });
  }
});
