import { mkdir, mkdtemp, rm, symlink } from 'node:fs/promises';
import { realpath } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { EvidenceStore } from '../../src/app/evidence/evidence-store.js';
import { ApiError } from '../../src/app/serve/api-error.js';
import { SessionCreateSchema } from '../../src/app/serve/session-schemas.js';
import { adoptedSession } from '../../src/app/serve/session-adopt.js';
import { checkCreate, startContainer, type CreateDeps } from '../../src/app/serve/session-create.js';
import {
  SESSION_SCHEMA,
  sessionOf as freshSession,
  sessionRel,
  type Session,
  type SessionRecord,
} from '../../src/app/serve/session-state.js';
import type { Reservation } from '../../src/app/ports/capacity-registry.js';
import { fakeRegistry } from '../support/fakes.js';

/**
 * A session's creation checks and container start (session-create) and a container found after a restart taken back
 * as a session (session-adopt), with a hand-written engine and registry and a real evidence directory.
 */

let dir: string;
let store: EvidenceStore;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rg-session-ca-'));
  await EvidenceStore.createOutputDir(new NodeFileSystem(), join(dir, 'data'));
  store = new EvidenceStore(new NodeFileSystem(), join(dir, 'data'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const SID = 's-0123abcd-0123-4567-89ab-0123456789ab';

function recordOf(extra: Partial<SessionRecord> = {}): SessionRecord {
  return {
    schema: SESSION_SCHEMA,
    session_id: SID,
    claim_id: 'claim-1',
    reservation_id: 'res-1',
    container_id: null,
    container_name: `roboguide-${SID}`,
    image: 'img:1',
    environment: { API_KEY: '${API_KEY}', MODE: 'fast', EMPTY: '${EMPTY}' },
    ports: [],
    network: 'none',
    labels: {},
    ttl_seconds: 600,
    created_at: '2026-12-03T10:00:00.000Z',
    expires_at: '2026-12-03T10:10:00.000Z',
    ...extra,
  };
}

function sessionOf(record: SessionRecord, state: Session['state'] = 'live'): Session {
  return freshSession({ record, secrets: [], expiresAtMs: Date.parse(record.expires_at), state });
}

describe('checkCreate', () => {
  const created: unknown[] = [];
  function deps(
    images: readonly string[] = ['img:1'],
    environment: Record<string, string> = { API_KEY: 'k-123456789012' },
  ): CreateDeps {
    const engine = {
      info: () => Promise.resolve({ id: 'fake', version: 'fake', apiVersion: '1.41', runtimes: [] }),
      imageExists: (image: string) => Promise.resolve(images.includes(image)),
      createAndStart: (request: unknown) => {
        created.push(request);
        return Promise.resolve({ id: 'c-1', ports: {} });
      },
    } satisfies CreateDeps['engine'];
    return {
      engine,
      fs: new NodeFileSystem(),
      store,
      environment,
      protectedPaths: { outputDir: join(dir, 'data') },
      bindAddress: '127.0.0.1',
      stopBudgetSec: 7,
      allowedEnv: new Set(['API_KEY', 'NOT_SET']),
      clock: { nextTurn: () => Promise.resolve() },
    };
  }

  async function apiError(work: Promise<unknown>): Promise<ApiError> {
    const err: unknown = await work.catch((e: unknown) => e);
    if (!(err instanceof ApiError)) throw new Error(`expected an ApiError, got ${String(err)}`);
    return err;
  }

  it('an unset reference is E_ENV_MISSING (400)', async () => {
    const err = await apiError(
      checkCreate(
        deps(),
        SessionCreateSchema.parse({ image: 'img:1', environment: { X: '${NOT_SET}' } }),
        [],
      ),
    );
    expect([err.status, err.code]).toEqual([400, 'E_ENV_MISSING']);
  });

  it('a reference to a variable not allowed (--allow-env) is E_ENV_NOT_ALLOWED (400) naming it, even when it is set', async () => {
    const environment = { API_KEY: 'k-123456789012', HOME_SECRET: 'h-123456789012' };
    const err = await apiError(
      checkCreate(
        deps(['img:1'], environment),
        SessionCreateSchema.parse({ image: 'img:1', environment: { X: '${HOME_SECRET}', K: '${API_KEY}' } }),
        [],
      ),
    );
    expect([err.status, err.code]).toEqual([400, 'E_ENV_NOT_ALLOWED']);
    expect(err.issues).toEqual([
      {
        path: 'environment.X',
        rule: 'references ${HOME_SECRET}, which this server does not allow (start it with --allow-env HOME_SECRET)',
      },
    ]);
  });

  it('a mount whose source is missing is refused at its index; one reaching the evidence is refused too', async () => {
    await mkdir(join(dir, 'present'));
    const missing = await apiError(
      checkCreate(
        deps(),
        SessionCreateSchema.parse({
          image: 'img:1',
          mounts: [
            { source: join(dir, 'present'), target: '/a' },
            { source: join(dir, 'absent'), target: '/b' },
          ],
        }),
        [],
      ),
    );
    expect(missing.issues).toEqual([
      { path: 'mounts[1].source', rule: "does not exist on the server's host" },
    ]);
    // A symlink to the evidence directory: refused by its real path.
    await symlink(join(dir, 'data'), join(dir, 'link'));
    const protectedErr = await apiError(
      checkCreate(
        deps(),
        SessionCreateSchema.parse({ image: 'img:1', mounts: [{ source: join(dir, 'link'), target: '/d' }] }),
        [],
      ),
    );
    expect(protectedErr.issues.map((i) => i.path)).toEqual(['mounts[0].source']);
  });

  it('a port another live session publishes is E_PORT_TAKEN; a deleted session holds no port', async () => {
    const body = SessionCreateSchema.parse({ image: 'img:1', network: 'bridge', ports: [8080] });
    const other = sessionOf(recordOf({ session_id: 's-other', ports: [9090, 8080] }));
    const err = await apiError(checkCreate(deps(), body, [other]));
    expect([err.status, err.code, err.message]).toEqual([
      409,
      'E_PORT_TAKEN',
      'port 8080 is already published by session s-other',
    ]);
    const gone = sessionOf(recordOf({ session_id: 's-gone', ports: [8080] }), 'deleted');
    await expect(checkCreate(deps(), body, [gone])).resolves.toMatchObject({ binds: [] });
  });

  it('an image the engine lacks is E_IMAGE_MISSING; a good request resolves its values, secrets and real mount paths', async () => {
    const err = await apiError(checkCreate(deps([]), SessionCreateSchema.parse({ image: 'img:1' }), []));
    expect(err.code).toBe('E_IMAGE_MISSING');
    await mkdir(join(dir, 'work'));
    await symlink(join(dir, 'work'), join(dir, 'work-link'));
    const ok = await checkCreate(
      deps(),
      SessionCreateSchema.parse({
        image: 'img:1',
        environment: { API_KEY: '${API_KEY}', M: 'x' },
        mounts: [{ source: join(dir, 'work-link'), target: '/w', read_only: true }],
      }),
      [],
    );
    expect(ok.resolved.values).toEqual({ API_KEY: 'k-123456789012', M: 'x' });
    expect(ok.resolved.secrets).toEqual(['k-123456789012']);
    expect(ok.binds).toEqual([
      { hostPath: await realpath(join(dir, 'work')), containerPath: '/w', readOnly: true },
    ]);
  });

  it('startContainer writes session.json first, then asks the engine with the limits converted (absent ones: the defaults, no CPU quota)', async () => {
    created.length = 0;
    const session = sessionOf(recordOf());
    const withLimits = SessionCreateSchema.parse({ image: 'img:1', cpus: 1.5, memory_mb: 64, gpus: 'all' });
    await startContainer(deps(), session, {
      body: withLimits,
      env: { A: '1' },
      binds: [],
      labels: { 'roboguide.job': SID },
    });
    expect(await store.readJson(sessionRel(SID, 'session.json'))).toEqual(session.record);
    expect(created[0]).toMatchObject({
      name: `roboguide-${SID}`,
      nanoCpus: 1_500_000_000,
      memoryBytes: 64 * 1024 * 1024,
      stopTimeoutSec: 7,
      bindAddress: '127.0.0.1',
    });
    expect((created[0] as { deviceRequests: unknown[] }).deviceRequests.length).toBeGreaterThan(0);
    await rm(join(dir, 'data', 'sessions'), { recursive: true });
    await startContainer(deps(), session, {
      body: SessionCreateSchema.parse({ image: 'img:1' }),
      env: {},
      binds: [],
      labels: {},
    });
    // Issue 22: a session that asks for nothing still gets a pids limit and a memory limit (the fixed fallback here).
    expect(created[1]).toMatchObject({
      nanoCpus: undefined,
      memoryBytes: 4096 * 1024 * 1024,
      limits: { pidsLimit: 4096, memorySwapBytes: 4096 * 1024 * 1024 },
    });
  });
});

describe('adoptedSession', () => {
  const held: Reservation = {
    id: 'res-1',
    batchId: 'serve-test',
    jobId: SID,
    claimId: 'claim-1',
    containerId: 'c-9',
    gpuMib: 0,
    node: 'here',
    ports: [],
    state: 'held',
    createdAt: '2026-12-03T00:00:00.000Z',
    releasedAt: null,
    proofSha256: null,
  };
  let reservation: Reservation | null = held;
  const registry = fakeRegistry({
    reservationForClaim: (claimId: string) => Promise.resolve(claimId === 'claim-1' ? reservation : null),
  });
  const labels = { 'roboguide.job': SID, 'roboguide.claim': 'claim-1', 'roboguide.serve': 'session' };
  const now = Date.parse('2026-12-03T10:05:00.000Z');
  const envOf =
    (reads: string[]) =>
    (id: string): Promise<Record<string, string> | null> => {
      reads.push(id);
      return Promise.resolve({ API_KEY: 'k-secret-value', MODE: 'fast' });
    };
  const adopt = (
    container: { id: string; labels: Record<string, string>; status: string },
    at = now,
    env = envOf([]),
  ) => adoptedSession({ store, registry, batchId: 'serve-test' }, container, at, env);
  async function writeRecord(extra: Partial<SessionRecord> = {}): Promise<void> {
    await store.ensureDir(sessionRel(SID));
    await store.writeJsonAtomic(sessionRel(SID, 'session.json'), recordOf({ container_id: 'c-9', ...extra }));
  }
  beforeEach(() => {
    reservation = held;
  });

  it('labels, session.json and a held reservation that agree: live, its secrets read back from the engine', async () => {
    await writeRecord();
    const reads: string[] = [];
    const adopted = await adopt({ id: 'c-9', labels, status: 'running' }, now, envOf(reads));
    if (adopted.kind !== 'session') throw new Error(`expected a session, got ${adopted.reason}`);
    expect(adopted.live).toBe(true);
    expect(adopted.sessionId).toBe(SID);
    expect(adopted.session.record.container_id).toBe('c-9');
    // Only referenced values are secrets; a referenced one the container lacks is none.
    expect(adopted.session.secrets).toEqual(['k-secret-value']);
    expect(reads).toEqual(['c-9']);
  });

  it('a server that died before session.json named the container: the reservation names it', async () => {
    await writeRecord({ container_id: null });
    expect(await adopt({ id: 'c-9', labels, status: 'running' })).toMatchObject({
      kind: 'session',
      live: true,
    });
    expect(await adopt({ id: 'c-7', labels, status: 'running' })).toMatchObject({ kind: 'foreign' });
  });

  it('expired, or not running: to be deleted, and the engine is not asked for its environment', async () => {
    await writeRecord();
    const reads: string[] = [];
    const later = Date.parse('2026-12-03T11:00:00.000Z');
    expect(await adopt({ id: 'c-9', labels, status: 'running' }, later, envOf(reads))).toMatchObject({
      kind: 'session',
      live: false,
    });
    expect(await adopt({ id: 'c-9', labels, status: 'exited' }, now, envOf(reads))).toMatchObject({
      kind: 'session',
      live: false,
    });
    expect(reads).toEqual([]);
  });

  it('anything that does not match is foreign, with its reason, and its environment is never read', async () => {
    const reads: string[] = [];
    const env = envOf(reads);
    const foreign = async (container: { id: string; labels: Record<string, string> }): Promise<string> => {
      const found = await adopt({ ...container, status: 'running' }, now, env);
      if (found.kind !== 'foreign') throw new Error(`${container.id} was taken as a session`);
      return found.reason;
    };
    expect(await foreign({ id: 'c-9', labels })).toBe('no session.json for its session id');
    await writeRecord();
    expect(await foreign({ id: 'c-9', labels: { ...labels, 'roboguide.serve': 'x' } })).toBe(
      'no roboguide.serve=session label',
    );
    expect(await foreign({ id: 'c-9', labels: { ...labels, 'roboguide.job': 'nope' } })).toBe(
      'its roboguide.job label is not a session id',
    );
    expect(await foreign({ id: 'c-9', labels: { ...labels, 'roboguide.claim': 'claim-2' } })).toBe(
      'its labels do not match session.json (session id or claim)',
    );
    expect(await foreign({ id: 'c-8', labels })).toBe(
      'session.json names another container for this session (a duplicate id)',
    );
    reservation = { ...held, batchId: 'serve-other' };
    expect(await foreign({ id: 'c-9', labels })).toBe(
      'the reservation of its claim does not match session.json',
    );
    reservation = { ...held, state: 'released' };
    expect(await foreign({ id: 'c-9', labels })).toBe('the reservation of its claim is already released');
    reservation = null;
    expect(await foreign({ id: 'c-9', labels })).toBe('no registry reservation for its claim');
    await store.writeBytesAtomic(sessionRel(SID, 'session.json'), new TextEncoder().encode('{torn'));
    reservation = held;
    expect(await foreign({ id: 'c-9', labels })).toBe('no session.json for its session id');
    expect(reads).toEqual([]);
  });

  it('a container whose environment cannot be read is not live', async () => {
    await writeRecord();
    const noEnv = await adopt({ id: 'c-9', labels, status: 'running' }, now, () => Promise.resolve(null));
    expect(noEnv).toMatchObject({ kind: 'session', live: false, session: { secrets: [] } });
  });
});
