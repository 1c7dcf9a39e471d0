import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { BIN, cli } from '../support/cli.js';

/**
 * `roboguide-eval metrics` as a user runs it (issue 45): bad input refused naming the flag and the rule (exit 2);
 * a bearer token checked; only GET /metrics served; read-only: a registry that does not exist is never created.
 */
let work: string;
let child: ChildProcess | null = null;

beforeEach(async () => {
  work = await mkdtemp(join(tmpdir(), 'rg-metrics-cli-'));
});
afterEach(async () => {
  if (child !== null && child.exitCode === null) {
    const exited = new Promise((resolve) => child!.once('exit', resolve));
    child.kill('SIGTERM');
    await exited;
  }
  child = null;
  await rm(work, { recursive: true, force: true });
});

async function start(args: readonly string[]): Promise<number> {
  const proc = spawn(process.execPath, ['--disable-warning=ExperimentalWarning', BIN, 'metrics', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child = proc;
  let out = '';
  const line = await new Promise<string>((resolve, reject) => {
    proc.stdout.setEncoding('utf8').on('data', (c: string) => {
      out += c;
      if (out.includes('\n')) resolve(out.slice(0, out.indexOf('\n')));
    });
    proc.once('exit', (code) => reject(new Error(`metrics exited ${code}`)));
  });
  return (JSON.parse(line) as { port: number }).port;
}

describe('roboguide-eval metrics (the exporter command)', () => {
  it('refuses a listen address that is not HOST:PORT, and one off loopback without a token (exit 2, naming the flag)', async () => {
    const bad = await cli(['metrics', '--listen', 'nowhere', '--batches', work, '--json']);
    expect(bad.code).toBe(2);
    expect(bad.stdout).toContain('--listen');
    const open = await cli(['metrics', '--listen', '0.0.0.0:0', '--batches', work, '--json']);
    expect(open.code).toBe(2);
    expect(open.stdout).toContain('--token-file');
    expect(open.stdout).toContain('not a loopback address');
  });

  it('checks the bearer token, serves GET /metrics only, and never creates the registry it reads', async () => {
    const tokenFile = join(work, 'token');
    const token = randomBytes(20).toString('hex');
    await writeFile(tokenFile, token, { mode: 0o600 });
    await mkdir(join(work, 'batches'));
    const registry = join(work, 'registry.db');
    const port = await start([
      '--listen',
      '127.0.0.1:0',
      '--token-file',
      tokenFile,
      '--batches',
      join(work, 'batches'),
      '--registry',
      registry,
    ]);
    const url = `http://127.0.0.1:${port}`;
    expect((await fetch(`${url}/metrics`)).status).toBe(401);
    expect((await fetch(`${url}/metrics`, { headers: { authorization: 'Bearer wrong' } })).status).toBe(401);
    const auth = { authorization: `Bearer ${token}` };
    expect((await fetch(`${url}/other`, { headers: auth })).status).toBe(404);
    expect((await fetch(`${url}/metrics`, { method: 'POST', headers: auth })).status).toBe(404);
    const ok = await fetch(`${url}/metrics`, { headers: auth });
    expect(ok.status).toBe(200);
    expect(ok.headers.get('content-type')).toContain('text/plain');
    const body = await ok.text();
    expect(body).toContain('roboguide_registry_up 0');
    expect(body).toContain('roboguide_exporter_batches_discovered 0');
    expect(existsSync(registry)).toBe(false);
  });
});
