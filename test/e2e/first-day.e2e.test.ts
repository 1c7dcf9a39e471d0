/**
 * A new user's first day (issue 24), as docs/driver.md tells it: every `sh first-day` block of that page runs, in
 * order, in one shell from the root of this checkout — build the example image, try one pair, run a small batch in
 * which one driver forgets the outcome's two flags. Then: the problem is named in result.json, in `e1-batch
 * status` (human and --json) and in the report; the image was pinned by id; reconcile finds the batch's registry on
 * its own. Real engine, the real CLI through the checkout's launcher.
 */
import { spawnSync } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { containersLabelled, noDocker } from '../support/docker.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const LAUNCHER = join(ROOT, 'bin', 'roboguide-eval');
const IMAGE = 'roboguide-example/my-eval:1';

/** The runnable blocks of the page, in order. */
async function firstDayBlocks(): Promise<string[]> {
  const page = await readFile(join(ROOT, 'docs', 'driver.md'), 'utf8');
  return [...page.matchAll(/^```sh first-day\n([\s\S]*?)^```$/gm)].map((m) => m[1] ?? '');
}

let tmp: string;
let env: NodeJS.ProcessEnv;
let work: string;
let shell: { status: number | null; stdout: string; stderr: string };

function rg(args: string[]) {
  const r = spawnSync(LAUNCHER, args, { cwd: ROOT, env, encoding: 'utf8', timeout: 120_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe.skipIf(noDocker)('first day: docs/driver.md followed literally', () => {
  beforeAll(async () => {
    tmp = await mkdtemp(join(tmpdir(), 'rg-first-day-'));
    // Its own temporary folder (mktemp) and default registry location; nothing else differs from a user's shell.
    env = { ...process.env, TMPDIR: tmp, XDG_STATE_HOME: join(tmp, 'state') };
    const blocks = await firstDayBlocks();
    expect(blocks.length).toBeGreaterThanOrEqual(5);
    // The last line prints where the page worked, for the assertions below.
    const script = ['set -euo pipefail', ...blocks, 'echo "FIRST_DAY_WORK=$WORK"'].join('\n');
    const r = spawnSync('bash', ['-c', script], { cwd: ROOT, env, encoding: 'utf8', timeout: 600_000 });
    shell = { status: r.status, stdout: r.stdout, stderr: r.stderr };
    work = /FIRST_DAY_WORK=(.*)$/m.exec(shell.stdout)?.[1] ?? '';
  }, 620_000);
  afterAll(async () => {
    await rm(tmp, { recursive: true, force: true });
  });

  it('every block of the page runs without an error', () => {
    expect(shell.status, `${shell.stdout}\n${shell.stderr}`).toBe(0);
    expect(work.startsWith(tmp)).toBe(true);
  });

  it("start's hint names the command and the folder as the page typed them (absolute here), never npx", () => {
    expect(shell.stdout).toContain(`  follow it: ${LAUNCHER} e1-batch status --output ${work}/batch --watch`);
    expect(shell.stdout + shell.stderr).not.toContain('npx');
  });

  it('the dry run of one pair completed, and its evidence is where the page says', async () => {
    expect(shell.stdout).toMatch(/^pair try-0001: completed$/m);
    const result = JSON.parse(await readFile(join(work, 'try-run', 'result.json'), 'utf8')) as {
      classification: string;
      outcome_problems: unknown[];
    };
    expect([result.classification, result.outcome_problems]).toEqual(['completed', []]);
  });

  it("names the broken outcome rules in the failed pair's result.json", async () => {
    const result = JSON.parse(
      await readFile(join(work, 'batch', 'jobs', 'pair-0002', 'result.json'), 'utf8'),
    ) as Record<string, unknown>;
    expect([result.classification, result.reasons]).toEqual(['infrastructure_failure', ['outcome_invalid']]);
    expect(result.outcome_problems).toEqual([
      { path: 'infrastructure_failure', message: 'is required (true or false; there is no default)' },
      { path: 'fatal_failure', message: 'is required (true or false; there is no default)' },
    ]);
    const ok = JSON.parse(
      await readFile(join(work, 'batch', 'jobs', 'pair-0001', 'result.json'), 'utf8'),
    ) as Record<string, unknown>;
    expect(ok.classification).toBe('completed');
  });

  it('status names the failed pair and its first problem (human and --json), and only it', () => {
    const human = rg(['e1-batch', 'status', '--output', join(work, 'batch')]);
    expect(human.code).toBe(0);
    expect(human.stdout).toContain(
      'failed pair-0002  infrastructure_failure: outcome_invalid (infrastructure_failure: is required (true or false; there is no default))',
    );
    expect(human.stdout).not.toMatch(/failed pair-000[13]/);
    // The crashed agent (issue 40): its exit code, the end of its stderr and where the file is, as the page shows.
    expect(human.stdout).toContain(
      'failed pair-0004  infrastructure_failure: outcome_missing (outcome: no file at ROBOGUIDE_OUTCOME_PATH when the container exited (the agent exited with code 3: see the end of its stderr.log))',
    );
    expect(human.stdout).toContain(
      '    the agent exited with code 3 without writing its outcome: it crashed or gave up',
    );
    expect(human.stdout).toContain("      | KeyError: 'expected'");
    expect(human.stdout).toContain(`    its whole stderr: ${work}/batch/jobs/pair-0004/stderr.log`);
    expect(human.stdout).toContain(
      `next: ${LAUNCHER} e1-batch report --output ${work}/batch   (every job has a result)`,
    );
    expect(human.stdout).toContain('(max_workers 1: serial by the manifest)');
    const json = JSON.parse(rg(['e1-batch', 'status', '--output', join(work, 'batch'), '--json']).stdout) as {
      state: string;
      failed: { pairs: { job_id: string; reason: string; problem: string }[]; more: number };
    };
    expect(json.state).toBe('drained');
    expect(json.failed).toEqual({
      pairs: [
        expect.objectContaining({
          job_id: 'pair-0004',
          reason: 'outcome_missing',
        }),
        expect.objectContaining({
          job_id: 'pair-0002',
          reason: 'outcome_invalid',
          problem: 'infrastructure_failure: is required (true or false; there is no default)',
        }),
      ],
      more: 0,
    });
  });

  it("the report's row of the failed pair lists the broken rules and links the outcome copy", async () => {
    const html = await readFile(join(work, 'batch', 'report.html'), 'utf8');
    const row = /<tr class="k-infrastructure_failure" data-job="pair-0002">.*?<\/tr>/s.exec(html)?.[0] ?? '';
    expect(row).toContain(
      '<li>infrastructure_failure: is required (true or false; there is no default)</li>',
    );
    expect(row).toContain('<li>fatal_failure: is required (true or false; there is no default)</li>');
    expect(row).toContain('href="jobs/pair-0002/outcome/pair-0002.json"');
  });

  it('the image is pinned: batch.json and every receipt carry the id the tag had at start', async () => {
    const id = spawnSync('docker', ['image', 'inspect', '--format', '{{.Id}}', IMAGE], {
      encoding: 'utf8',
    }).stdout.trim();
    expect(id).toMatch(/^sha256:[0-9a-f]{64}$/);
    const batch = JSON.parse(await readFile(join(work, 'batch', 'batch.json'), 'utf8')) as {
      images: Record<string, string>;
    };
    expect(batch.images).toEqual({ [IMAGE]: id });
    for (const job of ['pair-0001', 'pair-0002', 'pair-0003']) {
      const receipt = JSON.parse(
        await readFile(join(work, 'batch', 'jobs', job, 'receipt.json'), 'utf8'),
      ) as Record<string, unknown>;
      expect([receipt.image, receipt.image_id]).toEqual([IMAGE, id]);
    }
  });

  it("reconcile finds the batch's registry without --registry, and refuses another one naming both", async () => {
    const batch = join(work, 'batch');
    const recorded = (
      JSON.parse(await readFile(join(batch, 'batch.json'), 'utf8')) as { registry_path: string }
    ).registry_path;
    const preview = rg(['reconcile', '--output', batch, '--preview']);
    expect(preview.code, preview.stdout + preview.stderr).toBe(0);
    expect(preview.stdout).toContain('pair-0002: already_committed');
    const other = join(tmp, 'other.db');
    const refused = rg(['reconcile', '--output', batch, '--preview', '--registry', other]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain(
      `--registry ${other} is not the registry the pairs of ${batch} were admitted in: the evidence records ${recorded}`,
    );
  });

  it('resume of the drained batch starts no supervisor: the journal gets no new record', async () => {
    const batch = join(work, 'batch');
    const before = await readFile(join(batch, 'events.jsonl'), 'utf8');
    const r = rg(['e1-batch', 'resume', '--output', batch]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('batch already drained: every job has a result; no supervisor started');
    expect(r.stdout).toContain(`${LAUNCHER} e1-batch report --output ${batch}`);
    expect(await readFile(join(batch, 'events.jsonl'), 'utf8')).toBe(before);
  });

  it('a tag rebuilt after start is reported by status, never followed', async () => {
    const pinned =
      (
        JSON.parse(await readFile(join(work, 'batch', 'batch.json'), 'utf8')) as {
          images: Record<string, string>;
        }
      ).images[IMAGE] ?? '';
    // Another image under the same tag: the pinned one plus a label.
    const built = spawnSync('docker', ['build', '-q', '-t', IMAGE, '-'], {
      input: `FROM ${pinned}\nLABEL first-day-moved=${Date.now()}\n`,
      encoding: 'utf8',
    });
    expect(built.status, built.stderr).toBe(0);
    const moved = built.stdout.trim();
    expect(moved).not.toBe(pinned);
    const status = rg(['e1-batch', 'status', '--output', join(work, 'batch')]);
    expect(status.stdout).toContain(
      `warning: image ${IMAGE} now names ${moved.slice(0, 19)}: this batch keeps running ${pinned.slice(0, 19)}, the image it had at start`,
    );
    const json = JSON.parse(rg(['e1-batch', 'status', '--output', join(work, 'batch'), '--json']).stdout) as {
      images_moved: unknown;
    };
    expect(json.images_moved).toEqual([{ image: IMAGE, pinned_id: pinned, current_id: moved }]);
    const report = rg(['e1-batch', 'report', '--output', join(work, 'batch')]);
    expect(report.code, report.stderr).toBe(0);
    expect(await readFile(join(work, 'batch', 'report.html'), 'utf8')).toContain(
      `warning: image ${IMAGE} now names ${moved.slice(0, 19)}`,
    );
    // Back as the page built it; the moved image goes (it only served this test).
    expect(spawnSync('docker', ['tag', pinned, IMAGE]).status).toBe(0);
    expect(spawnSync('docker', ['image', 'rm', moved]).status).toBe(0);
  });

  it('leaves no container behind', async () => {
    const batchId = (
      JSON.parse(await readFile(join(work, 'batch', 'batch.json'), 'utf8')) as { batch_id: string }
    ).batch_id;
    expect(await containersLabelled({ 'roboguide.batch': batchId })).toEqual([]);
    expect(await containersLabelled({ 'roboguide.job': 'try-0001' })).toEqual([]);
  });
});
