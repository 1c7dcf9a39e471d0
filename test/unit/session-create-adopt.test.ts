import { mkdir, mkdtemp, rm, symlink } from 'node:fs/promises';
import { realpath } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NodeFileSystem } from '../../src/adapters/fs/node-file-system.js';
import { EvidenceStore } from '../../src/app/evidence/evidence-store.js';
import { ApiError } from '../../src/app/serve/api-error.js';
import { SessionCreateSchema } from '../../src/app/serve/schemas.js';
import { adoptedSession } from '../../src/app/serve/session-adopt.js';
import { checkCreate, startContainer, type CreateDeps } from '../../src/app/serve/session-create.js';
import type { SessionEngine } from '../../src/app/serve/session-engine.js';
import { SESSION_SCHEMA, sessionRel, type Session, type SessionRecord } from '../../src/app/serve/session-state.js';
import type { CapacityRegistry } from '../../src/app/ports/capacity-registry.js';

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
  const at = Date.parse(record.expires_at);
  return { record, secrets: [], ports: {}, expiresAtMs: at, persistedExpiresAtMs: at, state, deletion: null, execs: new Set(), ready: Promise.resolve() };
}

describe('checkCreate', () => {
  const created: unknown[] = [];
  function deps(images: readonly string[] = ['img:1'], environment: Record<string, string> = { API_KEY: 'k-123456789012' }): CreateDeps {
    const engine = {
      imageExists: (image: string) => Promise.resolve(images.includes(image)),
      createAndStart: (request: unknown) => {
        created.push(request);
        return Promise.resolve({ id: 'c-1', ports: {} });
      },
    } as unknown as SessionEngine;
    return { engine, fs: new NodeFileSystem(), store, environment, protectedPaths: { outputDir: join(dir, 'data') }, bindAddress: '127.0.0.1', stopBudgetSec: 7 };
  }

  async function apiError(work: Promise<unknown>): Promise<ApiError> {
    const err: unknown = await work.catch((e: unknown) => e);
    if (!(err instanceof ApiError)) throw new Error(`expected an ApiError, got ${String(err)}`);
    return err;
  }

  it('an unset reference is E_ENV_MISSING (400)', async () => {
    const err = await apiError(checkCreate(deps(), SessionCreateSchema.parse({ image: 'img:1', environment: { X: '${NOT_SET}' } }), []));
    expect([err.status, err.code]).toEqual([400, 'E_ENV_MISSING']);
  });

  it('a mount whose source is missing is refused at its index; one reaching the evidence is refused too', async () => {
    await mkdir(join(dir, 'present'));
    const missing = await apiError(
      checkCreate(deps(), SessionCreateSchema.parse({ image: 'img:1', mounts: [{ source: join(dir, 'present'), target: '/a' }, { source: join(dir, 'absent'), target: '/b' }] }), []),
    );
    expect(missing.issues).toEqual([{ path: 'mounts[1].source', rule: "does not exist on the server's host" }]);
    // A symlink to the evidence directory: refused by its real path.
    await symlink(join(dir, 'data'), join(dir, 'link'));
    const protectedErr = await apiError(checkCreate(deps(), SessionCreateSchema.parse({ image: 'img:1', mounts: [{ source: join(dir, 'link'), target: '/d' }] }), []));
    expect(protectedErr.issues.map((i) => i.path)).toEqual(['mounts[0].source']);
  });

  it('a port another live session publishes is E_PORT_TAKEN; a deleted session holds no port', async () => {
    const body = SessionCreateSchema.parse({ image: 'img:1', network: 'bridge', ports: [8080] });
    const other = sessionOf(recordOf({ session_id: 's-other', ports: [9090, 8080] }));
    const err = await apiError(checkCreate(deps(), body, [other]));
    expect([err.status, err.code, err.message]).toEqual([409, 'E_PORT_TAKEN', 'port 8080 is already published by session s-other']);
    const gone = sessionOf(recordOf({ session_id: 's-gone', ports: [8080] }), 'deleted');
    await expect(checkCreate(deps(), body, [gone])).resolves.toMatchObject({ binds: [] });
  });

  it('an image the engine lacks is E_IMAGE_MISSING; a good request resolves its values, secrets and real mount paths', async () => {
    const err = await apiError(checkCreate(deps([]), SessionCreateSchema.parse({ image: 'img:1' }), []));
    expect(err.code).toBe('E_IMAGE_MISSING');
    await mkdir(join(dir, 'work'));
    await symlink(join(dir, 'work'), join(dir, 'work-link'));
    const ok = await checkCreate(deps(), SessionCreateSchema.parse({ image: 'img:1', environment: { API_KEY: '${API_KEY}', M: 'x' }, mounts: [{ source: join(dir, 'work-link'), target: '/w', read_only: true }] }), []);
    expect(ok.resolved.values).toEqual({ API_KEY: 'k-123456789012', M: 'x' });
    expect(ok.resolved.secrets).toEqual(['k-123456789012']);
    expect(ok.binds).toEqual([{ hostPath: await realpath(join(dir, 'work')), containerPath: '/w', readOnly: true }]);
  });

  it('startContainer writes session.json first, then asks the engine with the limits converted (absent ones: the defaults, no CPU quota)', async () => {
    created.length = 0;
    const session = sessionOf(recordOf());
    const withLimits = SessionCreateSchema.parse({ image: 'img:1', cpus: 1.5, memory_mb: 64, gpus: 'all' });
    await startContainer(deps(), session, { body: withLimits, env: { A: '1' }, binds: [], labels: { 'roboguide.job': SID } });
    expect(await store.readJson(sessionRel(SID, 'session.json'))).toEqual(session.record);
    expect(created[0]).toMatchObject({ name: `roboguide-${SID}`, nanoCpus: 1_500_000_000, memoryBytes: 64 * 1024 * 1024, stopTimeoutSec: 7, bindAddress: '127.0.0.1' });
    expect((created[0] as { deviceRequests: unknown[] }).deviceRequests.length).toBeGreaterThan(0);
    await rm(join(dir, 'data', 'sessions'), { recursive: true });
    await startContainer(deps(), session, { body: SessionCreateSchema.parse({ image: 'img:1' }), env: {}, binds: [], labels: {} });
    // Issue 22: a session that asks for nothing still gets a pids limit and a memory limit (the fixed fallback here).
    expect(created[1]).toMatchObject({ nanoCpus: undefined, memoryBytes: 4096 * 1024 * 1024, limits: { pidsLimit: 4096, memorySwapBytes: 4096 * 1024 * 1024 } });
  });
});

describe('adoptedSession', () => {
  const registry = {
    reservationForClaim: (claimId: string) => Promise.resolve(claimId === 'claim-1' ? { id: 'res-1' } : null),
  } as unknown as CapacityRegistry;
  const labels = { 'roboguide.job': SID, 'roboguide.claim': 'claim-1' };
  const now = Date.parse('2026-12-03T10:05:00.000Z');
  const envOf = (reads: string[]) => (id: string) => {
    reads.push(id);
    return Promise.resolve({ API_KEY: 'k-secret-value', MODE: 'fast' });
  };

  it('a live, unexpired, running container with its session.json: live, its secrets read back from the engine', async () => {
    await store.ensureDir(sessionRel(SID));
    await store.writeJsonAtomic(sessionRel(SID, 'session.json'), recordOf());
    const reads: string[] = [];
    const adopted = await adoptedSession({ store, registry }, { id: 'c-9', labels, status: 'running' }, now, envOf(reads));
    expect(adopted.live).toBe(true);
    expect(adopted.sessionId).toBe(SID);
    expect(adopted.session.record.container_id).toBe('c-9');
    // Only referenced values are secrets; a referenced one the container lacks is none.
    expect(adopted.session.secrets).toEqual(['k-secret-value']);
    expect(reads).toEqual(['c-9']);
  });

  it('expired, or not running: to be deleted, and the engine is not asked for its environment', async () => {
    await store.ensureDir(sessionRel(SID));
    await store.writeJsonAtomic(sessionRel(SID, 'session.json'), recordOf());
    const reads: string[] = [];
    const later = Date.parse('2026-12-03T11:00:00.000Z');
    expect((await adoptedSession({ store, registry }, { id: 'c-9', labels, status: 'running' }, later, envOf(reads))).live).toBe(false);
    expect((await adoptedSession({ store, registry }, { id: 'c-9', labels, status: 'exited' }, now, envOf(reads))).live).toBe(false);
    expect(reads).toEqual([]);
  });

  it('without session.json (or with labels that are not a session id): a record from the labels and registry, not live', async () => {
    const reads: string[] = [];
    const fromLabels = await adoptedSession({ store, registry }, { id: 'c-9', labels, status: 'running' }, now, envOf(reads));
    expect(fromLabels.live).toBe(false);
    expect(fromLabels.session.record).toMatchObject({ session_id: SID, claim_id: 'claim-1', reservation_id: 'res-1', container_id: 'c-9' });
    const foreign = await adoptedSession({ store, registry }, { id: 'c-8', labels: {}, status: 'running' }, now, envOf(reads));
    expect(foreign.sessionId).toBe('');
    expect(foreign.session.record).toMatchObject({ claim_id: '', reservation_id: '', container_id: 'c-8' });
    expect(foreign.live).toBe(false);
    expect(reads).toEqual([]);
  });

  it('an unreadable session.json counts as none; a container whose environment cannot be read is not live', async () => {
    await store.ensureDir(sessionRel(SID));
    await store.writeBytesAtomic(sessionRel(SID, 'session.json'), new TextEncoder().encode('{torn'));
    const unreadable = await adoptedSession({ store, registry }, { id: 'c-9', labels, status: 'running' }, now, envOf([]));
    expect(unreadable.live).toBe(false);
    expect(unreadable.session.record.image).toBe('');
    await store.writeJsonAtomic(sessionRel(SID, 'session.json'), recordOf());
    const noEnv = await adoptedSession({ store, registry }, { id: 'c-9', labels, status: 'running' }, now, () => Promise.resolve(null));
    expect(noEnv.live).toBe(false);
    expect(noEnv.session.secrets).toEqual([]);
  });
});
