import { access, mkdir, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { EvidenceStore } from '../../../../src/app/evidence/evidence-store.js';
import { NodeFileSystem } from '../../../../src/adapters/fs/node-file-system.js';
import { createRedactStream } from '../../../../src/adapters/redact-stream.js';
import { SqliteCapacityRegistry } from '../../../../src/adapters/registry/sqlite-capacity-registry.js';
import type { CapacityRegistry } from '../../../../src/app/ports/capacity-registry.js';
import { silentLogger } from '../../../../src/app/ports/logger.js';
import { ApiError } from '../../../../src/app/serve/api-error.js';
import { parseBody } from '../../../../src/app/serve/api-error.js';
import { ExecSchema } from '../../../../src/app/serve/exec-schemas.js';
import { SessionCreateSchema } from '../../../../src/app/serve/session-schemas.js';
import type {
  ExecHandle,
  ExecSpec,
  SessionContainerDetail,
  ContainerState,
  ContainerStatus,
  EngineInfo,
  RemoveResult,
  SessionContainerSpec,
  RunningExec,
  SessionEngine,
} from '../../../../src/app/ports/container-runtime.js';
import { SessionManager } from '../../../../src/app/serve/session-manager.js';
import { until } from '../../../support/until.js';
import { clockAt } from '../../../support/fake-time.js';
import { compileRedaction, redactionCompiled } from '../../../../src/core/redaction/compile.js';

const exists = (path: string): Promise<boolean> =>
  access(path).then(
    () => true,
    () => false,
  );

/** What a fake engine says of one of its containers (a list or an inspect). */
function containerState(
  id: string,
  c: { status: ContainerStatus; labels: Record<string, string> },
): ContainerState {
  return {
    id,
    status: c.status,
    exitCode: null,
    oomKilled: false,
    startedAt: null,
    finishedAt: null,
    labels: c.labels,
  };
}

/** A hand-written engine: containers in a map; `stuck` ids survive remove (an engine that will not delete). */
class FakeEngine implements SessionEngine {
  readonly containers = new Map<
    string,
    { spec: SessionContainerSpec | null; labels: Record<string, string>; status: ContainerStatus }
  >();
  readonly stuck = new Set<string>();
  failCreate: Error | null = null;
  /** With failCreate: the container exists before the error (a start refused, its removal failed). */
  leaveOnFail = false;
  /** When set, creation waits for it (a slow engine). */
  createGate: Promise<void> | null = null;
  removes = 0;
  /** The working directory every container reports (its session's workdir or its image's). */
  workingDir = '';
  readonly execSpecs: ExecSpec[] = [];
  defaultsAsked = 0;
  #next = 0;
  info(): Promise<EngineInfo> {
    return Promise.resolve({ id: 'fake', version: 'fake', apiVersion: '1.41', runtimes: [] });
  }
  imageExists(): Promise<boolean> {
    return Promise.resolve(true);
  }
  async createAndStart(spec: SessionContainerSpec): Promise<{ id: string; ports: Record<string, never> }> {
    await this.createGate;
    if (this.failCreate && !this.leaveOnFail) throw this.failCreate;
    const id = `c${++this.#next}`;
    this.containers.set(id, { spec, labels: { ...spec.labels }, status: 'running' });
    if (this.failCreate) throw this.failCreate; // created, then refused: the adapter's own removal failed too
    return { id, ports: {} };
  }
  /** When set, an exec prints this (a container that echoes what it was given). */
  execOutput: string | null = null;
  /** When set, an exec runs until its tree is killed (then 137); `execStarted` settles as it starts. */
  holdExecs = false;
  execStarted: Promise<void> = Promise.resolve();
  #execStarted: () => void = () => undefined;
  /** When set, an exec is refused by the engine with this error. */
  failExec: Error | null = null;
  armExecStarted(): void {
    this.execStarted = new Promise((resolve) => {
      this.#execStarted = resolve;
    });
  }
  exec(_id: string, spec: ExecSpec): Promise<ExecHandle> {
    this.execSpecs.push(spec);
    if (this.failExec) return Promise.reject(this.failExec);
    const stdout = new PassThrough();
    const stderr = new PassThrough();
    let exited: (code: number) => void = () => undefined;
    const done = new Promise<number>((resolve) => {
      exited = resolve;
    });
    if (!this.holdExecs) {
      stdout.end(this.execOutput ?? 'out');
      stderr.end();
      exited(0);
    }
    this.#execStarted();
    return Promise.resolve({
      stdout,
      stderr,
      done,
      killTree: () => {
        stdout.end();
        stderr.end();
        exited(137);
        return Promise.resolve();
      },
      abandon: () => undefined,
    });
  }
  putArchive(): Promise<void> {
    return Promise.resolve();
  }
  getArchive(): Promise<null> {
    return Promise.resolve(null);
  }
  stop(): Promise<void> {
    return Promise.resolve();
  }
  remove(id: string): Promise<RemoveResult> {
    this.removes += 1;
    if (this.stuck.has(id)) return Promise.resolve('removed');
    return Promise.resolve(this.containers.delete(id) ? 'removed' : 'absent');
  }
  inspect(id: string): Promise<ContainerState | null> {
    const c = this.containers.get(id);
    return Promise.resolve(c ? containerState(id, c) : null);
  }
  detail(id: string): Promise<SessionContainerDetail | null> {
    const c = this.containers.get(id);
    if (!c) return Promise.resolve(null);
    return Promise.resolve({
      workdir: c.spec?.workdir ?? '/',
      user: c.spec?.user ?? '',
      ipAddress: c.spec?.network === 'bridge' ? '172.30.0.2' : null,
    });
  }
  /** Execs an earlier server left running, per container; `killExec` ends them and records it. */
  readonly orphans = new Map<string, RunningExec[]>();
  readonly killedExecs: string[] = [];
  runningExecs(id: string): Promise<readonly RunningExec[]> {
    return Promise.resolve(this.orphans.get(id) ?? []);
  }
  killExec(containerId: string, execId: string): Promise<void> {
    this.killedExecs.push(execId);
    this.orphans.set(
      containerId,
      (this.orphans.get(containerId) ?? []).filter((e) => e.id !== execId),
    );
    return Promise.resolve();
  }
  containerDefaults(id: string): Promise<{ workingDir: string; user: string } | null> {
    this.defaultsAsked += 1;
    return Promise.resolve(this.containers.has(id) ? { workingDir: this.workingDir, user: '' } : null);
  }
  listByLabel(labels: Readonly<Record<string, string>>): Promise<ContainerState[]> {
    return Promise.resolve(
      [...this.containers.entries()]
        .filter(([, c]) => Object.entries(labels).every(([k, v]) => c.labels[k] === v))
        .map(([id, c]) => containerState(id, c)),
    );
  }
}

let dir: string;
let now: number;
let engine: FakeEngine;
let registry: SqliteCapacityRegistry;
const clock = clockAt(() => new Date(now));

function manager(reg: CapacityRegistry = registry): SessionManager {
  return new SessionManager({
    engine,
    registry: reg,
    clock,
    logger: silentLogger,
    fs: new NodeFileSystem(),
    store: new EvidenceStore(new NodeFileSystem(), join(dir, 'data')),
    batchId: 'serve-test',
    environment: { SECRET_VALUE: 'hunter2-secret' },
    bindAddress: '127.0.0.1',
    protectedPaths: { outputDir: join(dir, 'data') },
    createRedactor: (secrets) => createRedactStream(secrets),
    stopBudgetSec: 1,
    verifyAbsentTimeoutMs: 600,
    maxOutputBytes: 1024,
    allowedEnv: new Set(['SECRET_VALUE', 'NOT_SET', 'NOT_SET_ANYWHERE']),
    limits: { execsPerSession: 2, execs: 3, archivesPerSession: 1, archives: 2 },
  });
}

const body = (extra: Record<string, unknown> = {}) =>
  parseBody(SessionCreateSchema, { image: 'img', ...extra }, 'test');

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-session-manager-'));
  await mkdir(join(dir, 'data'));
  now = Date.parse('2026-01-01T00:00:00Z');
  engine = new FakeEngine();
  registry = SqliteCapacityRegistry.open({ path: join(dir, 'registry.db') });
  await registry.setLimits({ maxReservations: 3, gpuMib: null });
});

afterEach(async () => {
  registry.closeSync();
  await rm(dir, { recursive: true, force: true });
});

describe('SessionManager', () => {
  it('a relative cwd resolves against the working directory the engine reports (asked once), else /; .. stops at /', async () => {
    const sessions = manager();
    engine.workingDir = '/app';
    const { session_id: id } = await sessions.create(body());
    for (const cwd of ['sub/dir', '/abs/../x', '../../..', '.'])
      await sessions.exec(id, { command: 'pwd', cwd });
    expect(engine.execSpecs.map((s) => s.cwd)).toEqual(['/app/sub/dir', '/x', '/', '/app']);
    expect(engine.defaultsAsked).toBe(1);
    engine.workingDir = '';
    const other = await sessions.create(body());
    await sessions.exec(other.session_id, { command: 'pwd', cwd: 'tmp' });
    expect(engine.execSpecs.at(-1)?.cwd).toBe('/tmp');
    expect(await sessions.beginArchive(other.session_id, { path: 'a/../b', user: '1000' })).toMatchObject({
      path: '/b',
      user: '1000',
    });
  });

  it('stdin_base64 reaches the engine as bytes, a streamed stdin as the stream itself', async () => {
    const sessions = manager();
    const { session_id: id } = await sessions.create(body());
    await sessions.exec(
      id,
      parseBody(ExecSchema, { command: 'cat', stdin_base64: Buffer.from([0, 255]).toString('base64') }, 't'),
    );
    expect(engine.execSpecs.at(-1)?.stdin).toEqual(Buffer.from([0, 255]));
    const stream = new PassThrough();
    await sessions.exec(id, { command: 'cat' }, { stdin: stream });
    expect(engine.execSpecs.at(-1)?.stdin).toBe(stream);
  });

  it('two concurrent deletes share one cleanup: one removal, the slot released once, the same record', async () => {
    const sessions = manager();
    const { session_id } = await sessions.create(body());
    expect(await registry.held()).toHaveLength(1);
    const [a, b] = await Promise.all([sessions.delete(session_id), sessions.delete(session_id)]);
    expect(a).toBe(b);
    expect(a).toMatchObject({ verified_absent: true, slot_released: true, reason: 'deleted' });
    expect(engine.removes).toBe(1);
    expect(await registry.held()).toHaveLength(0);
    // A new manager (a restarted server) answers the same record from disk.
    expect(await manager().delete(session_id)).toEqual(a);
  });

  it('an unverified removal keeps the slot and the session; a later delete finishes it', async () => {
    const sessions = manager();
    const { session_id, container_id } = await sessions.create(body());
    engine.stuck.add(container_id);
    const first = await sessions.delete(session_id);
    expect(first).toMatchObject({ verified_absent: false, slot_released: false });
    expect(await registry.held()).toHaveLength(1);
    expect(sessions.list().map((s) => s.session_id)).toEqual([session_id]);
    engine.stuck.delete(container_id);
    expect(await sessions.delete(session_id)).toMatchObject({ verified_absent: true, slot_released: true });
    expect(await registry.held()).toHaveLength(0);
  }, 20_000);

  it('reaps a session once its TTL has passed; every request renews the TTL', async () => {
    const sessions = manager();
    const { session_id } = await sessions.create(body({ ttl_seconds: 60 }));
    now += 50_000;
    await sessions.exec(session_id, { command: 'true' });
    now += 50_000;
    expect(await sessions.reap()).toEqual([]);
    now += 11_000;
    expect(await sessions.reap()).toEqual([session_id]);
    expect(await registry.held()).toHaveLength(0);
    await expect(sessions.exec(session_id, { command: 'true' })).rejects.toMatchObject({ status: 404 });
  });

  it('a slow create is neither reaped nor lost: its TTL starts when it is usable, and SIGTERM waits for it', async () => {
    const sessions = manager();
    let open = (): void => undefined;
    engine.createGate = new Promise((resolve) => {
      open = resolve;
    });
    const creating = sessions.create(body({ ttl_seconds: 1 }));
    // Admitted and recorded: session.json is written just before the engine call the gate holds.
    await until(async () => {
      const [id] = await readdir(join(dir, 'data', 'sessions')).catch(() => []);
      const recorded = id !== undefined && (await exists(join(dir, 'data', 'sessions', id, 'session.json')));
      return recorded ? true : undefined;
    }, 'the creating session recorded');
    now += 5_000; // longer than the TTL, while the engine is still creating
    expect(await sessions.reap()).toEqual([]);
    const shutdown = sessions.deleteAll();
    open();
    const { container_id } = await creating;
    const {
      deleted: [record],
      unreleased,
    } = await shutdown;
    expect(unreleased).toEqual([]);
    expect(record).toMatchObject({
      container_id,
      verified_absent: true,
      slot_released: true,
      reason: 'shutdown',
    });
    expect(engine.containers.size).toBe(0);
    expect(await registry.held()).toHaveLength(0);
  });

  it('refuses a port another session holds, and the host limit, with nothing created', async () => {
    const sessions = manager();
    await sessions.create(body({ ports: [9000], network: 'bridge' }));
    await expect(sessions.create(body({ ports: [9000], network: 'bridge' }))).rejects.toMatchObject({
      status: 409,
      code: 'E_PORT_TAKEN',
    });
    await sessions.create(body());
    await sessions.create(body());
    await expect(sessions.create(body())).rejects.toMatchObject({ status: 409, code: 'E_CAPACITY' });
    expect(engine.containers.size).toBe(3);
  });

  it('gives the slot back when the engine refuses to create, and never writes a resolved value', async () => {
    const sessions = manager();
    engine.failCreate = new Error('engine said no to hunter2-secret');
    await expect(sessions.create(body({ environment: { API_KEY: '${SECRET_VALUE}' } }))).rejects.toThrow(
      'engine said no',
    );
    expect(await registry.held()).toHaveLength(0);
    expect(sessions.list()).toEqual([]);
    const { readdir, readFile } = await import('node:fs/promises');
    const [id] = await readdir(join(dir, 'data', 'sessions'));
    const files = await readdir(join(dir, 'data', 'sessions', id!));
    for (const f of files)
      expect(await readFile(join(dir, 'data', 'sessions', id!, f), 'utf8')).not.toContain('hunter2-secret');
  });

  it('a create that failed after its container existed: that container removed and its 404 seen before the slot goes', async () => {
    const sessions = manager();
    engine.failCreate = new Error('port is already allocated');
    engine.leaveOnFail = true;
    await expect(sessions.create(body())).rejects.toThrow('port is already allocated');
    expect(engine.containers.size).toBe(0);
    expect(await registry.held()).toHaveLength(0);
    const [id] = await readdir(join(dir, 'data', 'sessions'));
    const cleanup = JSON.parse(await readFile(join(dir, 'data', 'sessions', id!, 'cleanup.json'), 'utf8'));
    expect(cleanup).toMatchObject({
      container_id: 'c1',
      removed: true,
      verified_absent: true,
      slot_released: true,
    });
  });

  it('a failed create whose container will not go: the slot stays held and cleanup.json says it is not verified absent', async () => {
    const sessions = manager();
    engine.failCreate = new Error('no NVIDIA runtime');
    engine.leaveOnFail = true;
    engine.stuck.add('c1');
    await expect(sessions.create(body())).rejects.toThrow('no NVIDIA runtime');
    expect(engine.containers.has('c1')).toBe(true);
    expect(await registry.held()).toHaveLength(1);
    const [id] = await readdir(join(dir, 'data', 'sessions'));
    const cleanup = JSON.parse(await readFile(join(dir, 'data', 'sessions', id!, 'cleanup.json'), 'utf8'));
    expect(cleanup).toMatchObject({ container_id: 'c1', verified_absent: false, slot_released: false });
    expect(cleanup.error).toMatch(/^create failed: no NVIDIA runtime; /);
  });

  it('refuses a mount of the evidence directory and an unset reference (400, nothing reserved)', async () => {
    const sessions = manager();
    await expect(sessions.create(body({ mounts: [{ source: dir, target: '/x' }] }))).rejects.toBeInstanceOf(
      ApiError,
    );
    await expect(sessions.create(body({ environment: { K: '${NOT_SET}' } }))).rejects.toMatchObject({
      status: 400,
      code: 'E_ENV_MISSING',
    });
    expect(await registry.held()).toHaveLength(0);
  });

  it('after a restart: adopts live sessions, deletes expired ones, releases a slot with no container', async () => {
    const before = manager();
    const live = await before.create(body({ ttl_seconds: 3600 }));
    const expiring = await before.create(body({ ttl_seconds: 10 }));
    // A reservation of this server whose container never came to be (crash between admit and create).
    const orphan = await registry.admit({
      batchId: 'serve-test',
      jobId: 's-orphan',
      claimId: 'claim-orphan',
      gpuMib: 0,
    });
    expect(orphan.kind).toBe('admitted');
    // An exec the killed server left running in the live session: nobody reads it any more (issue 39).
    engine.orphans.set(live.container_id, [{ id: 'exec-left', argv: ['sleep', '600'] }]);
    now += 60_000;
    const after = manager();
    const report = await after.adopt(() => Promise.resolve({}));
    expect(report).toEqual({
      adopted: [live.session_id],
      reaped: [expiring.session_id],
      released: ['s-orphan'],
      foreign: [],
      endedExecs: 1,
    });
    expect(engine.killedExecs).toEqual(['exec-left']);
    const lines = (await readFile(join(dir, 'data', 'sessions', live.session_id, 'execs.jsonl'), 'utf8'))
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines).toContainEqual(
      expect.objectContaining({ exec_id: 'exec-left', argv: ['sleep', '600'], killed: 'server_restarted' }),
    );
    expect(engine.containers.has(expiring.container_id)).toBe(false);
    expect((await registry.held()).map((r) => r.jobId)).toEqual([live.session_id]);
    expect((await after.exec(live.session_id, { argv: ['true'] })).return_code).toBe(0);
  });
});

describe('SessionManager: requests on a session', () => {
  async function status(work: () => unknown): Promise<[number, string]> {
    try {
      await work();
    } catch (err) {
      if (err instanceof ApiError) return [err.status, err.code];
      throw err;
    }
    throw new Error('expected an ApiError');
  }

  it('an unknown session is 404 for every request; a delete of a well-formed id with no cleanup record too', async () => {
    const sessions = manager();
    expect((await status(() => sessions.secretsOf('nope')))[0]).toBe(404);
    expect((await status(() => sessions.containerOf('nope')))[0]).toBe(404);
    expect((await status(() => sessions.keepalive('nope')))[0]).toBe(404);
    expect((await status(() => sessions.delete('not-a-session-id')))[0]).toBe(404);
    expect((await status(() => sessions.delete('s-00000000-0000-0000-0000-000000000000')))[0]).toBe(404);
  });

  it('keepalive persists the renewed expiry; secretsOf and containerOf name the live container', async () => {
    const sessions = manager();
    const { session_id, container_id } = await sessions.create(
      body({ environment: { K: '${SECRET_VALUE}' } }),
    );
    now += 60_000;
    const kept = await sessions.keepalive(session_id);
    expect(kept.session_id).toBe(session_id);
    expect(Date.parse(kept.expires_at)).toBeGreaterThan(now);
    const onDisk = JSON.parse(
      await readFile(join(dir, 'data', 'sessions', session_id, 'session.json'), 'utf8'),
    ) as { expires_at: string };
    expect(onDisk.expires_at).toBe(kept.expires_at);
    expect(sessions.secretsOf(session_id)).toEqual({
      containerId: container_id,
      secrets: ['hunter2-secret'],
    });
    expect(sessions.containerOf(session_id)).toBe(container_id);
  });

  it('a session being deleted answers 409 and is still listed; once deleted it is 404', async () => {
    const sessions = manager();
    const { session_id } = await sessions.create(body());
    let open: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => {
      open = resolve;
    });
    let stopping = false;
    engine.stop = () => {
      stopping = true;
      return gate;
    };
    const deleting = sessions.delete(session_id);
    while (!stopping) await new Promise((resolve) => setImmediate(resolve));
    expect(await status(() => sessions.keepalive(session_id))).toEqual([409, 'E_SESSION_DELETING']);
    expect(sessions.list().map((s) => s.session_id)).toEqual([session_id]);
    open();
    expect(await deleting).toMatchObject({ verified_absent: true });
    expect((await status(() => sessions.containerOf(session_id)))[0]).toBe(404);
    expect(sessions.list()).toEqual([]);
  });

  it('exec: an unset reference in env is 400 before the engine; set ones are passed and redacted from the exec log', async () => {
    const sessions = manager();
    const { session_id, container_id } = await sessions.create(body());
    const calls: {
      id: string;
      spec: { argv: readonly string[]; env?: Record<string, string>; stdin?: Buffer };
    }[] = [];
    const original = engine.exec.bind(engine);
    engine.exec = (id: string, spec: (typeof calls)[number]['spec']) => {
      calls.push({ id, spec });
      return original(id, spec);
    };
    const unset = parseBody(ExecSchema, { argv: ['/bin/true'], env: { X: '${NOT_SET_ANYWHERE}' } }, 'test');
    expect(await status(() => sessions.exec(session_id, unset))).toEqual([400, 'E_ENV_MISSING']);
    expect(calls).toEqual([]);

    const withEnv = parseBody(
      ExecSchema,
      { command: 'echo hunter2-secret', env: { TOKEN: '${SECRET_VALUE}' }, stdin: 'in' },
      'test',
    );
    const result = await sessions.exec(session_id, withEnv);
    expect(result.return_code).toBe(0);
    expect(calls[0]?.id).toBe(container_id);
    expect(calls[0]?.spec.argv).toEqual(['/bin/sh', '-c', 'echo hunter2-secret']);
    expect(calls[0]?.spec.env).toEqual({ TOKEN: 'hunter2-secret' });
    expect(calls[0]?.spec.stdin?.toString('utf8')).toBe('in');
    const log = await readFile(join(dir, 'data', 'sessions', session_id, 'execs.jsonl'), 'utf8');
    expect(log).not.toContain('hunter2-secret');
    expect(JSON.parse(log.trim()) as Record<string, unknown>).toMatchObject({
      return_code: 0,
      timed_out: false,
      client_gone: false,
    });

    await sessions.exec(session_id, parseBody(ExecSchema, { argv: ['/bin/ls'] }, 'test'));
    expect(calls[1]?.spec).toMatchObject({ argv: ['/bin/ls'], env: undefined, stdin: undefined });
  });
});

describe('SessionManager: secrets from callers (issue 23)', () => {
  const KEY = 'sk-ant-literal-abcdef0123456789';
  const TOKEN = 'sforge-token-0123456789abcdef';

  it('a literal secret in the session environment: given to the container, masked in exec output, a marker in session.json', async () => {
    const sessions = manager();
    const { session_id, container_id } = await sessions.create(
      body({ environment: { ANTHROPIC_API_KEY: KEY, PWD: '/app' } }),
    );
    expect(engine.containers.get(container_id)?.spec?.env).toEqual({ ANTHROPIC_API_KEY: KEY, PWD: '/app' });
    const stored = await readFile(join(dir, 'data', 'sessions', session_id, 'session.json'), 'utf8');
    expect(stored).not.toContain(KEY);
    expect(JSON.parse(stored).environment).toEqual({ ANTHROPIC_API_KEY: { secret: true }, PWD: '/app' });
    engine.execOutput = `key=${KEY} pwd=/app b64=${Buffer.from(KEY).toString('base64')}`;
    const result = await sessions.exec(session_id, parseBody(ExecSchema, { command: 'env' }, 't'));
    expect(result.stdout).not.toContain(KEY);
    expect(result.stdout).not.toContain(Buffer.from(KEY).toString('base64'));
    expect(result.stdout).toContain('pwd=/app');
    expect(sessions.secretSets()).toEqual([[KEY]]);
  });

  it('an exec env secret is masked in that exec, in execs.jsonl and from then on in the session', async () => {
    const sessions = manager();
    const { session_id } = await sessions.create(body());
    engine.execOutput = `token=${TOKEN}`;
    const first = await sessions.exec(
      session_id,
      parseBody(ExecSchema, { argv: ['echo', TOKEN], env: { SFORGE_TOKEN: TOKEN } }, 't'),
    );
    expect(first.stdout).toBe('token=[REDACTED]');
    const later = await sessions.exec(session_id, parseBody(ExecSchema, { command: 'cat /tmp/token' }, 't'));
    expect(later.stdout).toBe('token=[REDACTED]');
    const log = await readFile(join(dir, 'data', 'sessions', session_id, 'execs.jsonl'), 'utf8');
    expect(log).not.toContain(TOKEN);
    expect(log).toContain('[REDACTED]');
  });

  it("an exec's set stays compiled until it ends, though another exec changed the session's set meanwhile", async () => {
    const sessions = manager();
    const own = 'sk-ant-own-set-of-this-test-0123456789';
    const { session_id } = await sessions.create(body({ environment: { ANTHROPIC_API_KEY: own } }));
    engine.holdExecs = true;
    engine.armExecStarted();
    const long = sessions.exec(
      session_id,
      parseBody(ExecSchema, { command: 'sleep 9', timeout_sec: 1 }, 't'),
    );
    await engine.execStarted;
    engine.holdExecs = false;
    await sessions.exec(
      session_id,
      parseBody(ExecSchema, { argv: ['true'], env: { SFORGE_TOKEN: TOKEN } }, 't'),
    );
    expect(sessions.secretSets()).toContainEqual([own, TOKEN]);
    for (let i = 0; i < 40; i++) compileRedaction([`churn-exec-${i}-secret`], 'text');
    // The long exec's set (the session's before the token) is still compiled: its end masks with it.
    expect(redactionCompiled([own])).toBe(true);
    expect((await long).timed_out).toBe(true);
    for (let i = 0; i < 40; i++) compileRedaction([`churn-after-${i}-secret`], 'text');
    expect(redactionCompiled([own])).toBe(false);
  });

  it('a restarted server re-learns the secret from the container environment and masks it again', async () => {
    const first = manager();
    const { session_id, container_id } = await first.create(
      body({ environment: { JUDGE: TOKEN }, secret_env: ['JUDGE'] }),
    );
    const restarted = manager();
    const adoption = await restarted.adopt((id) =>
      Promise.resolve(id === container_id ? { JUDGE: TOKEN, PATH: '/bin' } : null),
    );
    expect(adoption.adopted).toEqual([session_id]);
    engine.execOutput = `judge=${TOKEN}`;
    expect((await restarted.exec(session_id, parseBody(ExecSchema, { command: 'env' }, 't'))).stdout).toBe(
      'judge=[REDACTED]',
    );
  });

  it('GET detail: user, workdir, network and address from the engine', async () => {
    const sessions = manager();
    const none = await sessions.create(body({ user: '1000:1000', workdir: '/app' }));
    expect(await sessions.detail(none.session_id)).toMatchObject({
      user: '1000:1000',
      workdir: '/app',
      network: 'none',
      ip_address: null,
      ports: {},
    });
    const bridge = await sessions.create(body({ network: 'bridge' }));
    expect(await sessions.detail(bridge.session_id)).toMatchObject({
      user: null,
      workdir: '/',
      network: 'bridge',
      ip_address: '172.30.0.2',
    });
  });
});

describe('SessionManager: a session is as alive as its container (issue 39)', () => {
  const apiError = async (work: () => unknown): Promise<ApiError> => {
    try {
      await work();
    } catch (err) {
      if (err instanceof ApiError) return err;
      throw err;
    }
    throw new Error('expected an ApiError');
  };

  it("the engine's die event ends the session: 410 to GET and exec, container removed, slot released at once", async () => {
    const sessions = manager();
    const { session_id, container_id } = await sessions.create(body());
    engine.containers.get(container_id)!.status = 'exited';
    sessions.containerEnded({ sessionId: session_id, containerId: container_id, action: 'die', exitCode: 3 });
    const gone = await apiError(() => sessions.detail(session_id));
    expect(gone).toMatchObject({ status: 410, code: 'E_SESSION_ENDED' });
    expect(gone.message).toContain('exited with code 3');
    expect((await apiError(() => sessions.exec(session_id, { argv: ['true'] }))).status).toBe(410);
    await until(async () => ((await registry.held()).length === 0 ? true : undefined), 'the slot released');
    expect(engine.containers.has(container_id)).toBe(false);
    expect(await sessions.delete(session_id)).toMatchObject({ reason: 'exited', slot_released: true });
    // It left the map, and still answers 410 (not 404, not live).
    expect(sessions.held).toBe(0);
    expect((await apiError(() => sessions.detail(session_id))).status).toBe(410);
    expect(sessions.list()).toEqual([]);
  });

  it('a die event between the container create and the session going live ends it once live (none is lost)', async () => {
    // The registry's attach is where serve waits longest (a worker thread's round trip): the engine's event lands
    // there, after the session knows its container and before it is live. Seen in CI: a session whose command
    // exited at once stayed live until its TTL.
    const attachContainer = registry.attachContainer.bind(registry);
    const racing = new Proxy(registry, {
      get(target, name) {
        if (name === 'attachContainer')
          return async (reservationId: string, containerId: string) => {
            const labels = engine.containers.get(containerId)!.labels;
            engine.containers.get(containerId)!.status = 'exited';
            const sessionId = labels['roboguide.job']!;
            sessions.containerEnded({ sessionId, containerId, action: 'die', exitCode: 0 });
            return attachContainer(reservationId, containerId);
          };
        const value: unknown = Reflect.get(target, name, target);
        return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    }) as CapacityRegistry;
    const sessions = manager(racing);
    const { session_id, container_id } = await sessions.create(body());
    const ended = await apiError(() => sessions.detail(session_id));
    expect(ended).toMatchObject({ status: 410, code: 'E_SESSION_ENDED' });
    await until(async () => ((await registry.held()).length === 0 ? true : undefined), 'the slot released');
    expect(engine.containers.has(container_id)).toBe(false);
  });

  it('a container removed behind our back (docker rm -f): GET says 410 gone, not live, and the slot goes', async () => {
    const sessions = manager();
    const { session_id, container_id } = await sessions.create(body());
    engine.containers.delete(container_id); // no event seen (the stream was down): the request finds out
    const gone = await apiError(() => sessions.detail(session_id));
    expect(gone).toMatchObject({ status: 410, code: 'E_SESSION_ENDED' });
    expect(gone.message).toContain('removed outside roboguide-eval');
    await until(async () => ((await registry.held()).length === 0 ? true : undefined), 'the slot released');
    expect(await sessions.delete(session_id)).toMatchObject({ reason: 'gone', verified_absent: true });
  });

  it('a failing request does not renew the TTL; a successful one does', async () => {
    const sessions = manager();
    const { session_id } = await sessions.create(body({ ttl_seconds: 60 }));
    const first = sessions.list()[0]!.expires_at;
    now += 30_000;
    engine.failExec = Object.assign(new Error('engine says no'), { context: { statusCode: 500 } });
    await expect(sessions.exec(session_id, { argv: ['true'] })).rejects.toThrow();
    expect(sessions.list()[0]!.expires_at).toBe(first);
    engine.failExec = null;
    await sessions.exec(session_id, { argv: ['true'] });
    expect(sessions.list()[0]!.expires_at).toBe(new Date(now + 60_000).toISOString());
  });

  it('a file transfer that failed takes its renewal back; one in flight keeps its session one TTL from its start, not for ever (issue 39)', async () => {
    const sessions = manager();
    const { session_id } = await sessions.create(body({ ttl_seconds: 60 }));
    const first = sessions.list()[0]!.expires_at;
    now += 30_000;
    // A failing download or upload (404 in the container, a refused archive): the TTL stays.
    const failed = await sessions.beginArchive(session_id, { path: '/' });
    failed.end(false);
    (await sessions.beginArchive(session_id, { path: '/' })).end();
    expect(sessions.list()[0]!.expires_at).toBe(first);
    const done = await sessions.beginArchive(session_id, { path: '/' });
    done.end(true);
    expect(sessions.list()[0]!.expires_at).toBe(new Date(now + 60_000).toISOString());
    // A transfer in flight renewed as it started: past the TTL of before, not reaped; one that never ends does not
    // hold the session past a TTL from its start.
    now += 30_000;
    const running = await sessions.beginArchive(session_id, { path: '/' });
    now += 40_000;
    expect(await sessions.reap()).toEqual([]);
    now += 21_000;
    expect(await sessions.reap()).toEqual([session_id]);
    running.end(false);
  });

  it('deleted sessions leave the map: memory does not grow with sessions created and deleted', async () => {
    const sessions = manager();
    for (let i = 0; i < 5; i++) {
      const { session_id } = await sessions.create(body());
      await sessions.delete(session_id);
      expect((await apiError(() => sessions.detail(session_id))).status).toBe(404);
    }
    expect(sessions.held).toBe(0);
  });

  it('an exec cut by the shutdown says so: interrupted server_stopping; new requests 503', async () => {
    const sessions = manager();
    const { session_id } = await sessions.create(body());
    engine.holdExecs = true;
    engine.armExecStarted();
    const running = sessions.exec(session_id, { argv: ['sleep', '600'] });
    await engine.execStarted;
    const cleanup = sessions.deleteAll();
    expect(await running).toMatchObject({ return_code: 137, interrupted: 'server_stopping' });
    await cleanup;
    expect((await apiError(() => sessions.detail(session_id))).code).toBe('E_SERVER_STOPPING');
  });

  it('an exec running when its container ends says so: interrupted session_ended', async () => {
    const sessions = manager();
    const { session_id, container_id } = await sessions.create(body());
    engine.holdExecs = true;
    engine.armExecStarted();
    const running = sessions.exec(session_id, { argv: ['sleep', '600'] });
    await engine.execStarted;
    sessions.containerEnded({
      sessionId: session_id,
      containerId: container_id,
      action: 'destroy',
      exitCode: null,
    });
    expect(await running).toMatchObject({ interrupted: 'session_ended' });
  });
});
