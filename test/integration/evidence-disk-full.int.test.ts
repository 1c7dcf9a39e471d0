/**
 * A full evidence disk (issue 27): `--output` on a 20 MiB tmpfs, five pairs of 6 MiB of stdout each, through the CLI.
 * The fourth pair fills the disk while its log is written; its result.json, status.json and journal writes then meet
 * ENOSPC. The batch pauses with the cause (the path that could not be written), the write failure is journalled
 * with its path, and once the tmpfs is remounted larger ONE `resume` drains the batch: the pair whose result could
 * not be written is `evidence_write_failed` (not `lost_worker`), every pair ran once, nothing is held in the
 * registry, no container is left and no temp file. Needs root (mount) and Docker; skipped visibly otherwise.
 */
import { execFileSync } from 'node:child_process';
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SqliteCapacityRegistry } from '../../src/adapters/registry/sqlite-capacity-registry.js';
import { containersLabelled, DRIVER_IMAGE, noDocker, sweep } from '../support/docker.js';
import { listFilesRecursively } from '../support/files.js';
import { cli } from '../support/cli.js';

const JOBS = ['d0', 'd1', 'd2', 'd3', 'd4'];
const LOG_BYTES = 6 * 1024 * 1024;
const skip = process.getuid?.() !== 0 ? 'needs root to mount a tmpfs' : noDocker ? 'no Docker engine' : null;

let work = '';
let mounted = '';
let batchId = '';

interface JournalLine {
  readonly type: string;
  readonly job_id?: string;
  readonly fault?: string;
  readonly path?: string;
  readonly err?: string;
  readonly reasons?: string[];
  readonly cause?: { code: string; message: string };
}

async function journal(output: string): Promise<JournalLine[]> {
  return (await readFile(join(output, 'events.jsonl'), 'utf8'))
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as JournalLine);
}

if (skip !== null) {
  describe.skip(`full evidence disk: ${skip}`, () => {
    it('needs root and Docker', () => undefined);
  });
} else {
  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'rg-diskfull-'));
    mounted = join(work, 'evidence');
    await mkdir(mounted);
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=20m', 'tmpfs', mounted]);
  });
  afterAll(async () => {
    if (batchId !== '') await sweep({ 'roboguide.batch': batchId }).catch(() => 0);
    if (mounted !== '') execFileSync('umount', [mounted]);
    await rm(work, { recursive: true, force: true });
  });

  describe('the evidence disk fills mid-batch (issue 27)', () => {
    it('pauses with the path it could not write; one resume after freeing room drains: evidence_write_failed, each pair once, nothing left', async () => {
      const cwd = join(work, 'cwd');
      const manifest = join(work, 'm.json');
      await writeFile(
        manifest,
        JSON.stringify({
          schema: 'roboguide.e1.batch/v0.1',
          image: DRIVER_IMAGE,
          stop_budget_seconds: 5,
          jobs: JOBS.map((id) => ({
            job_id: id,
            argv: ['/opt/driver/run', `stdout_bytes=${LOG_BYTES}`, 'outcome=completed'],
            cwd,
            outcome_path: join(cwd, 'out', `${id}.json`),
            timeout_seconds: 120,
          })),
        }),
      );
      const registryPath = join(work, 'registry.db');
      const output = join(mounted, 'batch');
      const started = await cli([
        'e1-batch',
        'start',
        '--manifest',
        manifest,
        '--output',
        output,
        '--registry',
        registryPath,
        '--foreground',
        '--json',
      ]);
      expect(started.code, started.stderr).toBe(0);
      const first = JSON.parse(started.stdout) as { batch_id: string; state: string };
      batchId = first.batch_id;
      expect(first.state).toBe('paused');

      const before = await journal(output);
      const fault = before.find((r) => r.type === 'harness_fault' && r.fault === 'result_write_failed');
      expect(fault).toMatchObject({
        job_id: 'd3',
        path: join(output, 'jobs', 'd3', 'result.json'),
        err: 'ENOSPC',
      });
      const paused = before.find((r) => r.type === 'paused');
      expect(paused?.reasons).toEqual(['harness']);
      expect(paused?.cause?.message).toContain(join(output, 'jobs', 'd3', 'result.json'));
      expect(paused?.cause?.message).toContain('ENOSPC');

      // Room again: remount larger. ONE resume finishes the batch.
      execFileSync('mount', ['-o', 'remount,size=200m', mounted]);
      const resumed = await cli(['e1-batch', 'resume', '--output', output, '--foreground', '--json']);
      expect(resumed.code, resumed.stderr).toBe(0);
      expect((JSON.parse(resumed.stdout) as { state: string }).state).toBe('drained');

      const d3 = JSON.parse(await readFile(join(output, 'jobs', 'd3', 'result.json'), 'utf8')) as {
        classification: string;
        reasons: string[];
      };
      expect(d3.classification).toBe('harness_failure');
      expect(d3.reasons).toContain('evidence_write_failed');
      expect(d3.reasons).not.toContain('lost_worker');
      for (const id of ['d0', 'd1', 'd2', 'd4']) {
        const r = JSON.parse(await readFile(join(output, 'jobs', id, 'result.json'), 'utf8')) as {
          classification: string;
        };
        expect(r.classification, id).toBe('completed');
      }
      const after = await journal(output);
      const claims = after.filter((r) => r.type === 'claimed').map((r) => r.job_id);
      expect(claims.sort()).toEqual(JOBS);
      expect(after.filter((r) => r.type === 'paused')).toHaveLength(1);
      const registry = SqliteCapacityRegistry.open({ path: registryPath });
      try {
        expect(await registry.held({ batchId })).toEqual([]);
      } finally {
        await registry.close();
      }
      expect(await containersLabelled({ 'roboguide.batch': batchId })).toEqual([]);
      const files = await listFilesRecursively(output);
      expect(files.filter((f) => /\/\.[^/]+\.tmp-\d+-[0-9a-f]{16}$/.test(f))).toEqual([]);
      expect((await readdir(join(output, 'jobs'))).sort()).toEqual(JOBS);
    });
  });
}
