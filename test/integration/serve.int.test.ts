import { randomUUID } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { tarOf, untar } from '../support/tar.js';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { SqliteCapacityRegistry } from '../../src/adapters/registry/sqlite-capacity-registry.js';
import {
  containersLabelled,
  expectNoContainersLeft,
  startTestServer,
  type ApiResponse,
  type TestServer,
} from '../../src/testing/index.js';
import { DRIVER_IMAGE, noDocker, runtime, engineIsPodman } from '../support/docker.js';
import { listFilesRecursively, scanForSecret } from '../support/files.js';
import { until } from '../support/until.js';

const SECRET = `s3cr3t-${randomUUID()}`;
const RUN = `it-serve-${randomUUID().slice(0, 8)}`;
const LABEL = { 'it.serve': RUN };
const rt = runtime();
const servers: TestServer[] = [];

interface Created {
  session_id: string;
  container_id: string;
  ports: Record<string, { host_ip: string; host_port: number }>;
}
interface ExecOut {
  stdout: string;
  stderr: string;
  return_code: number;
  timed_out: boolean;
  duration_ms: number;
}
interface Cleanup {
  session_id: string;
  verified_absent: boolean;
  slot_released: boolean;
  removed: boolean;
  stopped: boolean;
  reason: string;
}

async function server(options: Parameters<typeof startTestServer>[0] = {}): Promise<TestServer> {
  const s = await startTestServer({ env: { RG_TEST_SECRET: SECRET }, clientMode: 'raw', ...options });
  servers.push(s);
  return s;
}

async function createSession(s: TestServer, extra: Record<string, unknown> = {}): Promise<Created> {
  const res = await s.client.call<Created>('POST', '/v1/sessions', {
    body: { image: DRIVER_IMAGE, labels: LABEL, ...extra },
  });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body;
}

function exec(s: TestServer, id: string, body: Record<string, unknown>): Promise<ApiResponse<ExecOut>> {
  return s.client.call<ExecOut>('POST', `/v1/sessions/${id}/exec`, { body });
}

async function heldSlots(s: TestServer): Promise<number> {
  const registry = SqliteCapacityRegistry.open({ path: s.registryPath });
  try {
    return (await registry.held()).length;
  } finally {
    registry.closeSync();
  }
}

async function freePort(): Promise<number> {
  const srv = await new Promise<Server>((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => resolve(s));
  });
  const port = (srv.address() as { port: number }).port;
  await new Promise((resolve) => srv.close(resolve));
  return port;
}

describe.skipIf(noDocker)('serve: sessions and pairs through the API, real engine', () => {
  let shared: TestServer;
  let work: string;

  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'rg-serve-it-'));
    shared = await server();
  });
  afterEach(async () => {
    for (const s of shared ? [shared] : []) {
      const listed = await s.client.call<{ sessions: { session_id: string }[] }>('GET', '/v1/sessions');
      await Promise.all(
        listed.body.sessions.map((x) => s.client.call('DELETE', `/v1/sessions/${x.session_id}`)),
      );
    }
    await expectNoContainersLeft(LABEL);
  });
  afterAll(async () => {
    await Promise.all(servers.map((s) => s.dispose()));
    await rm(work, { recursive: true, force: true });
    await expectNoContainersLeft(LABEL);
  });

  it('health and the OpenAPI document', async () => {
    const health = await shared.client.call<{ ok: boolean; engine: { reachable: boolean; version: string } }>(
      'GET',
      '/v1/health',
    );
    expect(health.body).toMatchObject({ ok: true, engine: { reachable: true } });
    const doc = await shared.client.call<{ openapi: string; paths: Record<string, unknown> }>(
      'GET',
      '/v1/openapi.json',
    );
    expect(doc.body.openapi).toBe('3.1.0');
    expect(Object.keys(doc.body.paths)).toContain('/v1/sessions/{id}/exec');
  });

  it('session lifecycle: create, exec, upload, download, delete (verified, slot released once, idempotent)', async () => {
    const held = await heldSlots(shared);
    const s = await createSession(shared, { environment: { GREETING: 'hi' }, workdir: '/tmp' });
    expect(await heldSlots(shared)).toBe(held + 1);
    const inspected = await rt.docker.getContainer(s.container_id).inspect();
    expect(inspected.HostConfig.Init).toBe(true);
    expect(inspected.HostConfig.SecurityOpt).toContain('no-new-privileges');
    expect(inspected.HostConfig.NetworkMode).toBe('none');
    expect(inspected.Config.Labels['roboguide.job']).toBe(s.session_id);

    const argv = await exec(shared, s.session_id, {
      argv: ['sh', '-c', 'echo "$GREETING $0"; pwd; echo oops >&2; exit 7'],
    });
    expect(argv.body).toMatchObject({
      stdout: 'hi sh\n/tmp\n',
      stderr: 'oops\n',
      return_code: 7,
      timed_out: false,
    });
    const command = await exec(shared, s.session_id, {
      command: 'cat; echo " $X"',
      env: { X: 'extra' },
      stdin: 'from stdin',
      cwd: '/',
    });
    expect(command.body.stdout).toBe('from stdin extra\n');

    const upload = await shared.client.call<{ files: number }>(
      'PUT',
      `/v1/sessions/${s.session_id}/archive?path=/work/in`,
      { raw: await tarOf({ 'a.txt': 'alpha', 'sub/b.txt': 'beta' }) },
    );
    expect(upload.status).toBe(200);
    expect(upload.body.files).toBe(2);
    expect(
      (await exec(shared, s.session_id, { command: 'cat /work/in/a.txt /work/in/sub/b.txt' })).body.stdout,
    ).toBe('alphabeta');
    const download = await shared.client.call<Buffer>(
      'GET',
      `/v1/sessions/${s.session_id}/archive?path=/work/in`,
    );
    expect(download.status).toBe(200);
    expect(await untar(download.body)).toMatchObject({ 'in/a.txt': 'alpha', 'in/sub/b.txt': 'beta' });
    expect((await shared.client.call('GET', `/v1/sessions/${s.session_id}/archive?path=/nope`)).status).toBe(
      404,
    );

    const first = await shared.client.call<Cleanup>('DELETE', `/v1/sessions/${s.session_id}`);
    expect(first.body).toMatchObject({
      verified_absent: true,
      slot_released: true,
      removed: true,
      stopped: true,
    });
    expect(await rt.inspect(s.container_id)).toBeNull();
    expect(await heldSlots(shared)).toBe(held);
    const second = await shared.client.call<Cleanup>('DELETE', `/v1/sessions/${s.session_id}`);
    expect(second.body).toEqual(first.body);
    expect(await heldSlots(shared)).toBe(held);
    expect((await exec(shared, s.session_id, { command: 'true' })).status).toBe(404);
    const onDisk = JSON.parse(
      await readFile(join(shared.dataDir, 'sessions', s.session_id, 'cleanup.json'), 'utf8'),
    ) as Cleanup;
    expect(onDisk).toEqual(first.body);
  });

  it('an exec past its timeout has its whole process tree killed: 124, timed_out', async () => {
    const s = await createSession(shared);
    const res = await exec(shared, s.session_id, {
      command: 'sleep 301 & sleep 302 & sleep 303; echo never',
      timeout_sec: 1,
    });
    expect(res.body).toMatchObject({ return_code: 124, timed_out: true, stdout: '' });
    const ps = await exec(shared, s.session_id, { argv: ['ps'] });
    expect(ps.body.stdout).not.toMatch(/sleep 30[123]/);
  });

  it('secrets: masked in exec output and in downloads; never written under the data dir', async () => {
    const s = await createSession(shared, { environment: { API_KEY: '${RG_TEST_SECRET}' } });
    const out = await exec(shared, s.session_id, {
      command: 'echo "key=$API_KEY"; echo "$API_KEY" >&2; mkdir -p /out; echo "file $API_KEY" > /out/f.txt',
    });
    expect(out.body.stdout).toBe('key=[REDACTED]\n');
    expect(out.body.stderr).not.toContain(SECRET);
    const streamed = await shared.client.call<Buffer>('POST', `/v1/sessions/${s.session_id}/exec?stream=1`, {
      body: { command: 'echo "$API_KEY"; echo done' },
    });
    const events = streamed.body
      .toString('utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(events.at(-1)).toMatchObject({ exit: { return_code: 0, timed_out: false } });
    expect(streamed.body.toString('utf8')).not.toContain(SECRET);
    const download = await shared.client.call<Buffer>(
      'GET',
      `/v1/sessions/${s.session_id}/archive?path=/out`,
    );
    expect(download.body.toString('latin1')).not.toContain(SECRET);
    expect((await untar(download.body))['out/f.txt']).toBe('file [REDACTED]\n');
    await shared.client.call('DELETE', `/v1/sessions/${s.session_id}`);
    for (const file of await listFilesRecursively(shared.dataDir))
      expect(await scanForSecret(file, SECRET), file).toEqual([]);
  });

  // Podman (the Podman set) publishes in its service's own network namespace, not where this process listens.
  it.skipIf(engineIsPodman)(
    '409 when a published port is taken (by a session, or by a process), with nothing left behind',
    async () => {
      const port = await freePort();
      const a = await createSession(shared, { ports: [port], network: 'bridge' });
      expect(a.ports[String(port)]).toEqual({ host_ip: '127.0.0.1', host_port: port });
      const held = await heldSlots(shared);
      const b = await shared.client.call<{ error: { code: string } }>('POST', '/v1/sessions', {
        body: { image: DRIVER_IMAGE, labels: LABEL, ports: [port], network: 'bridge' },
      });
      expect(b.status).toBe(409);
      const other = await freePort();
      const blocker = createServer();
      await new Promise<void>((resolve) => blocker.listen(other, '127.0.0.1', resolve));
      try {
        const c = await shared.client.call<{ error: { code: string } }>('POST', '/v1/sessions', {
          body: {
            image: DRIVER_IMAGE,
            labels: { ...LABEL, case: 'blocked' },
            ports: [other],
            network: 'bridge',
          },
        });
        expect(c.status).toBe(409);
        expect(c.body.error.code).toBe('E_PORT_ALLOCATED');
      } finally {
        await new Promise((resolve) => blocker.close(resolve));
      }
      expect(await containersLabelled({ ...LABEL, case: 'blocked' })).toEqual([]);
      expect(await heldSlots(shared)).toBe(held);
    },
  );

  it('400 with the field and the rule: bad body, unset reference, refused mount, unknown key', async () => {
    const bad = await shared.client.call<{
      error: { code: string; issues: { path: string; rule: string }[] };
    }>('POST', '/v1/sessions', { body: { image: '', network: 'host', extra: 1 } });
    expect(bad.status).toBe(400);
    expect(bad.body.error.issues.map((i) => i.path).sort()).toEqual(['$', 'image', 'network'].sort());
    const unset = await shared.client.call<{ error: { issues: { path: string }[] } }>(
      'POST',
      '/v1/sessions',
      { body: { image: DRIVER_IMAGE, environment: { K: '${RG_NOT_SET_ANYWHERE}' } } },
    );
    expect(unset.status).toBe(400);
    expect(unset.body.error.issues[0]?.path).toBe('environment.K');
    const mount = await shared.client.call<{ error: { issues: { path: string; rule: string }[] } }>(
      'POST',
      '/v1/sessions',
      { body: { image: DRIVER_IMAGE, mounts: [{ source: shared.dataDir, target: '/data' }] } },
    );
    expect(mount.status).toBe(400);
    expect(mount.body.error.issues[0]).toMatchObject({ path: 'mounts[0].source' });
    const both = await shared.client.call('POST', '/v1/sessions/s-x/exec', {
      body: { argv: ['true'], command: 'true' },
    });
    expect(both.status).toBe(400);
    expect(
      (await shared.client.call('POST', '/v1/sessions/s-unknown/exec', { body: { command: 'true' } })).status,
    ).toBe(404);
    expect(await containersLabelled(LABEL)).toEqual([]);
  });

  it('a mount the rules allow is bound, read-only when asked', async () => {
    const dir = join(work, 'mount');
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, 'in.txt'), 'mounted');
    const s = await createSession(shared, { mounts: [{ source: dir, target: '/m', read_only: true }] });
    expect((await exec(shared, s.session_id, { command: 'cat /m/in.txt' })).body.stdout).toBe('mounted');
    expect((await exec(shared, s.session_id, { command: 'touch /m/x' })).body.return_code).not.toBe(0);
  });

  it('the client disconnecting mid-exec kills the exec; the session stays usable', async () => {
    const s = await createSession(shared);
    const abort = new AbortController();
    const pending = shared.client
      .open('POST', `/v1/sessions/${s.session_id}/exec`, {
        body: { command: 'sleep 311' },
        signal: abort.signal,
      })
      .catch(() => null);
    await until(
      async () =>
        (await exec(shared, s.session_id, { argv: ['ps'] })).body.stdout.includes('sleep 311')
          ? true
          : undefined,
      'exec started',
    );
    abort.abort();
    await pending;
    await until(
      async () =>
        (await exec(shared, s.session_id, { argv: ['ps'] })).body.stdout.includes('sleep 311')
          ? undefined
          : true,
      'exec killed',
    );
    expect((await exec(shared, s.session_id, { command: 'echo alive' })).body.stdout).toBe('alive\n');
  });

  it('DELETE survives the client going away: the container is removed and a later DELETE returns the record', async () => {
    const s = await createSession(shared);
    const abort = new AbortController();
    const gone = shared.client
      .open('DELETE', `/v1/sessions/${s.session_id}`, { signal: abort.signal })
      .catch(() => null);
    setTimeout(() => abort.abort(), 20);
    await gone;
    const record = await until(async () => {
      const r = await shared.client.call<Cleanup>('DELETE', `/v1/sessions/${s.session_id}`);
      return r.status === 200 ? r.body : undefined;
    }, 'delete record');
    expect(record).toMatchObject({ verified_absent: true, slot_released: true });
    expect(await rt.inspect(s.container_id)).toBeNull();
  });

  it('an expired session is reaped: container removed (404), slot released', async () => {
    const s = await createSession(shared, { ttl_seconds: 1 });
    // Podman answers a transient 500 "no such container" while its removal is under way: not yet, look again.
    await until(async () => ((await rt.inspect(s.container_id)) === null ? true : undefined), 'reaped', {
      ignoreErrors: true,
    });
    expect(await rt.inspect(s.container_id)).toBeNull();
    // Listed (as deleting) until its slot is released and cleanup.json written, just after the engine's 404.
    await until(
      async () => {
        const listed = await shared.client.call<{ sessions: { session_id: string }[] }>(
          'GET',
          '/v1/sessions',
        );
        return listed.body.sessions.some((x) => x.session_id === s.session_id) ? undefined : true;
      },
      'deletion finished',
      { timeoutMs: 10_000 },
    );
    const record = await shared.client.call<Cleanup>('DELETE', `/v1/sessions/${s.session_id}`);
    expect(record.body).toMatchObject({ reason: 'expired', verified_absent: true, slot_released: true });
  });

  it('a pair through POST /v1/pairs: same lifecycle as pair run (202, result, redacted logs, container gone)', async () => {
    const job = `${RUN}-pair`;
    const cwd = join(work, 'pair', 'cwd');
    const spec = {
      job_id: job,
      argv: ['/bin/sh', '-c', 'echo "token $API_KEY"; /opt/driver/run outcome=completed'],
      cwd,
      outcome_path: join(work, 'pair', 'out', 'outcome.json'),
      environment: { API_KEY: '${RG_TEST_SECRET}' },
      timeout_seconds: 120,
      image: DRIVER_IMAGE,
    };
    const accepted = await shared.client.call<{ pair_id: string }>('POST', '/v1/pairs', { body: spec });
    expect(accepted.status).toBe(202);
    const id = accepted.body.pair_id;
    const finished = await until(
      async () => {
        const r = await shared.client.call<{
          state: string;
          result: {
            classification: string;
            cleanup: { verified_absent: boolean };
            container: { id: string };
          } | null;
          receipt: unknown;
        }>('GET', `/v1/pairs/${id}`);
        return r.body.state === 'running' ? undefined : r.body;
      },
      'pair finished',
      { timeoutMs: 120_000 },
    );
    expect(finished.state).toBe('finished');
    expect(finished.result?.classification).toBe('completed');
    expect(finished.result?.cleanup.verified_absent).toBe(true);
    expect(await rt.inspect(finished.result!.container.id)).toBeNull();
    const logs = await shared.client.call<Buffer>('GET', `/v1/pairs/${id}/logs?stream=stdout`);
    expect(logs.body.toString('utf8')).toContain('token [REDACTED]');
    expect((await shared.client.call('GET', '/v1/pairs/p-00000000-0000-0000-0000-000000000000')).status).toBe(
      404,
    );
    expect((await shared.client.call('POST', '/v1/pairs', { body: { ...spec, job_id: 'x y' } })).status).toBe(
      400,
    );
    expect(await containersLabelled({ 'roboguide.job': job })).toEqual([]);
  });
});

describe.skipIf(noDocker)('serve: host limit, SIGKILL and restart, SIGTERM', () => {
  afterAll(async () => {
    await Promise.all(servers.map((s) => s.dispose()));
    await expectNoContainersLeft(LABEL);
  });

  it('409 at the host reservation limit', async () => {
    const s = await server({ maxReservations: 1 });
    await createSession(s);
    const refused = await s.client.call<{ error: { code: string } }>('POST', '/v1/sessions', {
      body: { image: DRIVER_IMAGE, labels: LABEL },
    });
    expect(refused.status).toBe(409);
    expect(refused.body.error.code).toBe('E_CAPACITY');
    expect(await containersLabelled(LABEL)).toHaveLength(1);
    expect(await s.stop('SIGTERM')).toBe(0);
    expect(await containersLabelled(LABEL)).toEqual([]);
    expect(await heldSlots(s)).toBe(0);
  });

  it('SIGKILLed with 3 live sessions and restarted: the expired one reaped, the live ones adopted, nothing leaked', async () => {
    const first = await server({ reapIntervalSec: 3600 });
    const live1 = await createSession(first, { environment: { API_KEY: '${RG_TEST_SECRET}' } });
    const live2 = await createSession(first);
    const expiring = await createSession(first, { ttl_seconds: 1 });
    const batch = (await rt.docker.getContainer(live1.container_id).inspect()).Config.Labels[
      'roboguide.batch'
    ]!;
    expect(await heldSlots(first)).toBe(3);
    const { expires_at } = (
      await first.client.call<{ expires_at: string }>('GET', `/v1/sessions/${expiring.session_id}`)
    ).body;
    await first.stop('SIGKILL');
    await until(() => (Date.now() > Date.parse(expires_at) ? true : undefined), 'the 1 s TTL passed');
    const second = await server({ workDir: first.workDir, reapIntervalSec: 3600 });
    expect(second.started.adopted.sort()).toEqual([live1.session_id, live2.session_id].sort());
    expect(second.started.reaped).toEqual([expiring.session_id]);
    expect(await rt.inspect(expiring.container_id)).toBeNull();
    expect(await heldSlots(second)).toBe(2);
    // Adopted sessions work, and still redact the values their container holds.
    const out = await exec(second, live1.session_id, { command: 'echo "$API_KEY"' });
    expect(out.body.stdout).toBe('[REDACTED]\n');
    expect(await second.stop('SIGTERM')).toBe(0);
    expect(await rt.inspect(live1.container_id)).toBeNull();
    expect(await rt.inspect(live2.container_id)).toBeNull();
    expect(await containersLabelled({ 'roboguide.batch': batch })).toEqual([]);
    expect(await heldSlots(second)).toBe(0);
  });

  it('--listen: loopback TCP answers only with the bearer token', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'rg-serve-token-'));
    const tokenFile = join(dir, 'token');
    const token = randomUUID();
    await writeFile(tokenFile, `${token}\n`, { mode: 0o600 });
    const s = await server({ extraArgs: ['--listen', '127.0.0.1:0', '--token-file', tokenFile] });
    const port = s.started.tcp_port;
    const url = `http://127.0.0.1:${port}/v1/health`;
    expect((await fetch(url)).status).toBe(401);
    expect((await fetch(url, { headers: { authorization: `Bearer ${token}x` } })).status).toBe(401);
    const ok = await fetch(url, { headers: { authorization: `Bearer ${token}` } });
    expect(ok.status).toBe(200);
    expect(((await ok.json()) as { ok: boolean }).ok).toBe(true);
    expect(await s.stop('SIGTERM')).toBe(0);
    await rm(dir, { recursive: true, force: true });
  });

  it('SIGTERM deletes every session (verified) before the server exits', async () => {
    const s = await server();
    const made = await Promise.all([createSession(s), createSession(s), createSession(s)]);
    expect(await heldSlots(s)).toBe(3);
    expect(await s.stop('SIGTERM')).toBe(0);
    for (const m of made) {
      expect(await rt.inspect(m.container_id)).toBeNull();
      const record = JSON.parse(
        await readFile(join(s.dataDir, 'sessions', m.session_id, 'cleanup.json'), 'utf8'),
      ) as Cleanup;
      expect(record).toMatchObject({ reason: 'shutdown', verified_absent: true, slot_released: true });
    }
    expect(await heldSlots(s)).toBe(0);
  });
});
