/**
 * Issue 40, what an operator reads, end to end through the checkout's launcher on the real engine: why a batch or a
 * pair stopped and the next command (a crashed agent, a provider status, a pause, a finished batch), every manifest
 * error in one run and grouped, a reused output folder said once, `stop` on a batch with no supervisor, no JSON log
 * lines on a terminal, the launcher in an unbuilt checkout, and output into a closed pipe.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { copyFile, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DRIVER_IMAGE, expectNoContainersLeft, noDocker } from '../support/docker.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const LAUNCHER = join(ROOT, 'bin', 'roboguide-eval');
const tag = `ow${Date.now().toString(36)}`;
const CRASH = `${tag}-crash`;
const LIMITED = `${tag}-429`;
const AFTER = `${tag}-after`;
let tmp: string;
let env: NodeJS.ProcessEnv;
const jobs: string[] = [];

/** The launcher as a user types it, from `tmp` (so `./batch` is a path as typed). */
function rg(args: string[], extra: NodeJS.ProcessEnv = {}) {
  const r = spawnSync(LAUNCHER, args, {
    cwd: tmp,
    env: { ...env, ...extra },
    encoding: 'utf8',
    timeout: 180_000,
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

function job(id: string, argv: string[]) {
  return {
    job_id: id,
    argv: ['/opt/driver/run', ...argv],
    cwd: join(tmp, 'cwd'),
    outcome_path: join(tmp, 'out', `${id}.json`),
    timeout_seconds: 60,
  };
}

beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'rg-words-'));
  await mkdir(join(tmp, 'cwd'));
  await mkdir(join(tmp, 'out'));
  env = { ...process.env, XDG_STATE_HOME: join(tmp, 'state') };
});
afterAll(async () => {
  await expectNoContainersLeft(jobs);
  await rm(tmp, { recursive: true, force: true });
});

describe('the launcher and the pipe (no engine)', () => {
  it('an unbuilt checkout says what to run (npm ci && npm run build), never "install Node 24"', async () => {
    const copy = join(tmp, 'checkout');
    await mkdir(join(copy, 'bin'), { recursive: true });
    await mkdir(join(copy, 'src'));
    for (const f of ['roboguide-eval', 'run.js']) await copyFile(join(ROOT, 'bin', f), join(copy, 'bin', f));
    await copyFile(join(ROOT, 'package.json'), join(copy, 'package.json'));
    const bare = spawnSync('sh', [join(copy, 'bin', 'roboguide-eval'), 'e1-batch', 'status', '--help'], {
      encoding: 'utf8',
      env: { ...env, PATH: `${join(ROOT, 'node_modules', 'node', 'bin')}:/usr/bin:/bin` },
    });
    expect(bare.status).toBe(1);
    expect(bare.stderr).toContain(`this checkout (${copy}) is not installed yet (no node_modules)`);
    expect(bare.stderr).toContain('Run in it: npm ci && npm run build');
    expect(bare.stderr).toContain('npm run demo');
    expect(bare.stderr).not.toContain('nvm install');
    await symlink(join(ROOT, 'node_modules'), join(copy, 'node_modules'));
    const unbuilt = spawnSync('sh', [join(copy, 'bin', 'roboguide-eval'), 'e1-batch', 'status', '--help'], {
      encoding: 'utf8',
      env,
    });
    expect(unbuilt.status).toBe(1);
    expect(unbuilt.stderr).toContain('is not built yet (no dist)');
    expect(unbuilt.stderr).toContain('Run in it: npm run build');
  });

  it('help into a closed pipe (`| head -1`) ends quietly with exit 0', () => {
    for (const args of ['--help', 'e1-batch --help', 'pair run --help']) {
      const r = spawnSync('bash', ['-c', `"${LAUNCHER}" ${args} | head -1; echo "rc=\${PIPESTATUS[0]}"`], {
        encoding: 'utf8',
        env,
      });
      expect(r.stdout, args).toMatch(/\nrc=0\n$/);
      expect(r.stderr, args).toBe('');
    }
  });
});

describe.skipIf(noDocker)('a batch that stops, on the real engine: why, and what next', () => {
  let manifest: string;
  let start: { code: number | null; stdout: string; stderr: string };
  beforeAll(async () => {
    manifest = join(tmp, 'manifest.json');
    jobs.push(CRASH, LIMITED, AFTER);
    await writeFile(
      manifest,
      JSON.stringify({
        schema: 'roboguide.e1.batch/v0.1',
        image: DRIVER_IMAGE,
        jobs: [
          job(CRASH, ['stderr_bytes=256', 'exit=3']),
          job(LIMITED, ['outcome=provider_status=429']),
          job(AFTER, ['outcome=completed']), // not dispatched: the provider pause holds it back
        ],
      }),
    );
    start = rg(['e1-batch', 'start', '--manifest', manifest, '--output', './batch', '--foreground']);
  }, 300_000);

  it('status of the paused batch: the crashed agent (exit code, stderr tail, path), the 429 and its setting, resume as typed', () => {
    expect(start.stdout, start.stderr).toContain('paused');
    const s = rg(['e1-batch', 'status', '--output', './batch']);
    const batch = join(tmp, 'batch');
    expect(s.stdout).toContain(
      `failed ${CRASH}  infrastructure_failure: outcome_missing (outcome: no file at ROBOGUIDE_OUTCOME_PATH when the container exited (the agent exited with code 3: see the end of its stderr.log))`,
    );
    expect(s.stdout).toContain(
      'the agent exited with code 3 without writing its outcome: it crashed or gave up',
    );
    expect(s.stdout).toMatch(/last lines of its stderr:\n(\s+\| roboguide-log-line.*\n)+/);
    expect(s.stdout).toContain(`its whole stderr: ${batch}/jobs/${CRASH}/stderr.log`);
    expect(s.stdout).toContain(`failed ${LIMITED}  provider_stop: provider_status_not_allowed`);
    expect(s.stdout).toContain('the driver reported HTTP 429 from the provider');
    expect(s.stdout).toContain('"provider.allowed_http_statuses": [429]');
    expect(s.stdout).toMatch(/^why \(provider\): /m);
    expect(s.stdout).toContain(
      `next: fix what the reason names, then ${LAUNCHER} e1-batch resume --output ./batch`,
    );
  });

  it("result.json's outcome_problems and the report's row name the agent's exit code", async () => {
    const result = JSON.parse(await readFile(join(tmp, 'batch', 'jobs', CRASH, 'result.json'), 'utf8')) as {
      classification: string;
      outcome_problems: { message: string }[];
    };
    expect(result.classification).toBe('infrastructure_failure'); // the frozen contract: no outcome, no verdict
    expect(result.outcome_problems[0]?.message).toContain('the agent exited with code 3');
    expect(rg(['e1-batch', 'report', '--output', './batch']).code).toBe(0);
    const html = await readFile(join(tmp, 'batch', 'report.html'), 'utf8');
    expect(html).toContain('<li class="why">the agent exited with code 3 without writing its outcome');
    expect(html).toContain('<li class="why">if the driver recovers from it, list it there');
  });

  it('stop with no supervisor running says so, writes nothing and names the next command; on the finished batch too', () => {
    const paused = rg(['e1-batch', 'stop', '--output', './batch']);
    expect(paused.code).toBe(0);
    expect(paused.stdout).toContain('nothing to stop: no supervisor is running for this batch');
    expect(paused.stdout).toContain(`to go on: ${LAUNCHER} e1-batch resume --output ./batch`);
    expect(existsSync(join(tmp, 'batch', 'stop-request.json'))).toBe(false);
    const resumed = rg(['e1-batch', 'resume', '--output', './batch', '--foreground']);
    expect(resumed.code, resumed.stderr).toBe(0);
    const finished = rg(['e1-batch', 'stop', '--output', './batch']);
    expect(finished.code).toBe(0);
    expect(finished.stdout).toContain('nothing to stop: this batch has finished');
    expect(finished.stdout).toContain(`its report: ${LAUNCHER} e1-batch report --output ./batch`);
    expect(existsSync(join(tmp, 'batch', 'stop-request.json'))).toBe(false);
  });

  it('the same manifest into the same (finished) folder: one line about the folder, no per-job outcome_path lines', () => {
    const again = rg(['e1-batch', 'start', '--manifest', manifest, '--output', './batch']);
    expect(again.code).toBe(2);
    expect(again.stderr).toMatch(
      /output .*\/batch already holds batch e1-\S+ \(its last supervisor exited drained\)/,
    );
    expect(again.stderr).toContain('e1-batch report --output ./batch');
    expect(again.stderr).not.toContain('outcome_path');
  });
});

describe.skipIf(noDocker)('manifest errors and pair run', () => {
  it('every error of a manifest in one run: unset variables with literal-value errors, grouped, with hints', async () => {
    const manifest = join(tmp, 'bad.json');
    const many = Array.from({ length: 17 }, (_, i) => ({
      ...job(`${tag}-m${i}`, ['outcome=completed']),
      environment: { OPENAI_API_KEY: '${NU_OPENAI_KEY}' },
    }));
    const { timeout_seconds: _t, ...typo } = job(`${tag}-typo`, []);
    void _t;
    await writeFile(
      manifest,
      JSON.stringify({
        schema: 'roboguide.e1.batch/v0.1',
        image: DRIVER_IMAGE,
        max_workers: 2,
        jobs: [...many, { ...typo, timeout_secs: 60, environment: { HF_TOKEN: '$HF_TOKEN' } }],
      }),
    );
    const r = rg(['e1-batch', 'start', '--manifest', manifest, '--output', './never']);
    expect(r.code).toBe(2);
    const lines = r.stderr.split('\n');
    expect(lines.filter((l) => l.includes('NU_OPENAI_KEY'))).toEqual([
      `  jobs[*].environment.OPENAI_API_KEY: references \${NU_OPENAI_KEY}, which is not set or empty (17 jobs: ${tag}-m0, ${tag}-m1, ${tag}-m2, ${tag}-m3, ${tag}-m4, … and 12 more)`,
    ]);
    expect(r.stderr).toContain('unknown key "timeout_secs" (did you mean "timeout_seconds"?)');
    expect(r.stderr).toContain('unknown key "max_workers" here (it belongs under "capacity")');
    expect(r.stderr).toContain('(did you mean "${HF_TOKEN}"?)');
    expect(existsSync(join(tmp, 'never'))).toBe(false);
  });

  it('pair run of a crashing agent on a terminal: exit code, stderr tail and path; no JSON log lines', async () => {
    const id = `${tag}-pair`;
    jobs.push(id);
    const spec = join(tmp, 'pair.json');
    await writeFile(
      spec,
      JSON.stringify({ ...job(id, ['stderr_bytes=128', 'exit=3']), image: DRIVER_IMAGE }),
    );
    // `script` gives the command a terminal (stdout and stderr), as a user's shell would.
    const command = `"${LAUNCHER}" pair run --spec "${spec}" --output "${join(tmp, 'pair-run')}"`;
    const r = spawnSync('script', ['-qec', command, '/dev/null'], {
      cwd: tmp,
      env,
      encoding: 'utf8',
      timeout: 180_000,
    });
    const out = r.stdout.replace(/\r/g, '');
    expect(r.status).toBe(1);
    expect(out).toContain(`pair ${id}: infrastructure_failure (outcome_missing)`);
    expect(out).toContain('the agent exited with code 3 without writing its outcome');
    expect(out).toMatch(/\| roboguide-log-line/);
    expect(out).toContain(`its whole stderr: ${join(tmp, 'pair-run', 'stderr.log')}`);
    expect(out).toContain('warning: the outcome breaks the contract');
    expect(out).not.toContain('{"level"');
  });
});
