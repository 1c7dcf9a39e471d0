/**
 * serve across a registry outage (issue 27), real engine, real server process, a throwaway PostgreSQL stopped and
 * started again under it: DELETE answers 503 with Retry-After while the registry is down (the container is removed
 * all the same), a later DELETE and the reaper release the slot once it is back, and a shutdown during the outage
 * records what it could not release, which the next start releases. Skipped where PostgreSQL cannot run, unless
 * REQUIRE_POSTGRES=1.
 */
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parsePostgresUrl } from '../../src/adapters/registry/default-path.js';
import { PostgresCapacityRegistry } from '../../src/adapters/registry/postgres-capacity-registry.js';
import { expectNoContainersLeft, startTestServer, type TestServer } from '../../src/testing/index.js';
import { DRIVER_IMAGE, noDocker, runtime } from '../support/docker.js';
import { postgresSkipReason, startPostgres, type TestPostgres } from '../support/postgres.js';
import { until } from '../support/until.js';

const PG_BIN = process.env['ROBOGUIDE_PG_BIN'] ?? '/usr/lib/postgresql/15/bin';
const RUN = `it-serve-pg-${randomUUID().slice(0, 8)}`;
const LABEL = { 'it.serve.outage': RUN };
const skip = postgresSkipReason();
const rt = runtime();

interface Cleanup {
  session_id: string;
  reason: string;
  verified_absent: boolean;
  slot_released: boolean;
  error: string | null;
}
interface Created {
  session_id: string;
  container_id: string;
}

/** pg_ctl on the test server's data folder (test/support/postgres.ts keeps it at <socketDir>/data). */
function pgCtl(postgres: TestPostgres, action: 'stop' | 'start'): void {
  const dataDir = join(postgres.socketDir, 'data');
  const args =
    action === 'stop'
      ? ['-D', dataDir, '-m', 'fast', '-w', '-t', '30', 'stop']
      : [
          '-D',
          dataDir,
          '-l',
          join(postgres.socketDir, 'server.log'),
          '-o',
          `-k ${postgres.socketDir} -c listen_addresses='' -c fsync=off`,
          '-w',
          '-t',
          '60',
          'start',
        ];
  execFileSync('runuser', ['-u', 'postgres', '--', join(PG_BIN, 'pg_ctl'), ...args], { stdio: 'ignore' });
}

describe.skipIf(noDocker || skip !== null)(
  `serve across a PostgreSQL outage${skip !== null ? ` (${skip})` : ''}`,
  () => {
    let postgres: TestPostgres;
    let url: string;
    const servers: TestServer[] = [];

    async function heldSlots(): Promise<string[]> {
      const registry = await PostgresCapacityRegistry.open({
        connection: parsePostgresUrl(url).connection,
        display: 'test',
      });
      try {
        return (await registry.held()).map((r) => r.jobId);
      } finally {
        await registry.close();
      }
    }

    async function create(s: TestServer): Promise<Created> {
      const res = await s.client.call<Created>('POST', '/v1/sessions', {
        body: { image: DRIVER_IMAGE, labels: LABEL },
      });
      expect(res.status, JSON.stringify(res.body)).toBe(201);
      return res.body;
    }

    async function cleanupOnDisk(s: TestServer, id: string): Promise<Cleanup> {
      return JSON.parse(await readFile(join(s.dataDir, 'sessions', id, 'cleanup.json'), 'utf8')) as Cleanup;
    }

    beforeAll(async () => {
      postgres = startPostgres();
      url = await postgres.createDatabase('serve_outage');
      const registry = await PostgresCapacityRegistry.open({
        connection: parsePostgresUrl(url).connection,
        display: 'test',
      });
      await registry.setLimits({ maxReservations: 10, gpuMib: null });
      await registry.close();
    });
    afterAll(async () => {
      try {
        pgCtl(postgres, 'start');
      } catch {
        // already running
      }
      await Promise.all(servers.map((s) => s.dispose()));
      postgres.stop();
      await expectNoContainersLeft(LABEL);
    });

    it('DELETE: 503 + Retry-After while down (container removed anyway); after recovery a DELETE and the reaper release the slots', async () => {
      const s = await startTestServer({ clientMode: 'raw', registry: url, reapIntervalSec: 2 });
      servers.push(s);
      const a = await create(s);
      const b = await create(s);
      expect((await heldSlots()).sort()).toEqual([a.session_id, b.session_id].sort());

      pgCtl(postgres, 'stop');
      const started = Date.now();
      const down = await s.client.call<{ error: { code: string; message: string } }>(
        'DELETE',
        `/v1/sessions/${a.session_id}`,
      );
      const answeredMs = Date.now() - started;
      console.info(`DELETE while PostgreSQL is stopped answered ${down.status} in ${answeredMs} ms`);
      expect(down.status).toBe(503);
      expect(down.headers['retry-after']).toBe('5');
      expect(down.body.error.code).toBe('E_REGISTRY_UNAVAILABLE');
      expect(await rt.inspect(a.container_id)).toBeNull();
      expect((await s.client.call('DELETE', `/v1/sessions/${a.session_id}`)).status).toBe(503);
      expect((await s.client.call('DELETE', `/v1/sessions/${b.session_id}`)).status).toBe(503);
      expect(await rt.inspect(b.container_id)).toBeNull();
      expect(await cleanupOnDisk(s, a.session_id)).toMatchObject({
        verified_absent: true,
        slot_released: false,
      });

      pgCtl(postgres, 'start');
      const after = await s.client.call<Cleanup>('DELETE', `/v1/sessions/${a.session_id}`);
      expect(after.status).toBe(200);
      expect(after.body).toMatchObject({
        reason: 'deleted',
        verified_absent: true,
        slot_released: true,
        error: null,
      });
      // b is left to the reaper (every 2 s).
      await until(
        async () => ((await heldSlots()).length === 0 ? true : undefined),
        'reaper released the slot of b',
      );
      expect((await s.client.call<Cleanup>('DELETE', `/v1/sessions/${b.session_id}`)).body).toMatchObject({
        verified_absent: true,
        slot_released: true,
      });
      expect(await cleanupOnDisk(s, b.session_id)).toMatchObject({ slot_released: true, error: null });
    }, 180_000);

    it('SIGTERM while down: containers removed, the unreleased slot recorded (exit 1); the next start releases it', async () => {
      const s = await startTestServer({ clientMode: 'raw', registry: url, reapIntervalSec: 3600 });
      servers.push(s);
      const c = await create(s);
      pgCtl(postgres, 'stop');
      expect(await s.stop('SIGTERM')).toBe(1);
      expect(s.stderr()).toContain(`not released (${c.session_id})`);
      expect(await rt.inspect(c.container_id)).toBeNull();
      expect(await cleanupOnDisk(s, c.session_id)).toMatchObject({
        reason: 'shutdown',
        verified_absent: true,
        slot_released: false,
      });

      pgCtl(postgres, 'start');
      expect(await heldSlots()).toEqual([c.session_id]);
      const next = await startTestServer({
        clientMode: 'raw',
        registry: url,
        workDir: s.workDir,
        reapIntervalSec: 3600,
      });
      servers.push(next);
      expect(next.started.released_slots).toEqual([c.session_id]);
      expect(next.started.foreign).toEqual([]);
      expect(await heldSlots()).toEqual([]);
      expect(await cleanupOnDisk(next, c.session_id)).toMatchObject({
        reason: 'shutdown',
        slot_released: true,
        error: null,
      });
      expect((await next.client.call<Cleanup>('DELETE', `/v1/sessions/${c.session_id}`)).body).toMatchObject({
        slot_released: true,
      });
      expect(await next.stop('SIGTERM')).toBe(0);
    }, 180_000);
  },
);
