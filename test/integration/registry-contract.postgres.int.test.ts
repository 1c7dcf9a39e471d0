/**
 * The registry contract (test/support/registry-contract.ts) against PostgreSQL: one throwaway server for the
 * file (test/support/postgres.ts), a new database per test. Skipped where PostgreSQL cannot run, unless
 * REQUIRE_POSTGRES=1.
 */
import { spawnSync } from 'node:child_process';
import { resolve } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parsePostgresUrl } from '../../src/adapters/registry/default-path.js';
import { PostgresCapacityRegistry } from '../../src/adapters/registry/postgres-capacity-registry.js';
import { POSTGRES_SCHEMA_VERSION } from '../../src/adapters/registry/postgres-schema.js';
import { postgresSkipReason, startPostgres, type TestPostgres } from '../support/postgres.js';
import { registryContract } from '../support/registry-contract.js';

const BIN = resolve('bin/run.js');
const skip = postgresSkipReason();
let server: TestPostgres | null = null;
let url = '';
let counter = 0;

if (skip !== null) {
  describe.skip(`registry contract (PostgreSQL): ${skip}`, () => {
    it('needs PostgreSQL', () => undefined);
  });
} else {
  beforeAll(() => {
    server = startPostgres();
  });
  afterAll(() => server?.stop());

  registryContract({
    name: 'PostgreSQL',
    schemaVersion: POSTGRES_SCHEMA_VERSION,
    concurrentAdmitters: 20,
    fresh: async () => {
      url = await server!.createDatabase(`contract_${counter++}`);
    },
    open: async (options) => {
      const location = parsePostgresUrl(url);
      return PostgresCapacityRegistry.open({
        connection: location.connection,
        display: location.path,
        ...options,
        maxConnections: 2,
      });
    },
    rawSql: async (sql, ...params) => {
      const location = parsePostgresUrl(url);
      const client = new pg.Client({
        host: location.connection.host,
        user: location.connection.user,
        database: location.connection.database,
      });
      await client.connect();
      try {
        let n = 0;
        await client.query(
          sql.replace(/\?/g, () => `$${++n}`),
          params,
        );
      } finally {
        await client.end();
      }
    },
  });

  describe('doctor --registry with a PostgreSQL URL', () => {
    it('reports the connection and the schema version, and fails on a server that does not answer', async () => {
      const url = await server!.createDatabase('doctor_check');
      const doctor = (registry: string): { status: string; detail: string } => {
        const r = spawnSync(
          process.execPath,
          ['--disable-warning=ExperimentalWarning', BIN, 'doctor', '--json', '--registry', registry],
          { encoding: 'utf8' },
        );
        const report = JSON.parse(r.stdout) as { checks: { name: string; status: string; detail: string }[] };
        return report.checks.find((c) => c.name === 'registry')!;
      };
      expect(doctor(url)).toEqual(
        expect.objectContaining({
          status: 'ok',
          detail: expect.stringContaining(
            `schema version 0 (migrated to ${POSTGRES_SCHEMA_VERSION} on first use)`,
          ) as string,
        }),
      );
      const opened = await PostgresCapacityRegistry.open({
        connection: parsePostgresUrl(url).connection,
        display: url,
      });
      await opened.close();
      expect(doctor(url)).toEqual(
        expect.objectContaining({
          status: 'ok',
          detail: `writable: ${url}; schema version ${POSTGRES_SCHEMA_VERSION}`,
        }),
      );
      const nowhere = doctor('postgresql://eval:hunter2@/nowhere?host=/nonexistent-socket-dir');
      expect(nowhere.status).toBe('fail');
      expect(JSON.stringify(nowhere)).not.toContain('hunter2');
    });
  });

  describe('capacity --registry with a PostgreSQL URL', () => {
    it("sets one node's limits and shows every node, never the password", async () => {
      const url = await server!.createDatabase('capacity_cli');
      const withPassword = url.replace('postgres://postgres@', 'postgres://postgres:hunter2@');
      const r = spawnSync(
        process.execPath,
        [
          '--disable-warning=ExperimentalWarning',
          BIN,
          'capacity',
          '--json',
          '--registry',
          withPassword,
          '--node',
          'gpu-2',
          '--max-reservations',
          '3',
          '--gpu-mib',
          '8000',
        ],
        { encoding: 'utf8' },
      );
      expect(r.status, r.stderr).toBe(0);
      expect(r.stdout + r.stderr).not.toContain('hunter2');
      const report = JSON.parse(r.stdout) as {
        registry: string;
        limits: unknown;
        local_node: string;
        nodes: { node: string; limits: unknown; own_limits: boolean; held: number }[];
      };
      expect(report.registry).toBe(url);
      expect(report.limits).toEqual({ maxReservations: 2, gpuMib: null });
      expect(report.nodes).toContainEqual({
        node: 'gpu-2',
        limits: { maxReservations: 3, gpuMib: 8000 },
        own_limits: true,
        held: 0,
        held_gpu_mib: 0,
        held_ports: [],
      });
      expect(report.nodes.map((n) => n.node)).toContain(report.local_node);
    });
  });
}
