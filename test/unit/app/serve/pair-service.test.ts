import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { NodeFileSystem } from '../../../../src/adapters/fs/node-file-system.js';
import { SqliteCapacityRegistry } from '../../../../src/adapters/registry/sqlite-capacity-registry.js';
import { EvidenceStore } from '../../../../src/app/evidence/evidence-store.js';
import { silentLogger } from '../../../../src/app/ports/logger.js';
import { ApiError } from '../../../../src/app/serve/api-error.js';
import { PairService } from '../../../../src/app/serve/pair-service.js';
import { FakePairRuntime } from '../../../support/fake-pair-runtime.js';
import { steppingClock } from '../../../support/finished-pair.js';
import { fileOutcomeReader } from '../../../../src/adapters/outcome-reader.js';
import { procHostIdentity } from '../../../../src/adapters/host-identity.js';
import { clockAt } from '../../../support/fake-time.js';

let tmp: string;
let registry: SqliteCapacityRegistry;
let runtime: FakePairRuntime;
let service: PairService;
let store: EvidenceStore;

beforeEach(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'rg-pair-service-'));
  await mkdir(join(tmp, 'cwd'));
  await mkdir(join(tmp, 'out'));
  await mkdir(join(tmp, 'data'));
  registry = SqliteCapacityRegistry.open({ path: join(tmp, 'registry.db'), clock: steppingClock() });
  runtime = new FakePairRuntime();
  store = new EvidenceStore(new NodeFileSystem(), join(tmp, 'data'));
  service = new PairService({
    pairDeps: {
      runtime,
      clock: clockAt(() => new Date()),
      logger: silentLogger,
      createRedactor: () => new PassThrough(),
      extractSessions: () => Promise.reject(new Error('no sessions in these tests')),
      diagnose: () => Promise.resolve(null),
      fs: new NodeFileSystem(),
      host: procHostIdentity,
      outcomes: fileOutcomeReader,
      registry,
    },
    store,
    allowedEnv: new Set(),
    environment: {},
    bindAddress: '127.0.0.1',
    codeVersion: 't',
    protectedPaths: {
      outputDir: join(tmp, 'data'),
      registryPath: join(tmp, 'registry.db'),
      homeDir: join(tmp, 'home'),
      engineSocketPaths: [],
    },
  });
});
afterEach(async () => {
  await service.stopAll();
  registry.closeSync();
  await rm(tmp, { recursive: true, force: true });
});

function spec(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    job_id: 'pair-0001',
    argv: ['/opt/driver/run'],
    cwd: join(tmp, 'cwd'),
    outcome_path: join(tmp, 'out', 'o.json'),
    image: 'roboguide/pair-driver:1',
    timeout_seconds: 60,
    ...extra,
  };
}

async function apiError(promise: Promise<unknown>): Promise<ApiError> {
  const err: unknown = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ApiError);
  return err as ApiError;
}

async function settled(pairId: string): Promise<void> {
  while (service.isRunning(pairId)) await new Promise((r) => setImmediate(r));
}

describe('PairService (`/v1/pairs`)', () => {
  it('runs a pair with the `pair run` lifecycle: 202 once claimed, then finished with its receipt and result under pairs/<id>', async () => {
    const { pair_id } = await service.start(spec());
    expect(pair_id).toMatch(/^p-[0-9a-f-]{36}$/);
    expect(await store.exists(`pairs/${pair_id}/receipt.json`)).toBe(true);
    await settled(pair_id);
    const status = await service.status(pair_id);
    expect(status).toMatchObject({
      pair_id,
      state: 'finished',
      error: null,
      receipt: { job_id: 'pair-0001' },
    });
    expect(status.result).toMatchObject({ job_id: 'pair-0001', cleanup: { verified_absent: true } });
    expect(runtime.created).toHaveLength(1);
    expect(runtime.removed).toContain('c1');
    expect(service.outputOf(pair_id)).toBe(join(tmp, 'data', 'pairs', pair_id));
  });

  it('answers once runPair signals the claim: the disk is never polled for receipt.json', async () => {
    const lstat = vi.spyOn(NodeFileSystem.prototype, 'lstat');
    try {
      const { pair_id } = await service.start(spec());
      const looks = lstat.mock.calls.filter(([path]) => String(path).endsWith('receipt.json'));
      expect(looks).toEqual([]);
      expect(await store.exists(`pairs/${pair_id}/receipt.json`)).toBe(true);
      await settled(pair_id);
    } finally {
      lstat.mockRestore();
    }
  });

  it('refuses an invalid spec (400) and one that would mount a protected path (400), running nothing', async () => {
    expect((await apiError(service.start({ job_id: 'x' }))).status).toBe(400);
    const err = await apiError(service.start(spec({ cwd: join(tmp, 'data') })));
    expect([err.status, err.issues[0]?.path]).toEqual([400, 'cwd']);
    expect(runtime.created).toEqual([]);
    expect(await store.exists('pairs')).toBe(false);
  });

  it('a pair refused before its claim (image missing) answers with that refusal, and is not listed', async () => {
    runtime.images.clear();
    const err = await apiError(service.start(spec()));
    expect(err.status).toBeGreaterThanOrEqual(400);
    expect(runtime.created).toEqual([]);
  });

  it('a full host refuses with 409 E_CAPACITY (as docs/serve.md says), naming the limit, running nothing', async () => {
    await registry.setLimits({ maxReservations: 1, gpuMib: null });
    const other = await registry.admit({ batchId: 'other', jobId: 'x', claimId: 'c-other', gpuMib: 0 });
    expect(other.kind).toBe('admitted');
    const err = await apiError(service.start(spec()));
    expect([err.status, err.code]).toEqual([409, 'E_CAPACITY']);
    expect(err.message).toContain('capacity limit (1 of 1 held)');
    expect(runtime.created).toEqual([]);
  });

  it('stop: the controlled stop, then the usual collection and verified removal', async () => {
    runtime.exitAt = 'stop';
    const { pair_id } = await service.start(spec());
    expect(service.isRunning(pair_id)).toBe(true);
    const status = await service.stop(pair_id);
    expect(status.state).toBe('finished');
    expect(status.result).toMatchObject({ cleanup: { verified_absent: true } });
    expect(runtime.stopped).toContain('c1');
    expect(service.isRunning(pair_id)).toBe(false);
  });

  it('unknown or malformed pair ids are 404; a pair left by an earlier server without a result is failed', async () => {
    expect((await apiError(service.status('p-00000000-0000-0000-0000-000000000000'))).status).toBe(404);
    expect(() => service.outputOf('../etc')).toThrow(ApiError);
    expect((await apiError(service.stop('nope'))).status).toBe(404);
    const id = 'p-11111111-1111-1111-1111-111111111111';
    await store.ensureDir(`pairs/${id}`);
    await store.writeJsonAtomic(`pairs/${id}/receipt.json`, { job_id: 'pair-0001' });
    expect(await service.status(id)).toEqual({
      pair_id: id,
      state: 'failed',
      receipt: { job_id: 'pair-0001' },
      result: null,
      error: 'the server stopped before this pair finished',
    });
    await store.writeJsonAtomic(`pairs/${id}/result.json`, { job_id: 'pair-0001' });
    expect(await service.status(id)).toMatchObject({ state: 'finished', error: null });
  });
});
