import { mkdir, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { EvidenceStore } from '../../src/app/evidence/evidence-store.js';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { createRedactStream } from '../../src/adapters/redact-stream.js';
import { SqliteCapacityRegistry } from '../../src/adapters/registry/sqlite-capacity-registry.js';
import { RoboguideError } from '../../src/core/errors.js';
import type {
  AdmitRequest,
  BoardAnnotation,
  BoardFilter,
  CapacityRegistry,
  HostLimits,
  ReservationFilter,
  SupervisorLease,
  TerminalCommit,
} from '../../src/app/ports/capacity-registry.js';
import { silentLogger } from '../../src/app/ports/logger.js';
import { ApiError, isRegistryUnavailable, toApiError } from '../../src/app/serve/api-error.js';
import { parseBody } from '../../src/app/serve/api-error.js';
import { SessionCreateSchema } from '../../src/app/serve/session-schemas.js';
import type {
  ExecHandle,
  SessionContainerDetail,
  ContainerState,
  ContainerStatus,
  EngineInfo,
  RemoveResult,
  SessionContainerSpec,
  RunningExec,
  SessionEngine,
} from '../../src/app/ports/container-runtime.js';
import { SessionManager } from '../../src/app/serve/session-manager.js';
import { clockAt } from '../support/fake-time.js';

/**
 * The session manager across a registry outage (issue 27) and its limits and adoption rules (issue 22), with
 * hand-written fakes typed as the ports: an engine in a map, and a registry that delegates to a real SQLite one
 * until it is switched `down`, then throws what an unreachable PostgreSQL throws.
 */

class OutageRegistry implements CapacityRegistry {
  down = false;
  /** What `down` throws: the deadline code of the registry adapters, or pg's socket error as E_REGISTRY today. */
  fault: () => Error = () =>
    new RoboguideError('E_REGISTRY_UNAVAILABLE', 'registry call timed out after 5000 ms');
  constructor(readonly inner: SqliteCapacityRegistry) {}
  get localNode(): string {
    return this.inner.localNode;
  }
  #gate<T>(work: () => Promise<T>): Promise<T> {
    return this.down ? Promise.reject(this.fault()) : work();
  }
  acquireLease(batchId: string, lease: SupervisorLease, isAlive: (holder: SupervisorLease) => boolean) {
    return this.#gate(() => this.inner.acquireLease(batchId, lease, isAlive));
  }
  releaseLease(batchId: string, pid: number) {
    return this.#gate(() => this.inner.releaseLease(batchId, pid));
  }
  supervisorLease(batchId: string) {
    return this.#gate(() => this.inner.supervisorLease(batchId));
  }
  limits(node?: string) {
    return this.#gate(() => this.inner.limits(node));
  }
  setLimits(limits: HostLimits, node?: string) {
    return this.#gate(() => this.inner.setLimits(limits, node));
  }
  nodeLimits() {
    return this.#gate(() => this.inner.nodeLimits());
  }
  admit(request: AdmitRequest) {
    return this.#gate(() => this.inner.admit(request));
  }
  /** Only attachContainer fails (the registry went away between admission and the container's start). */
  failAttach = false;
  attachContainer(reservationId: string, containerId: string) {
    if (this.failAttach) return Promise.reject(this.fault());
    return this.#gate(() => this.inner.attachContainer(reservationId, containerId));
  }
  release(reservationId: string, claimId: string) {
    return this.#gate(() => this.inner.release(reservationId, claimId));
  }
  commitTerminal(commit: TerminalCommit) {
    return this.#gate(() => this.inner.commitTerminal(commit));
  }
  reservation(reservationId: string) {
    return this.#gate(() => this.inner.reservation(reservationId));
  }
  reservationForClaim(claimId: string) {
    return this.#gate(() => this.inner.reservationForClaim(claimId));
  }
  held(filter?: ReservationFilter) {
    return this.#gate(() => this.inner.held(filter));
  }
  portHolders(node: string, ports: readonly number[]) {
    return this.#gate(() => this.inner.portHolders(node, ports));
  }
  reservationSources(reservationId: string) {
    return this.#gate(() => this.inner.reservationSources(reservationId));
  }
  schemaVersion() {
    return this.#gate(() => this.inner.schemaVersion());
  }
  board(filter?: BoardFilter) {
    return this.#gate(() => this.inner.board(filter));
  }
  annotate(claimId: string, fields: BoardAnnotation) {
    return this.#gate(() => this.inner.annotate(claimId, fields));
  }
  close() {
    return Promise.resolve();
  }
}

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

/** Containers in a map; an exec's output stays open until `finishExecs()` (to hold execs in flight). */
class FakeEngine implements SessionEngine {
  readonly containers = new Map<string, { labels: Record<string, string>; status: ContainerStatus }>();
  removes = 0;
  #next = 0;
  readonly #open: PassThrough[] = [];
  holdExecs = false;
  info(): Promise<EngineInfo> {
    return Promise.resolve({ id: 'fake', version: 'fake', apiVersion: '1.41', runtimes: [] });
  }
  imageExists(): Promise<boolean> {
    return Promise.resolve(true);
  }
  createAndStart(spec: SessionContainerSpec): Promise<{ id: string; ports: Record<string, never> }> {
    const id = `c${++this.#next}`;
    this.containers.set(id, { labels: { ...spec.labels }, status: 'running' });
    return Promise.resolve({ id, ports: {} });
  }
  exec(): Promise<ExecHandle> {
    const stdout = new PassThrough();
    const stderr = new PassThrough();
    if (this.holdExecs) this.#open.push(stdout, stderr);
    else {
      stdout.end('out');
      stderr.end();
    }
    const done = new Promise<number>((resolve) => stdout.once('end', () => resolve(0)));
    return Promise.resolve({
      stdout,
      stderr,
      done,
      killTree: () => Promise.resolve(),
      abandon: () => undefined,
    });
  }
  finishExecs(): void {
    for (const s of this.#open.splice(0)) s.end();
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
    return Promise.resolve(this.containers.delete(id) ? 'removed' : 'absent');
  }
  inspect(id: string): Promise<ContainerState | null> {
    const c = this.containers.get(id);
    return Promise.resolve(c ? containerState(id, c) : null);
  }
  detail(): Promise<SessionContainerDetail | null> {
    return Promise.resolve(null);
  }
  runningExecs(): Promise<readonly RunningExec[]> {
    return Promise.resolve([]);
  }
  killExec(): Promise<void> {
    return Promise.resolve();
  }
  containerDefaults(id: string): Promise<{ workingDir: string; user: string } | null> {
    return Promise.resolve(this.containers.has(id) ? { workingDir: '', user: '' } : null);
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
let inner: SqliteCapacityRegistry;
let registry: OutageRegistry;
const clock = clockAt(() => new Date(now));

function manager(): SessionManager {
  return new SessionManager({
    engine,
    registry,
    clock,
    logger: silentLogger,
    fs: new NodeFileSystem(),
    store: new EvidenceStore(new NodeFileSystem(), join(dir, 'data')),
    batchId: 'serve-test',
    environment: { ALLOWED_KEY: 'allowed-secret-1', OTHER_KEY: 'other-secret-12' },
    bindAddress: '127.0.0.1',
    protectedPaths: { outputDir: join(dir, 'data') },
    createRedactor: (secrets) => createRedactStream(secrets),
    stopBudgetSec: 1,
    maxOutputBytes: 1024,
    allowedEnv: new Set(['ALLOWED_KEY']),
    limits: { execsPerSession: 2, execs: 3, archivesPerSession: 1, archives: 2 },
  });
}

const body = (extra: Record<string, unknown> = {}) =>
  parseBody(SessionCreateSchema, { image: 'img', ...extra }, 'test');

async function rejection(work: Promise<unknown> | (() => unknown)): Promise<ApiError> {
  let err: unknown;
  try {
    await (typeof work === 'function' ? work() : work);
  } catch (e) {
    err = e;
  }
  if (!(err instanceof ApiError)) throw new Error(`expected an ApiError, got ${String(err)}`);
  return err;
}

async function cleanupOnDisk(sessionId: string): Promise<Record<string, unknown>> {
  return JSON.parse(
    await readFile(join(dir, 'data', 'sessions', sessionId, 'cleanup.json'), 'utf8'),
  ) as Record<string, unknown>;
}

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-session-retry-'));
  await mkdir(join(dir, 'data'));
  now = Date.parse('2026-01-01T00:00:00Z');
  engine = new FakeEngine();
  inner = SqliteCapacityRegistry.open({ path: join(dir, 'registry.db') });
  await inner.setLimits({ maxReservations: 5, gpuMib: null });
  registry = new OutageRegistry(inner);
});

afterEach(async () => {
  inner.closeSync();
  await rm(dir, { recursive: true, force: true });
});

describe('SessionManager: deletion across a registry outage', () => {
  it('DELETE while the registry is down: 503 with Retry-After, the container gone, the slot kept; a later DELETE releases it', async () => {
    const sessions = manager();
    const { session_id, container_id } = await sessions.create(body());
    registry.down = true;
    const first = await rejection(sessions.delete(session_id));
    expect([first.status, first.code, first.retryAfterSec]).toEqual([503, 'E_REGISTRY_UNAVAILABLE', 5]);
    expect(first.message).toContain('removed (verified)');
    expect(engine.containers.has(container_id)).toBe(false);
    expect(await inner.held()).toHaveLength(1);
    expect(await cleanupOnDisk(session_id)).toMatchObject({ verified_absent: true, slot_released: false });
    expect(sessions.list()).toMatchObject([{ session_id, state: 'deleting' }]);
    expect((await rejection(() => sessions.keepalive(session_id))).status).toBe(409);

    // Still down: the same answer, and the engine is not asked to remove again (the removal was verified).
    expect((await rejection(sessions.delete(session_id))).status).toBe(503);
    expect(engine.removes).toBe(1);

    registry.down = false;
    const record = await sessions.delete(session_id);
    expect(record).toMatchObject({
      reason: 'deleted',
      stopped: true,
      removed: true,
      verified_absent: true,
      slot_released: true,
      error: null,
    });
    expect(await inner.held()).toHaveLength(0);
    expect(await cleanupOnDisk(session_id)).toEqual(record);
    // Deleted, it left the server's memory: a later DELETE answers the record from cleanup.json.
    expect(await sessions.delete(session_id)).toEqual(record);
    expect(sessions.held).toBe(0);
    expect(sessions.list()).toEqual([]);
  });

  it('a pg connection refused (E_REGISTRY with ECONNREFUSED, as the adapter reports it today) is an outage too', async () => {
    const sessions = manager();
    const { session_id } = await sessions.create(body());
    registry.down = true;
    registry.fault = () =>
      new RoboguideError(
        'E_REGISTRY',
        'registry transaction failed (postgres://h/db): connect ECONNREFUSED 127.0.0.1:5432',
        { context: { pg_code: 'ECONNREFUSED' } },
      );
    expect((await rejection(sessions.delete(session_id))).status).toBe(503);
    registry.down = false;
    expect(await sessions.delete(session_id)).toMatchObject({ slot_released: true });
  });

  it('the reaper retries a release that failed, and keeps the first reason', async () => {
    const sessions = manager();
    const { session_id } = await sessions.create(body({ ttl_seconds: 10 }));
    now += 11_000;
    registry.down = true;
    expect(await sessions.reap()).toEqual([]);
    expect(await inner.held()).toHaveLength(1);
    expect(await sessions.reap()).toEqual([]); // still down: logged, not thrown
    registry.down = false;
    expect(await sessions.reap()).toEqual([session_id]);
    expect(await inner.held()).toHaveLength(0);
    expect(await sessions.delete(session_id)).toMatchObject({ reason: 'expired', slot_released: true });
    expect(await sessions.reap()).toEqual([]);
  });

  it('shutdown during the outage finishes what it can, records what it could not; the next start releases it', async () => {
    const sessions = manager();
    const a = await sessions.create(body());
    const b = await sessions.create(body());
    registry.down = true;
    const { deleted, unreleased } = await sessions.deleteAll();
    expect(deleted).toEqual([]);
    expect(unreleased.map((u) => u.session_id).sort()).toEqual([a.session_id, b.session_id].sort());
    expect(unreleased[0]?.error).toContain('registry');
    expect(engine.containers.size).toBe(0);
    for (const s of [a, b])
      expect(await cleanupOnDisk(s.session_id)).toMatchObject({
        reason: 'shutdown',
        verified_absent: true,
        slot_released: false,
      });
    expect(await inner.held()).toHaveLength(2);

    registry.down = false;
    const restarted = manager();
    const adoption = await restarted.adopt(() => Promise.resolve({}));
    expect(adoption.released.sort()).toEqual([a.session_id, b.session_id].sort());
    expect(await inner.held()).toHaveLength(0);
    for (const s of [a, b]) {
      expect(await cleanupOnDisk(s.session_id)).toMatchObject({
        reason: 'shutdown',
        verified_absent: true,
        slot_released: true,
        error: null,
      });
      expect(await restarted.delete(s.session_id)).toMatchObject({ slot_released: true });
    }
  });

  it('create while the registry is down: 503 with Retry-After, no container', async () => {
    const sessions = manager();
    registry.down = true;
    const err = toApiError(await sessions.create(body()).catch((e: unknown) => e));
    expect([err.status, err.code, err.retryAfterSec]).toEqual([503, 'E_REGISTRY_UNAVAILABLE', 5]);
    expect(engine.containers.size).toBe(0);
  });

  it('the registry lost between admission and attach: 503, the container deleted at once, its slot released', async () => {
    const sessions = manager();
    registry.failAttach = true;
    const err = toApiError(await sessions.create(body()).catch((e: unknown) => e));
    expect([err.status, err.code]).toEqual([503, 'E_REGISTRY_UNAVAILABLE']);
    expect(engine.containers.size).toBe(0);
    expect(sessions.list()).toEqual([]);
    expect(await inner.held()).toHaveLength(0);
  });

  it('isRegistryUnavailable: unreachable or timed out yes; a refusal or a bad request no', () => {
    expect(isRegistryUnavailable(new RoboguideError('E_REGISTRY_UNAVAILABLE', 'x'))).toBe(true);
    expect(
      isRegistryUnavailable(new RoboguideError('E_REGISTRY', 'x', { context: { pg_code: 'ENOENT' } })),
    ).toBe(true);
    expect(
      isRegistryUnavailable(
        new RoboguideError('E_REGISTRY', 'x', {
          cause: Object.assign(new Error('connect'), { code: 'ECONNREFUSED' }),
        }),
      ),
    ).toBe(true);
    expect(
      isRegistryUnavailable(
        new RoboguideError(
          'E_REGISTRY',
          'registry transaction failed and was rolled back: database is locked',
        ),
      ),
    ).toBe(true);
    expect(
      isRegistryUnavailable(new RoboguideError('E_REGISTRY', 'x', { context: { pg_code: '23505' } })),
    ).toBe(false);
    expect(isRegistryUnavailable(new RoboguideError('E_ENGINE', 'database is locked'))).toBe(false);
    expect(isRegistryUnavailable(new Error('ECONNREFUSED'))).toBe(false);
  });
});

describe('SessionManager: references, limits, adoption', () => {
  it('a reference to a variable not allowed is 400 naming it, before the engine; an allowed one resolves', async () => {
    const sessions = manager();
    const created = await sessions.create(body({ environment: { K: '${ALLOWED_KEY}' } }));
    const err = await rejection(
      sessions.exec(created.session_id, { command: 'true', env: { X: '${OTHER_KEY}' } }),
    );
    expect([err.status, err.code, err.issues]).toEqual([
      400,
      'E_ENV_NOT_ALLOWED',
      [
        {
          path: 'env.X',
          rule: 'references ${OTHER_KEY}, which this server does not allow (start it with --allow-env OTHER_KEY)',
        },
      ],
    ]);
    const onCreate = await rejection(sessions.create(body({ environment: { K: '${OTHER_KEY}' } })));
    expect([onCreate.status, onCreate.issues[0]?.path]).toEqual([400, 'environment.K']);
    expect(await inner.held()).toHaveLength(1);
    expect(
      (await sessions.exec(created.session_id, { command: 'true', env: { X: '${ALLOWED_KEY}' } }))
        .return_code,
    ).toBe(0);
  });

  it('concurrent execs and archive transfers past the limits: 429 naming the limit; a slot frees when one ends', async () => {
    const sessions = manager();
    const a = await sessions.create(body());
    const b = await sessions.create(body());
    engine.holdExecs = true;
    const running = [
      sessions.exec(a.session_id, { command: 'x' }),
      sessions.exec(a.session_id, { command: 'x' }),
    ];
    const perSession = await rejection(sessions.exec(a.session_id, { command: 'x' }));
    expect([perSession.status, perSession.code, perSession.retryAfterSec]).toEqual([
      429,
      'E_TOO_MANY_REQUESTS',
      1,
    ]);
    expect(perSession.message).toContain('--max-execs-per-session');
    running.push(sessions.exec(b.session_id, { command: 'x' }));
    const all = await rejection(sessions.exec(b.session_id, { command: 'x' }));
    expect(all.message).toContain('limit 3, --max-execs)');
    engine.finishExecs();
    await Promise.all(running);
    engine.holdExecs = false;
    expect((await sessions.exec(b.session_id, { command: 'x' })).return_code).toBe(0);

    const upload = await sessions.beginArchive(a.session_id, { path: '/' });
    expect((await rejection(sessions.beginArchive(a.session_id, { path: '/' }))).message).toContain(
      '--max-archives-per-session',
    );
    const other = await sessions.beginArchive(b.session_id, { path: '/' });
    upload.end();
    upload.end(); // ending twice frees one slot only
    const again = await sessions.beginArchive(a.session_id, { path: '/' });
    again.end();
    other.end();
  });

  it('adoption leaves alone, and reports, a container with our labels but no matching session.json, and a duplicate id', async () => {
    const before = manager();
    const live = await before.create(body({ ttl_seconds: 3600 }));
    const liveLabels = engine.containers.get(live.container_id)!.labels;
    // Copies of our labels: one with a made-up session id, one that duplicates the live session's id and claim.
    engine.containers.set('intruder', {
      labels: { ...liveLabels, 'roboguide.job': 's-00000000-0000-0000-0000-000000000000' },
      status: 'running',
    });
    engine.containers.set('twin', { labels: { ...liveLabels }, status: 'running' });
    const after = manager();
    const adoption = await after.adopt(() => Promise.resolve({}));
    expect(adoption.adopted).toEqual([live.session_id]);
    expect(adoption.reaped).toEqual([]);
    expect(adoption.foreign).toEqual([
      {
        container_id: 'intruder',
        session_id: 's-00000000-0000-0000-0000-000000000000',
        reason: 'no session.json for its session id',
      },
      {
        container_id: 'twin',
        session_id: live.session_id,
        reason: 'session.json names another container for this session (a duplicate id)',
      },
    ]);
    expect(engine.containers.has('intruder') && engine.containers.has('twin')).toBe(true);
    // The reaper never touches them, even once the adopted session expired and was deleted.
    now += 4_000_000;
    expect(await after.reap()).toEqual([live.session_id]);
    expect([...engine.containers.keys()].sort()).toEqual(['intruder', 'twin']);
    expect(await inner.held()).toHaveLength(0);
  });
});
