/**
 * A PostgreSQL registry reached over TCP with a password (scram-sha-256), end to end through the CLI (issue 13):
 * `--registry postgresql://USER:PASSWORD@127.0.0.1:PORT/DB` on `e1-batch start` (detached and `--foreground`),
 * `status`, `stop`, `resume` (the password again through PGPASSWORD: batch.json records the URL without it) and
 * `capacity`; then every byte written under the work folder (evidence, logs, outcomes, the supervisor's log) and
 * every CLI output is scanned for the password in every form. Skipped where PostgreSQL or Docker cannot run,
 * unless REQUIRE_POSTGRES=1.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parsePostgresUrl } from '../../src/adapters/registry/default-path.js';
import { PostgresCapacityRegistry } from '../../src/adapters/registry/postgres-capacity-registry.js';
import { DRIVER_IMAGE, noDocker, sweep } from '../support/docker.js';
import { listFilesRecursively } from '../support/files.js';
import { postgresSkipReason, startPostgres, type TestPostgres } from '../support/postgres.js';
import { cli as runCli, type CliOutput } from '../support/cli.js';
import { until } from '../support/until.js';

const skip = postgresSkipReason() ?? (noDocker ? 'no Docker engine' : null);
const ALNUM = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

let server: TestPostgres | null = null;
let work = '';
let password = '';
let url = '';
const outputs: string[] = [];

/** 32 random characters with a `+`, a `/` and a `@`, so that URL-encoded and JSON forms differ from the raw one. */
function randomPassword(): string {
  const pick = (n: number): string => [...randomBytes(n)].map((b) => ALNUM[b % ALNUM.length]).join('');
  return `${pick(12)}+${pick(10)}/${pick(5)}@${pick(2)}`;
}

/** Raw, URL-encoded (both hex cases), JSON-escaped and base64 at three alignments (the part only its bits make). */
function passwordForms(secret: string): string[] {
  const url = encodeURIComponent(secret);
  const base64 = [0, 1, 2].map((k) =>
    Buffer.from('x'.repeat(k) + secret)
      .toString('base64')
      .slice(Math.ceil((8 * k) / 6), Math.floor((8 * (k + secret.length)) / 6)),
  );
  return [
    secret,
    url,
    url.replace(/%[0-9A-F]{2}/g, (h) => h.toLowerCase()),
    JSON.stringify(secret).slice(1, -1),
    ...base64,
  ];
}

/** The CLI as a user runs it, without PGPASSWORD unless given. Its outputs are kept for the scan. */
async function cli(args: readonly string[], env: Readonly<Record<string, string>> = {}): Promise<CliOutput> {
  const out = await runCli(args, { env: { PGPASSWORD: undefined, ...env } });
  outputs.push(out.stdout, out.stderr);
  return out;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function manifest(name: string, count: number, sleepSeconds: number): Promise<string> {
  const dir = join(work, name);
  const path = join(work, `${name}.json`);
  await writeFile(
    path,
    JSON.stringify({
      schema: 'roboguide.e1.batch/v0.1',
      image: DRIVER_IMAGE,
      stop_budget_seconds: 5,
      jobs: Array.from({ length: count }, (_, i) => ({
        job_id: `${name}-${i}`,
        argv: ['/opt/driver/run', `sleep=${sleepSeconds}`, 'outcome=completed'],
        cwd: join(dir, 'cwd'),
        outcome_path: join(dir, 'out', `${name}-${i}.json`),
        timeout_seconds: 60,
      })),
    }),
  );
  return path;
}

async function statusOf(output: string): Promise<{ state: string; counts: Record<string, number> }> {
  const status = await cli(['e1-batch', 'status', '--output', output, '--json']);
  expect(status.code, status.stderr).toBe(0);
  return JSON.parse(status.stdout) as { state: string; counts: Record<string, number> };
}

/** Polls status until the batch is in one of `states`; the last state seen when it never gets there. */
async function waitFor(output: string, states: readonly string[], timeoutMs: number): Promise<string> {
  let last = '';
  const seen = async (): Promise<string | undefined> => {
    last = (await statusOf(output)).state;
    return states.includes(last) ? last : undefined;
  };
  return until(seen, `state ${states.join(' or ')}`, { timeoutMs, intervalMs: 500 }).catch(() => last);
}

async function registryHeld(): Promise<number> {
  const location = parsePostgresUrl(url);
  const registry = await PostgresCapacityRegistry.open({
    connection: location.connection,
    display: location.path,
    maxConnections: 1,
  });
  try {
    return (await registry.held()).length;
  } finally {
    await registry.close();
  }
}

if (skip !== null) {
  describe.skip(`PostgreSQL registry with a password: ${skip}`, () => {
    it('needs PostgreSQL and Docker', () => undefined);
  });
} else {
  beforeAll(async () => {
    server = startPostgres({ tcp: true });
    work = await mkdtemp(join(tmpdir(), 'rg-pgpw-'));
    password = randomPassword();
    await server.createPasswordUser('rg_batch', password, 'rg_pw');
    url = `postgresql://rg_batch:${encodeURIComponent(password)}@127.0.0.1:${server.port}/rg_pw`;
  });
  afterAll(async () => {
    server?.stop();
    for (const job of ['fg-0', 'fg-1', 'bg-0', 'bg-1', 'bg-2', 'bg-3'])
      await sweep({ 'roboguide.job': job }).catch(() => 0);
    await rm(work, { recursive: true, force: true });
  });

  describe('PostgreSQL registry over TCP with a password (scram-sha-256)', () => {
    it('start --foreground with the password in --registry runs the batch (the supervisor reopens the registry with it)', async () => {
      const output = join(work, 'fg', 'batch');
      const started = await cli([
        'e1-batch',
        'start',
        '--manifest',
        await manifest('fg', 2, 0),
        '--output',
        output,
        '--registry',
        url,
        '--foreground',
        '--json',
      ]);
      expect(started.code, started.stderr).toBe(0);
      expect(JSON.parse(started.stdout)).toMatchObject({ state: 'drained' });
      expect((await statusOf(output)).counts).toMatchObject({ completed: 2 });
      const recorded = JSON.parse(await readFile(join(output, 'batch.json'), 'utf8')) as {
        registry_path: string;
      };
      expect(recorded.registry_path).toBe(`postgres://rg_batch@127.0.0.1:${server!.port}/rg_pw`);
    });

    it('a server that asks for a password none was given: refused at once, and the half-open connection is closed', async () => {
      // The server keeps a connection stuck in its password exchange until authentication_timeout (a minute): the
      // registry must close it itself, or the refused command lingers that long before it exits.
      const tcp = (): number => process.getActiveResourcesInfo().filter((r) => r === 'TCPSocketWrap').length;
      const before = tcp();
      const saved = process.env['PGPASSWORD'];
      delete process.env['PGPASSWORD'];
      try {
        const { connection } = parsePostgresUrl(`postgresql://rg_batch@127.0.0.1:${server!.port}/rg_pw`);
        await expect(
          PostgresCapacityRegistry.open({ connection, display: 'the test registry' }),
        ).rejects.toThrow(/asks for a password and none was given/);
      } finally {
        if (saved !== undefined) process.env['PGPASSWORD'] = saved;
      }
      await new Promise((r) => setTimeout(r, 100)); // a destroyed socket's handle closes on the next turns
      expect(tcp()).toBe(before);
    });

    it('detached start, status, stop; resume without the password is refused saying how to give it; with PGPASSWORD it finishes', async () => {
      const output = join(work, 'bg', 'batch');
      const started = await cli([
        'e1-batch',
        'start',
        '--manifest',
        await manifest('bg', 4, 2),
        '--output',
        output,
        '--registry',
        url,
        '--json',
      ]);
      expect(started.code, started.stderr).toBe(0);
      // Stop once the first pair has finished: the batch is left with pairs to resume.
      const deadline = Date.now() + 60_000;
      while ((await statusOf(output)).counts['completed'] === 0 && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 300));
      const stopped = await cli(['e1-batch', 'stop', '--output', output]);
      expect(stopped.code, stopped.stderr).toBe(0);
      expect(await waitFor(output, ['stopped', 'drained'], 60_000)).toBe('stopped');
      // The supervisor records its stop before its process ends: resume refuses a live one, so wait for the end.
      const { supervisor_pid: pid } = JSON.parse(started.stdout) as { supervisor_pid: number };
      for (let i = 0; i < 300 && alive(pid); i++) await new Promise((r) => setTimeout(r, 100));
      expect(alive(pid)).toBe(false);
      const before = await statusOf(output);
      expect(before.counts['completed']).toBeLessThan(4);

      const refused = await cli(['e1-batch', 'resume', '--output', output, '--foreground']);
      expect(refused.code).not.toBe(0);
      expect(refused.stderr).toContain(`postgres://rg_batch@127.0.0.1:${server!.port}/rg_pw`);
      expect(refused.stderr).toMatch(/password/i);
      expect(refused.stderr).toContain('PGPASSWORD');
      expect((await statusOf(output)).counts).toEqual(before.counts);

      const wrong = await cli(['e1-batch', 'resume', '--output', output, '--foreground'], {
        PGPASSWORD: 'not-the-password-at-all',
      });
      expect(wrong.code).not.toBe(0);
      expect(wrong.stderr).toMatch(/password authentication failed/);
      expect(wrong.stderr).not.toContain('not-the-password-at-all');

      const resumed = await cli(['e1-batch', 'resume', '--output', output], { PGPASSWORD: password });
      expect(resumed.code, resumed.stderr).toBe(0);
      expect(await waitFor(output, ['drained'], 90_000)).toBe('drained');
      expect((await statusOf(output)).counts).toMatchObject({ completed: 4 });
      expect(await registryHeld()).toBe(0);

      const capacity = await cli(['capacity', '--registry', url, '--json']);
      expect(capacity.code, capacity.stderr).toBe(0);
      const badLogin = await cli([
        'capacity',
        '--registry',
        url.replace(encodeURIComponent(password), 'Wrong-Password-123'),
        '--json',
      ]);
      expect(badLogin.code).not.toBe(0);
      expect(`${badLogin.stdout}${badLogin.stderr}`).toMatch(/password authentication failed/);
      expect(`${badLogin.stdout}${badLogin.stderr}`).not.toContain('Wrong-Password-123');
    });

    it('the password is nowhere on disk under the work folder, nor in any CLI output', async () => {
      const forms = passwordForms(password);
      const files = await listFilesRecursively(work);
      let bytes = 0;
      const hits: string[] = [];
      for (const file of files) {
        const text = (await readFile(file)).toString('latin1');
        bytes += text.length;
        for (const form of forms)
          if (text.includes(form)) hits.push(`${relative(work, file)}: ${forms.indexOf(form)}`);
      }
      for (const [i, out] of outputs.entries())
        for (const form of forms)
          if (out.includes(form)) hits.push(`cli output ${i}: ${forms.indexOf(form)}`);
      console.info(
        `password scan: ${files.length} files, ${bytes} bytes, ${outputs.length} CLI outputs, ${forms.length} forms: ${hits.length} hits`,
      );
      expect(files.some((f) => f.endsWith('supervisor.log'))).toBe(true);
      expect(hits).toEqual([]);
    });
  });
}
