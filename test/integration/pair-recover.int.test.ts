/**
 * A killed `pair run` is recoverable (issue 10 part 7): SIGKILL the CLI while its container runs, then
 * `pair recover` finds the container by its claim label, stops and removes it (inspect → 404), writes result.json
 * from the evidence and releases the slot once; a second recover releases nothing. The built CLI, real engine.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { containersLabelled, DRIVER_IMAGE, noDocker, runtime, sweep } from '../support/docker.js';
import { BIN, cli } from '../support/cli.js';

let work: string;
const claims: string[] = [];

async function readJson<T>(path: string): Promise<T | null> {
  try {
    return JSON.parse(await readFile(path, 'utf8')) as T;
  } catch {
    return null;
  }
}

interface Row {
  state: string;
  released_at: string | null;
}
function reservation(registry: string, claimId: string): Row | undefined {
  const db = new DatabaseSync(registry, { readOnly: true });
  try {
    return db.prepare('SELECT state, released_at FROM reservations WHERE claim_id = ?').get(claimId) as
      Row | undefined;
  } finally {
    db.close();
  }
}

describe.skipIf(noDocker)('pair recover', () => {
  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'rg-recover-'));
  });
  afterAll(async () => {
    for (const claim of claims) await sweep({ 'roboguide.claim': claim });
    await rm(work, { recursive: true, force: true });
  });

  it('after a SIGKILLed pair run: container stopped and removed, result written, slot released once', async () => {
    const registry = join(work, 'registry.db');
    const output = join(work, 'run-1');
    const spec = join(work, 'spec.json');
    await writeFile(
      spec,
      JSON.stringify({
        job_id: 'killed-1',
        image: DRIVER_IMAGE,
        argv: ['/opt/driver/run', 'count', 'numbered=2', 'sleep=120', 'outcome=completed'],
        cwd: join(work, 'cwd'),
        outcome_path: join(work, 'out', 'killed-1.json'),
        timeout_seconds: 600,
      }),
    );
    const child = spawn(
      process.execPath,
      [
        '--disable-warning=ExperimentalWarning',
        BIN,
        'pair',
        'run',
        '--spec',
        spec,
        '--output',
        output,
        '--registry',
        registry,
      ],
      {
        stdio: 'ignore',
      },
    );
    const exited = new Promise<NodeJS.Signals | null>((res) =>
      child.on('close', (_code, signal) => res(signal)),
    );
    // Wait until the receipt names the container and the driver has printed its lines, then SIGKILL the CLI.
    let receipt: { claim_id: string; container_id: string | null } | null = null;
    for (
      let i = 0;
      i < 600 &&
      !(
        receipt?.container_id &&
        (await readFile(join(output, 'stdout.log'), 'utf8').catch(() => '')).includes('line 2')
      );
      i++
    ) {
      await new Promise((r) => setTimeout(r, 100));
      receipt = await readJson(join(output, 'receipt.json'));
    }
    expect(receipt?.container_id).toBeTruthy();
    claims.push(receipt!.claim_id);
    child.kill('SIGKILL');
    expect(await exited).toBe('SIGKILL');
    expect((await runtime().inspect(receipt!.container_id!))?.status).toBe('running');
    expect(reservation(registry, receipt!.claim_id)?.state).toBe('held');
    expect(await readJson(join(output, 'result.json'))).toBeNull();

    const first = await cli([
      'pair',
      'recover',
      '--output',
      output,
      '--registry',
      registry,
      '--stop-budget',
      '2',
      '--json',
    ]);
    expect(first.code, first.stderr).toBe(0);
    const report = JSON.parse(first.stdout) as {
      containers: string[];
      result: string;
      released_now: boolean;
      cleanup: { verified_absent: boolean };
    };
    expect(report).toMatchObject({
      containers: [receipt!.container_id],
      result: 'written',
      released_now: true,
      cleanup: { verified_absent: true },
    });
    expect(await runtime().inspect(receipt!.container_id!)).toBeNull();
    expect(await containersLabelled({ 'roboguide.claim': receipt!.claim_id })).toEqual([]);
    const result = await readJson<{
      classification: string;
      reasons: string[];
      claim_id: string;
      logs: { stdout: { bytes: number } };
    }>(join(output, 'result.json'));
    expect(result).toMatchObject({
      classification: 'harness_failure',
      reasons: ['lost_worker', 'outcome_missing'],
      claim_id: receipt!.claim_id,
    });
    expect(result?.logs.stdout.bytes).toBe(128); // the two numbered lines written before the kill are kept
    expect(await readJson(join(output, 'terminal-proof.json'))).not.toBeNull();
    const released = reservation(registry, receipt!.claim_id);
    expect(released?.state).toBe('released');

    const resultBytes = await readFile(join(output, 'result.json'));
    const second = await cli(['pair', 'recover', '--output', output, '--registry', registry, '--json']);
    expect(second.code, second.stderr).toBe(0);
    expect(JSON.parse(second.stdout)).toMatchObject({ containers: [], result: 'kept', released_now: false });
    expect(reservation(registry, receipt!.claim_id)).toEqual(released);
    expect(await readFile(join(output, 'result.json'))).toEqual(resultBytes);
  });

  it('refuses a directory without a receipt, with exit 2 and nothing written', async () => {
    const empty = join(work, 'empty');
    spawnSync('mkdir', ['-p', empty]);
    const run = await cli(['pair', 'recover', '--output', empty, '--registry', join(work, 'registry.db')]);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/no receipt\.json/);
    expect(spawnSync('ls', ['-A', empty], { encoding: 'utf8' }).stdout).toBe('');
  });

  it('refuses an existing file that is no registry (exit 2), leaving it byte for byte unchanged', async () => {
    const empty = join(work, 'empty-notes');
    spawnSync('mkdir', ['-p', empty]);
    const notes = join(work, 'notes.txt');
    await writeFile(notes, 'my notes, not a database\n');
    const run = await cli(['pair', 'recover', '--output', empty, '--registry', notes]);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/not a roboguide-eval registry/);
    expect(await readFile(notes, 'utf8')).toBe('my notes, not a database\n');
    expect(spawnSync('ls', ['-A', work], { encoding: 'utf8' }).stdout).not.toMatch(/notes\.txt-(wal|shm)/);
  });

  it("refuses a --registry URL that is not PostgreSQL's (exit 2, the field named, the password nowhere), nothing written", async () => {
    const empty = join(work, 'empty-url');
    spawnSync('mkdir', ['-p', empty]);
    const run = await cli([
      'pair',
      'recover',
      '--output',
      empty,
      '--registry',
      'mysql://u:hunter2secret@db/rg',
    ]);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/--registry/);
    expect(run.stdout + run.stderr).not.toContain('hunter2secret');
    expect(spawnSync('ls', ['-A', empty], { encoding: 'utf8' }).stdout).toBe('');
  });

  it('a PostgreSQL URL whose server cannot be reached: a registry error without the password, nothing written', async () => {
    const empty = join(work, 'empty-pg-url');
    spawnSync('mkdir', ['-p', empty]);
    const run = await cli([
      'pair',
      'recover',
      '--output',
      empty,
      '--registry',
      'postgres://u:hunter2secret@db.invalid/rg',
    ]);
    expect(run.code).not.toBe(0);
    expect(run.stderr).toMatch(/registry/);
    expect(run.stdout + run.stderr).not.toContain('hunter2secret');
    expect(spawnSync('ls', ['-A', empty], { encoding: 'utf8' }).stdout).toBe('');
  });
});
