/**
 * Bounded output (issue 10 part 6), against the real engine: a pair that writes 3 GiB to stdout under a 64 MiB
 * cap is stopped and classified `log_limit_exceeded` with its log kept to the cap plus the marker line, and a full
 * output file system mid-pair pauses the batch fail-closed with the slot held and every byte already written kept.
 */
import { isReceipt } from '../../src/core/receipt.js';
import { isResultRecord } from '../../src/core/result.js';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdir, mkdtemp, open, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EvidenceStore } from '../../src/app/evidence/evidence-store.js';
import { logLimitMarker } from '../../src/app/evidence/log-sink.js';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { SqliteCapacityRegistry } from '../../src/adapters/registry/sqlite-capacity-registry.js';
import { prepareBatch } from '../../src/app/batch/start-batch.js';
import { supervise } from '../../src/app/batch/supervisor.js';
import { systemClock } from '../../src/adapters/system-clock.js';
import { silentLogger } from '../../src/app/ports/logger.js';
import { createExecutePairDeps } from '../../src/composition-root.js';
import { containersLabelled, DRIVER_IMAGE, noDocker, runtime, sweep } from '../support/docker.js';
import { procHostIdentity } from '../../src/adapters/host-identity.js';

const rt = runtime();
const MIB = 1024 * 1024;
const isRoot = process.getuid?.() === 0;
let work: string;
let registryPath: string;
const batches: string[] = [];

interface JobDef {
  readonly id: string;
  readonly argv: readonly string[];
  readonly extra?: Record<string, unknown>;
}

const driver = (id: string, ...actions: string[]): JobDef => ({
  id,
  argv: ['/opt/driver/run', 'count', ...actions],
});

async function start(
  name: string,
  jobs: readonly JobDef[],
  output = join(work, name, 'batch'),
): Promise<{ store: EvidenceStore; batchId: string }> {
  const path = join(work, `${name}.json`);
  await writeFile(
    path,
    JSON.stringify({
      schema: 'roboguide.e1.batch/v0.1',
      image: DRIVER_IMAGE,
      jobs: jobs.map((j) => ({
        job_id: j.id,
        argv: j.argv,
        cwd: join(work, name, 'cwd'),
        outcome_path: join(work, name, 'out', `${j.id}.json`),
        timeout_seconds: 300,
        ...j.extra,
      })),
      stop_budget_seconds: 5,
    }),
  );
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
  batches.push(record.batch_id);
  return { store: new EvidenceStore(new NodeFileSystem(), output), batchId: record.batch_id };
}

function supervisorRun(store: EvidenceStore, mode: 'start' | 'resume') {
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

async function heldFor(batchId: string): Promise<string[]> {
  const registry = SqliteCapacityRegistry.open({ path: registryPath });
  try {
    return (await registry.held({ batchId })).map((r) => r.jobId);
  } finally {
    registry.closeSync();
  }
}

async function sha256(path: string): Promise<string> {
  return createHash('sha256')
    .update(await readFile(path))
    .digest('hex');
}

async function tail(path: string, bytes: number): Promise<string> {
  const size = (await stat(path)).size;
  const handle = await open(path, 'r');
  try {
    const buf = Buffer.alloc(Math.min(bytes, size));
    await handle.read(buf, 0, buf.length, size - buf.length);
    return buf.toString('utf8');
  } finally {
    await handle.close();
  }
}

/** The numbered driver lines a well-behaved neighbour writes: its evidence must be exactly these bytes. */
const numbered = (n: number): string =>
  Array.from({ length: n }, (_, i) => `${`line ${i + 1}`.padEnd(63)}\n`).join('');

describe.skipIf(noDocker)('bounded output', () => {
  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'rg-bounded-'));
    registryPath = join(work, 'registry.db');
  });
  afterAll(async () => {
    for (const id of batches) await sweep({ 'roboguide.batch': id });
    await rm(work, { recursive: true, force: true });
  });

  it('a pair writing 3 GiB to stdout under a 64 MiB cap is stopped, log_limit_exceeded, its log cap + marker; the others untouched', async () => {
    const cap = 64 * MIB;
    const { store, batchId } = await start('cap', [
      driver('n1', 'numbered=3', 'outcome=completed'),
      {
        id: 'spew',
        // busybox sh: 3 GiB of 64-byte lines, then an outcome that must never be reached.
        argv: [
          '/bin/sh',
          '-c',
          'yes 0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ01 | head -c 3221225472; echo reached > /tmp/done',
        ],
        extra: { log_limit_bytes: cap },
      },
      driver('n2', 'numbered=3', 'outcome=completed'),
    ]);
    expect(await supervisorRun(store, 'start')).toBe('drained');

    const spew = await store.readJson('jobs/spew/result.json', isResultRecord);
    expect(spew?.classification).toBe('infrastructure_failure');
    expect(spew?.reasons[0]).toBe('log_limit_exceeded');
    const marker = logLimitMarker(cap);
    const logPath = store.resolve('jobs/spew/stdout.log');
    expect((await stat(logPath)).size).toBe(cap + marker.length);
    expect(spew?.logs.stdout).toEqual({ bytes: cap + marker.length, closed: true, limit_exceeded: true });
    const line = '0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ01\n';
    const end = await tail(logPath, marker.length + 2 * line.length);
    expect(end.endsWith(marker)).toBe(true);
    expect(line.repeat(3)).toContain(end.slice(0, -marker.length));
    expect(spew?.cleanup.verified_absent).toBe(true);

    for (const id of ['n1', 'n2']) {
      const result = await store.readJson(`jobs/${id}/result.json`, isResultRecord);
      expect(result, id).toMatchObject({ classification: 'completed', reasons: [] });
      expect(await readFile(store.resolve(`jobs/${id}/stdout.log`), 'utf8'), id).toBe(numbered(3));
    }
    expect(await heldFor(batchId)).toEqual([]);
    expect(await containersLabelled({ 'roboguide.batch': batchId })).toEqual([]);
  });

  it.skipIf(!isRoot)(
    'a full output file system mid-pair pauses the batch before the next pair and keeps every byte written; one resume finishes it',
    async () => {
      const mountPoint = join(work, 'full-fs');
      await mkdir(mountPoint, { recursive: true });
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=8m', 'tmpfs', mountPoint]);
      try {
        const { store, batchId } = await start(
          'full',
          [
            driver('f1', 'stdout_bytes=16777216', 'outcome=completed'),
            driver('f2', 'numbered=3', 'outcome=completed'),
          ],
          join(mountPoint, 'batch'),
        );
        expect(await supervisorRun(store, 'start')).toBe('paused');
        const receipt = await store.readJson('jobs/f1/receipt.json', isReceipt);
        expect(receipt?.claim_id).toMatch(/^[0-9a-f-]{36}$/);
        // Usually the disk is still full when f1's result is due: no result.json, the slot held. But the log sink
        // stops at its first failed write, so a page freed after it (status.json, written off the pairs' path,
        // renamed over its older self) stays free, and result.json, then the terminal proof, may fit (seen under
        // CI load). Both are right: the batch pauses either way, f2 is not claimed, and f1 says what happened.
        const early = await store.readJson('jobs/f1/result.json', isResultRecord);
        if (early === null) {
          expect(await heldFor(batchId)).toEqual(['f1']);
        } else {
          expect(early.classification).toBe('harness_failure');
          expect(early.reasons).toContain('log_write_failed');
          const proved = await store.exists('jobs/f1/terminal-proof.json');
          expect(await heldFor(batchId)).toEqual(proved ? [] : ['f1']);
        }
        expect(await store.exists('jobs/f2/receipt.json')).toBe(false);
        expect(await containersLabelled({ 'roboguide.batch': batchId })).toEqual([]);
        const logPath = store.resolve('jobs/f1/stdout.log');
        const keptBytes = (await stat(logPath)).size;
        expect(keptBytes).toBeGreaterThan(MIB);
        // What was written is the driver's own bytes, whole 64-byte lines up to the last write that fit.
        const kept = await readFile(logPath, 'utf8');
        expect(kept.slice(0, 128)).toBe(
          'roboguide-log-line 0123456789abcdefghijklmnopqrstuvwxyz ABCDEFG\n'.repeat(2),
        );
        const keptSha = await sha256(logPath);
        const journalBefore = await readFile(store.resolve('events.jsonl'), 'utf8');

        execFileSync('mount', ['-o', 'remount,size=64m', mountPoint]);
        // One resume finishes the batch (issue 27): f1's result is rebuilt as the write failure it was
        // (evidence_write_failed, not lost_worker), or kept as written, which does not pause again, and f2 runs.
        expect(await supervisorRun(store, 'resume')).toBe('drained');
        expect(await sha256(logPath)).toBe(keptSha);
        expect((await readFile(store.resolve('events.jsonl'), 'utf8')).startsWith(journalBefore)).toBe(true);
        const f1 = await store.readJson('jobs/f1/result.json', isResultRecord);
        expect(f1?.classification).toBe('harness_failure');
        if (early === null) expect(f1?.reasons).toContain('evidence_write_failed');
        else expect(f1).toEqual(early);
        expect(f1?.reasons).not.toContain('lost_worker');
        expect(await store.readJson('jobs/f2/result.json')).toMatchObject({ classification: 'completed' });
        expect(await heldFor(batchId)).toEqual([]);
        expect(await containersLabelled({ 'roboguide.batch': batchId })).toEqual([]);
      } finally {
        execFileSync('umount', [mountPoint]);
      }
    },
  );
});
