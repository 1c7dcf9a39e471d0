/**
 * The registry contract (test/support/registry-contract.ts) against PostgreSQL: one throwaway server for the
 * file (test/support/postgres.ts), a new database per test. Skipped where PostgreSQL cannot run, unless
 * REQUIRE_POSTGRES=1.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { parsePostgresUrl } from '../../src/adapters/registry/default-path.js';
import { PostgresCapacityRegistry } from '../../src/adapters/registry/postgres-capacity-registry.js';
import { POSTGRES_SCHEMA_VERSION } from '../../src/adapters/registry/postgres-schema.js';
import { postgresSkipReason, startPostgres, type TestPostgres } from '../support/postgres.js';
import { registryContract } from '../support/registry-contract.js';

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
      return PostgresCapacityRegistry.open({ connection: location.connection, display: location.path, ...options, maxConnections: 2 });
    },
    rawSql: async (sql, ...params) => {
      const location = parsePostgresUrl(url);
      const client = new pg.Client({ host: location.connection.host, user: location.connection.user, database: location.connection.database });
      await client.connect();
      try {
        let n = 0;
        await client.query(sql.replace(/\?/g, () => `$${++n}`), params);
      } finally {
        await client.end();
      }
    },
  });
}
