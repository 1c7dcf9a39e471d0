import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:net';
import { mkdir, mkdtemp, readdir, readFile, realpath, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectNoContainersLeft, startTestServer, type TestServer } from '../../src/testing/index.js';
import { PACKAGE_ROOT } from '../../src/package-root.js';
import { cli } from '../support/cli.js';
import { DRIVER_IMAGE, noDocker } from '../support/docker.js';

/**
 * Host mounts are an allowlist by default (docs/spec.md 5.3): a session mount and a pair cwd must lie under the
 * default roots (home, /tmp, /work, /data, /scratch) or a --mount-root; --mount-root-only replaces the defaults.
 */
const SYSTEM_STATE = ['/var/lib/dpkg', '/var/lib/systemd', '/var/log', '/opt', '/srv', '/var/tmp'];
const RULE = /must lie under one of the allowed mount roots \((.*\/tmp.*); add one with --mount-root\)/;
const RUN = `it-allow-${randomUUID().slice(0, 8)}`;
const LABEL = { 'it.allowlist': RUN };

interface Refusal {
  error: { issues: { path: string; rule: string }[] };
}

let work: string;
let outside: string;
const servers: TestServer[] = [];

async function server(args: string[] = []): Promise<TestServer> {
  const s = await startTestServer({ clientMode: 'raw', extraArgs: args });
  servers.push(s);
  return s;
}

function session(s: TestServer, source: string): ReturnType<TestServer['client']['call']> {
  return s.client.call('POST', '/v1/sessions', {
    body: { image: DRIVER_IMAGE, labels: LABEL, mounts: [{ source, target: '/m' }] },
  });
}

async function expectSessionMounts(s: TestServer, source: string): Promise<void> {
  const res = await session(s, source);
  expect(res.status, `${source}: ${JSON.stringify(res.body)}`).toBe(201);
  const id = (res.body as { session_id: string }).session_id;
  const exec = await s.client.call<{ return_code: number }>('POST', `/v1/sessions/${id}/exec`, {
    body: { command: 'echo written > /m/by-session' },
  });
  expect(exec.body.return_code).toBe(0);
  expect(await readFile(join(source, 'by-session'), 'utf8')).toBe('written\n');
  expect((await s.client.call('DELETE', `/v1/sessions/${id}`)).status).toBe(200);
}

async function expectSessionRefused(s: TestServer, source: string, roots: RegExp): Promise<void> {
  const res = await session(s, source);
  expect(res.status, source).toBe(400);
  const issue = (res.body as Refusal).error.issues.find((i) => i.path === 'mounts[0].source');
  expect(issue?.rule, source).toMatch(/must lie under one of the allowed mount roots/);
  expect(issue?.rule, source).toMatch(roots);
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'rg-allowlist-'));
  // A folder outside every default root, to extend and replace the allowlist with.
  outside = await mkdtemp('/var/tmp/rg-allowlist-');
});

afterAll(async () => {
  for (const s of servers) await s.dispose();
  await expectNoContainersLeft(LABEL);
  await rm(work, { recursive: true, force: true });
  await rm(outside, { recursive: true, force: true });
});

describe.skipIf(noDocker)('host mounts are an allowlist by default', () => {
  it('a session mount of /var/lib/dpkg, /var/lib/systemd, /var/log, /opt, /srv or /var/tmp is refused (400, the rule and the roots named); one under /tmp is bound', async () => {
    const s = await server();
    for (const path of SYSTEM_STATE) await expectSessionRefused(s, path, RULE);
    const ok = join(work, 'session-ok');
    await mkdir(ok);
    await expectSessionMounts(s, ok);
  });

  it('pair run refuses each of them as its cwd (exit 2, the field, the rule and the roots named, nothing created)', async () => {
    for (const path of SYSTEM_STATE) {
      const cwd = join(path, `rg-never-${RUN}`);
      const spec = join(work, 'spec.json');
      await writeFile(
        spec,
        JSON.stringify({
          job_id: 'p',
          argv: ['/opt/driver/run'],
          cwd,
          outcome_path: join(cwd, 'out', 'o.json'),
          environment: {},
          ports: [],
          timeout_seconds: 60,
          image: DRIVER_IMAGE,
        }),
      );
      const run = await cli([
        'pair',
        'run',
        '--spec',
        spec,
        '--output',
        join(work, `never-${path.replaceAll('/', '_')}`),
      ]);
      expect(run.code, run.stderr).toBe(2);
      expect(run.stderr).toMatch(
        /cwd: must lie under one of the allowed mount roots \(.*\/tmp.*; add one with --mount-root\)/,
      );
      expect(await readdir(path), path).not.toContain(`rg-never-${RUN}`);
    }
    expect((await readdir(work)).filter((n) => n.startsWith('never-'))).toEqual([]);
  });

  it('--mount-root extends the defaults (both allowed); with --mount-root-only it replaces them (/tmp refused)', async () => {
    const extended = await server(['--mount-root', outside]);
    const there = join(outside, 'extended');
    await mkdir(there);
    await expectSessionMounts(extended, there);
    const here = join(work, 'still-allowed');
    await mkdir(here);
    await expectSessionMounts(extended, here);
    await expectSessionRefused(extended, '/opt', new RegExp(`${outside}; add one`));

    const only = await server(['--mount-root', outside, '--mount-root-only']);
    const alone = join(outside, 'only');
    await mkdir(alone);
    await expectSessionMounts(only, alone);
    await expectSessionRefused(only, here, new RegExp(`roots \\(${outside}; add one`));
  });

  it("the code root runs is never mountable: the package's launcher, build, sources and dependencies, the checkout or a folder above it, Node's own folder (an attacker edited bin/run.js through a /work session and root ran it)", async () => {
    const s = await server();
    const pkg = PACKAGE_ROOT;
    const code = [
      pkg,
      dirname(pkg),
      join(pkg, 'bin'),
      join(pkg, 'dist'),
      join(pkg, 'node_modules'),
      await realpath(join(pkg, 'node_modules')),
      join(pkg, 'src'),
      dirname(await realpath(process.execPath)),
    ];
    for (const source of code) {
      const res = await session(s, source);
      expect(res.status, `${source}: ${JSON.stringify(res.body)}`).toBe(400);
      const rules = (res.body as Refusal).error.issues.map((i) => i.rule).join('\n');
      // Under a default root (a checkout in /work, /tmp or home) the code rule refuses it; elsewhere the allowlist too.
      expect(rules, source).toMatch(
        /the code root runs|must lie under one of the allowed mount roots|must not be, contain or lie inside the system folder/,
      );
    }
    expect(await readdir(join(pkg, 'bin'))).toContain('run.js');
  });

  it("a source holding a host process's socket or FIFO is refused, read-only too (a root tmux socket's folder mounted read-only ran commands as host root)", async () => {
    const s = await server();
    const ipc = join(work, 'ipc');
    await mkdir(join(ipc, 'deeper'), { recursive: true });
    const listener = createServer(() => undefined);
    await new Promise<void>((resolve) => listener.listen(join(ipc, 'deeper', 'default'), resolve));
    try {
      for (const readOnly of [true, false]) {
        const res = await s.client.call('POST', '/v1/sessions', {
          body: {
            image: DRIVER_IMAGE,
            labels: LABEL,
            mounts: [{ source: ipc, target: '/m', read_only: readOnly }],
          },
        });
        expect(res.status, JSON.stringify(res.body)).toBe(400);
        const issue = (res.body as Refusal).error.issues.find((i) => i.path === 'mounts[0].source');
        expect(issue?.rule).toMatch(/holds .*deeper\/default, a socket or FIFO/);
      }
    } finally {
      await new Promise((resolve) => listener.close(resolve));
    }
    const fifo = join(work, 'fifo-cwd');
    await mkdir(fifo);
    execFileSync('mkfifo', [join(fifo, 'pipe')]);
    const res = await s.client.call('POST', '/v1/sessions', {
      body: { image: DRIVER_IMAGE, labels: LABEL, mounts: [{ source: fifo, target: '/m' }] },
    });
    expect(res.status).toBe(400);
    expect(JSON.stringify(res.body)).toMatch(/pipe, a socket or FIFO/);
  });
});
