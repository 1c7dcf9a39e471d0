/**
 * Ctrl-C as an operator meets it (issue 40 item 4), the real CLI in a child process without a terminal, on the real
 * engine:
 * - `pair run` with an agent that ignores SIGTERM: the first SIGINT says the stop budget and that a second Ctrl-C
 *   kills now; the second kills now (not after the 240 s budget): the container is removed (inspect: 404), the
 *   evidence kept, the result says `terminated`, and the command exits by SIGINT (a shell's 130).
 * - `e1-batch start --foreground`: progress lines while it runs, what Ctrl-C does, and exit 130 when stopped by SIGINT
 *   (before: nothing printed, exit 0).
 */
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN } from '../support/cli.js';
import { DRIVER_IMAGE, noDocker, runtime } from '../support/docker.js';

let dir: string;

interface Child {
  readonly stderr: () => string;
  readonly stdout: () => string;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  kill(signal: NodeJS.Signals): void;
}

/** The CLI in a child process (no terminal, stdin closed), SIGKILLed after `limitMs` so a hang fails the test. */
function start(args: readonly string[], limitMs: number): Child {
  const child = spawn(process.execPath, ['--disable-warning=ExperimentalWarning', BIN, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout.setEncoding('utf8').on('data', (c: string) => (out += c));
  child.stderr.setEncoding('utf8').on('data', (c: string) => (err += c));
  const limit = setTimeout(() => child.kill('SIGKILL'), limitMs);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('close', (code, signal) => {
      clearTimeout(limit);
      resolve({ code, signal });
    }),
  );
  return { stderr: () => err, stdout: () => out, exited, kill: (s) => child.kill(s) };
}

async function until<T>(what: string, probe: () => Promise<T | null> | T | null, ms = 60_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const found = await probe();
    if (found !== null) return found;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe.skipIf(noDocker)('Ctrl-C (issue 40)', () => {
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'rg-ctrl-c-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('pair run: the first SIGINT says the budget and the second Ctrl-C; the second kills the agent now', async () => {
    const spec = join(dir, 'stubborn.json');
    const evidence = join(dir, 'stubborn-evidence');
    await writeFile(
      spec,
      JSON.stringify({
        job_id: 'stubborn',
        argv: ['/opt/driver/run', 'ignore_term', 'numbered=1', 'hang'],
        cwd: join(dir, 'stubborn'),
        outcome_path: join(dir, 'stubborn', 'out', 'o.json'),
        image: DRIVER_IMAGE,
        network: 'none',
        stop_budget_seconds: 240,
      }),
    );
    // Without the second Ctrl-C the agent would hold on for its 240 s budget: the limit fails the test long before.
    const child = start(['pair', 'run', '--spec', spec, '--output', evidence], 90_000);
    const containerId = await until('the container', async () => {
      const receipt = await readFile(join(evidence, 'receipt.json'), 'utf8').then(
        (t) => JSON.parse(t) as { container_id: string | null },
        () => null,
      );
      const id = receipt?.container_id ?? null;
      return id !== null && (await runtime().inspect(id))?.status === 'running' ? id : null;
    });
    // The agent ignores SIGTERM from its first action on: wait until it printed its line (it is past the trap).
    await until('the agent running', async () =>
      (await stat(join(evidence, 'stdout.log')).catch(() => null))?.size ? true : null,
    );
    child.kill('SIGINT');
    await until('the first announcement', () =>
      child.stderr().includes('press Ctrl-C again to kill it now') ? true : null,
    );
    expect(child.stderr()).toContain(
      'SIGINT: stopping: the agent has 240 s to exit after SIGTERM, then the container is removed; press Ctrl-C again to kill it now',
    );
    child.kill('SIGINT');
    const exit = await child.exited;
    expect(exit, child.stderr()).toEqual({ code: null, signal: 'SIGINT' }); // a shell reads 130
    expect(child.stderr()).toContain('SIGINT again: killing the agent now (SIGKILL)');
    expect(await runtime().inspect(containerId)).toBeNull();
    const result = JSON.parse(await readFile(join(evidence, 'result.json'), 'utf8')) as {
      reasons: string[];
      cleanup: { verified_absent: boolean };
      container: { exit_code: number | null };
    };
    expect(result.reasons).toContain('terminated');
    expect(result.cleanup.verified_absent).toBe(true);
    expect(result.container.exit_code).toBe(137); // killed, not a clean exit on SIGTERM
    expect((await readFile(join(evidence, 'stdout.log'), 'utf8')).length).toBeGreaterThan(0);
    expect(child.stdout()).toMatch(/^pair stubborn: infrastructure_failure \(terminated/m);
  }, 120_000);

  it('e1-batch start --foreground: progress while it runs, the Ctrl-C words, exit 130 when stopped', async () => {
    const manifest = join(dir, 'fg.json');
    const output = join(dir, 'fg-batch');
    await writeFile(
      manifest,
      JSON.stringify({
        schema: 'roboguide.e1.batch/v0.1',
        image: DRIVER_IMAGE,
        jobs: ['f1', 'f2', 'f3'].map((id) => ({
          job_id: id,
          argv: ['/opt/driver/run', 'sleep=4', 'outcome=completed'],
          cwd: join(dir, 'fg-cwd'),
          outcome_path: join(dir, 'fg-out', `${id}.json`),
          network: 'none',
        })),
        stop_budget_seconds: 5,
      }),
    );
    const args = ['e1-batch', 'start', '--manifest', manifest, '--output', output, '--foreground'];
    const child = start([...args, '--registry', join(dir, 'registry.db')], 120_000);
    await until('a progress line naming the running pair', () =>
      /progress: 0\/3 finished \(0 completed, 0 failed\); running: f1/.test(child.stderr()) ? true : null,
    );
    expect(child.stderr()).toContain(
      'Ctrl-C: stop the batch; twice: terminate its running pairs; three times: kill them now',
    );
    child.kill('SIGINT');
    const exit = await child.exited;
    expect(exit, child.stderr()).toEqual({ code: 130, signal: null });
    expect(child.stderr()).toContain('SIGINT: stopping the batch: no new pair starts');
    expect(child.stderr()).toContain(`e1-batch resume --output ${output}`);
    // The running pair finished and was archived; the rest were never started.
    expect(child.stderr()).toMatch(/progress: 1\/3 finished \(1 completed, 0 failed\); running: none/);
    expect(child.stdout()).toMatch(/: stopped \(/);
    await expect(stat(join(output, 'jobs', 'f3', 'receipt.json'))).rejects.toMatchObject({ code: 'ENOENT' });
  }, 150_000);

  it('e1-batch start --foreground: a third Ctrl-C kills the running pairs now instead of waiting out their budget', async () => {
    const manifest = join(dir, 'fg-kill.json');
    const output = join(dir, 'fg-kill-batch');
    await writeFile(
      manifest,
      JSON.stringify({
        schema: 'roboguide.e1.batch/v0.1',
        image: DRIVER_IMAGE,
        jobs: [
          {
            job_id: 'k1',
            argv: ['/opt/driver/run', 'ignore_term', 'numbered=1', 'hang'],
            cwd: join(dir, 'fg-kill-cwd'),
            outcome_path: join(dir, 'fg-kill-out', 'k1.json'),
            network: 'none',
          },
        ],
        // Without the third Ctrl-C the pair would hold on for 240 s: the test's limit fails long before.
        stop_budget_seconds: 240,
      }),
    );
    const args = ['e1-batch', 'start', '--manifest', manifest, '--output', output, '--foreground'];
    const child = start([...args, '--registry', join(dir, 'registry-kill.db')], 100_000);
    await until('the pair running', () => (/running: k1/.test(child.stderr()) ? true : null));
    await until('the agent past its trap', async () =>
      (await stat(join(output, 'jobs', 'k1', 'stdout.log')).catch(() => null))?.size ? true : null,
    );
    const receipt = JSON.parse(await readFile(join(output, 'jobs', 'k1', 'receipt.json'), 'utf8')) as {
      container_id: string;
    };
    child.kill('SIGINT');
    await until('the first announcement', () =>
      child.stderr().includes('stopping the batch') ? true : null,
    );
    child.kill('SIGINT');
    await until('the second announcement', () =>
      child.stderr().includes('press Ctrl-C once more to kill them now') ? true : null,
    );
    child.kill('SIGINT');
    const exit = await child.exited;
    expect(exit, child.stderr()).toEqual({ code: 130, signal: null });
    expect(child.stderr()).toContain('SIGINT a third time: killing the running pairs now (SIGKILL)');
    expect(await runtime().inspect(receipt.container_id)).toBeNull();
    const result = JSON.parse(await readFile(join(output, 'jobs', 'k1', 'result.json'), 'utf8')) as {
      reasons: string[];
      cleanup: { verified_absent: boolean };
      container: { exit_code: number | null };
    };
    expect(result.reasons).toContain('terminated');
    expect(result.cleanup.verified_absent).toBe(true);
    expect(result.container.exit_code).toBe(137);
  }, 120_000);
});
