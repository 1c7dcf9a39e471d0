/**
 * CPU-only batches in parallel (issue 40 item 5), through the CLI on the real engine: a manifest with `max_workers: 2`
 * and no GPU anywhere (no job `gpus`/`gpu_mib`, no capacity GPU field) is accepted, runs two pairs at once from the
 * first pair on (no measured GPU peak is waited for: none could ever come), and `e1-batch status` says the rule in
 * force. Before: the manifest was refused (exit 2, the three GPU fields "required when max_workers is 2").
 * Also one of the fresh-engine check's suites (scripts/fresh-engine-check.sh): a small batch on a new engine.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../support/cli.js';
import { DRIVER_IMAGE, noDocker } from '../support/docker.js';

let work: string;

function manifest(jobs: [string, string[]][], capacity: Record<string, unknown>): string {
  return JSON.stringify({
    schema: 'roboguide.e1.batch/v0.1',
    image: DRIVER_IMAGE,
    jobs: jobs.map(([id, actions]) => ({
      job_id: id,
      argv: ['/opt/driver/run', ...actions],
      cwd: join(work, 'cwd'),
      outcome_path: join(work, 'out', `${id}.json`),
      timeout_seconds: 60,
      network: 'none',
    })),
    stop_budget_seconds: 5,
    capacity,
  });
}

async function times(
  output: string,
  id: string,
): Promise<{ start: number; end: number; classification: string }> {
  const r = JSON.parse(await readFile(join(output, 'jobs', id, 'result.json'), 'utf8')) as {
    started_at: string;
    finished_at: string;
    classification: string;
  };
  return {
    start: Date.parse(r.started_at),
    end: Date.parse(r.finished_at),
    classification: r.classification,
  };
}

describe.skipIf(noDocker)('a CPU-only batch with max_workers 2 (issue 40)', () => {
  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'rg-cpu-only-'));
  });
  afterAll(async () => {
    await rm(work, { recursive: true, force: true });
  });

  it('is accepted without GPU numbers, runs two pairs at once from the first, and status says the rule', async () => {
    const path = join(work, 'manifest.json');
    await writeFile(
      path,
      manifest(
        [
          ['c1', ['sleep=3', 'outcome=completed']],
          ['c2', ['sleep=3', 'outcome=completed']],
          ['c3', ['sleep=1', 'exit=3']],
        ],
        { max_workers: 2 },
      ),
    );
    const output = join(work, 'batch');
    const started = await cli(
      [
        'e1-batch',
        'start',
        '--manifest',
        path,
        '--output',
        output,
        '--registry',
        join(work, 'registry.db'),
        '--foreground',
      ],
      { timeoutMs: 150_000 },
    );
    expect(started.code, `${started.stdout}\n${started.stderr}`).toBe(0);
    expect(started.stdout).toMatch(/: drained/);
    const [c1, c2, c3] = [await times(output, 'c1'), await times(output, 'c2'), await times(output, 'c3')];
    expect([c1.classification, c2.classification, c3.classification]).toEqual([
      'completed',
      'completed',
      'infrastructure_failure',
    ]);
    // The second pair started while the first ran: no first pair alone, no GPU peak waited for.
    expect(c2.start).toBeLessThan(c1.end);
    const status = await cli(['e1-batch', 'status', '--output', output]);
    expect(status.code).toBe(0);
    expect(status.stdout).toContain('admission: CPU-only, by memory and CPU (2 workers');
    const json = JSON.parse((await cli(['e1-batch', 'status', '--output', output, '--json'])).stdout) as {
      workers_allowed: number;
      gpu_note: string;
    };
    expect(json.workers_allowed).toBe(2);
    expect(json.gpu_note).toMatch(
      /^admission: CPU-only, by memory and CPU \(2 workers; pairs at once within \d+ MiB and \d+ CPUs\)$/,
    );
  });

  it('a batch with GPU numbers keeps the seed rule: the first pair runs alone', async () => {
    const path = join(work, 'gpu.json');
    await writeFile(
      path,
      manifest(
        [
          ['g1', ['sleep=2', 'outcome=completed']],
          ['g2', ['sleep=2', 'outcome=completed']],
        ],
        { max_workers: 2, gpu_total_mib: 81559, gpu_baseline_mib: 1200, gpu_fraction: 0.9 },
      ),
    );
    const output = join(work, 'gpu-batch');
    const started = await cli(
      [
        'e1-batch',
        'start',
        '--manifest',
        path,
        '--output',
        output,
        '--registry',
        join(work, 'registry.db'),
        '--foreground',
      ],
      { timeoutMs: 150_000 },
    );
    expect(started.code, `${started.stdout}\n${started.stderr}`).toBe(0);
    const [g1, g2] = [await times(output, 'g1'), await times(output, 'g2')];
    expect(g2.start).toBeGreaterThanOrEqual(g1.end);
    const json = JSON.parse((await cli(['e1-batch', 'status', '--output', output, '--json'])).stdout) as {
      gpu_note: string;
    };
    expect(json.gpu_note).toBe('no measured GPU peak from a completed pair yet: serial');
  });
});
