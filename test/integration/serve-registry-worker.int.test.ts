// Issue 39: serve's SQLite registry works in a worker thread of its own, so no registry call holds serve's event loop:
// not its writes and fsyncs, not a wait on another process's write lock (up to the registry deadline). Against the real
// server process and the compiled worker (dist/), and the worker's transport on its own: the same answers and the same
// error classes and codes as the registry in the caller's thread.
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SqliteCapacityRegistry } from '../../dist/adapters/registry/sqlite-capacity-registry.js';
import { registryWorkerFile, WorkerCapacityRegistry } from '../../dist/adapters/registry/worker-registry.js';
import { InvalidInputError, RoboguideError } from '../../dist/core/errors.js';
import { isRegistryUnavailable } from '../../dist/app/serve/api-error.js';
import { expectNoContainersLeft, startTestServer, type TestServer } from '../../src/testing/index.js';
import { DRIVER_IMAGE, noDocker } from '../support/docker.js';

const RUN = `it-regworker-${randomUUID().slice(0, 8)}`;
const LABEL = { 'it.regworker': RUN };

describe('the registry worker (transport)', () => {
  let dir: string;
  let workerFile: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'rg-regworker-'));
    // The compiled module finds its worker (the same lookup the bundled serve makes).
    const file = registryWorkerFile();
    expect(file).toMatch(/dist\/adapters\/registry\/registry-worker\.js$/);
    workerFile = file ?? '';
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('admits, attaches and releases in the same file a registry in this thread reads', async () => {
    const path = join(dir, 'a.db');
    const worker = await WorkerCapacityRegistry.open({ path, explicit: true }, workerFile);
    try {
      await worker.setLimits({ maxReservations: 1, gpuMib: null });
      const admitted = await worker.admit({ batchId: 'b', jobId: 'j1', claimId: 'c1', gpuMib: 0 });
      expect(admitted.kind).toBe('admitted');
      if (admitted.kind !== 'admitted') return;
      await worker.attachContainer(admitted.reservationId, 'container-1');
      const direct = SqliteCapacityRegistry.open({ path });
      try {
        expect((await direct.held()).map((r) => [r.claimId, r.containerId])).toEqual([['c1', 'container-1']]);
      } finally {
        direct.closeSync();
      }
      // The limit holds across the thread: a second admission is refused, as in this thread.
      expect((await worker.admit({ batchId: 'b', jobId: 'j2', claimId: 'c2', gpuMib: 0 })).kind).toBe(
        'refused',
      );
      expect((await worker.release(admitted.reservationId, 'c1')).kind).toBe('released');
      expect(await worker.held()).toEqual([]);
      expect(worker.localNode).toBe(SqliteCapacityRegistry.open({ path: ':memory:' }).localNode);
    } finally {
      await worker.close();
    }
    // Closed: the worker is gone and a later call says so as the registry being unreachable.
    const late = await worker.held().catch((err: unknown) => err);
    expect(late).toBeInstanceOf(RoboguideError);
    expect(isRegistryUnavailable(late)).toBe(true);
  });

  it('errors cross as the same classes, codes and issues', async () => {
    const worker = await WorkerCapacityRegistry.open({ path: join(dir, 'b.db'), explicit: true }, workerFile);
    try {
      const unknown = await worker.attachContainer('no-such-reservation', 'c').catch((err: unknown) => err);
      expect(unknown).toBeInstanceOf(RoboguideError);
      expect((unknown as RoboguideError).code).toBe('E_REGISTRY');
      const invalid = await worker
        .setLimits({ maxReservations: 0, gpuMib: null })
        .catch((err: unknown) => err);
      expect(invalid).toBeInstanceOf(InvalidInputError);
      expect((invalid as InvalidInputError).issues.length).toBeGreaterThan(0);
      expect((invalid as InvalidInputError).message).toMatch(/maxReservations|max_reservations|limit/i);
    } finally {
      await worker.close();
    }
    // A location the registry refuses (a folder, not a file) is refused at open, with the registry's own error.
    const refused = await WorkerCapacityRegistry.open({ path: dir, explicit: true }, workerFile).then(
      async (r) => {
        await r.close();
        return null;
      },
      (err: unknown) => err,
    );
    expect(refused).toBeInstanceOf(RoboguideError);
    expect((refused as RoboguideError).code).toBe('E_USAGE'); // checkRegistryLocation's, as in this thread
  });
});

describe.skipIf(noDocker)('serve: a registry call never holds the event loop (issue 39), real engine', () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer({ clientMode: 'raw' });
  });
  afterAll(async () => {
    await s?.dispose();
    await expectNoContainersLeft(LABEL);
  });

  it('another client is answered while a session create waits on another process holding the registry lock', async () => {
    // Another process's write transaction (a supervisor's admission, say): serve's admission waits for it.
    const holder = new DatabaseSync(s.registryPath, { timeout: 5_000 });
    holder.exec('BEGIN IMMEDIATE');
    let locked = true;
    const unlock = (): void => {
      if (!locked) return;
      locked = false;
      holder.exec('COMMIT');
      holder.close();
    };
    try {
      const create = s.client.call<{ session_id: string }>('POST', '/v1/sessions', {
        body: { image: DRIVER_IMAGE, labels: LABEL },
      });
      // Time for the create to reach its admission (a create that has not does not make this test pass wrongly
      // on a server that blocks: it makes the wait below shorter, not the order different).
      await new Promise((resolve) => setTimeout(resolve, 1_500));
      const listed = await s.client.call<unknown[]>('GET', '/v1/sessions');
      // Answered while the lock is still held: the create's wait did not hold the loop.
      const answeredWhileLocked = locked;
      expect(listed.status).toBe(200);
      unlock();
      const created = await create;
      expect(created.status).toBe(201);
      expect(answeredWhileLocked).toBe(true);
      const deleted = await s.client.call<{ verified_absent: boolean; slot_released: boolean }>(
        'DELETE',
        `/v1/sessions/${created.body.session_id}`,
      );
      expect(deleted.body).toMatchObject({ verified_absent: true, slot_released: true });
    } finally {
      unlock();
    }
  });
});
