/** The registry contract (test/support/registry-contract.ts) against SQLite: a new file per test. */
/* eslint-disable @typescript-eslint/require-await -- node:sqlite is synchronous; the backend interface is asynchronous */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { afterAll } from 'vitest';
import { SqliteCapacityRegistry } from '../../src/adapters/registry/sqlite-capacity-registry.js';
import { SCHEMA_VERSION } from '../../src/adapters/registry/schema.js';
import { registryContract } from '../support/registry-contract.js';

const root = mkdtempSync(join(tmpdir(), 'rg-contract-sqlite-'));
let counter = 0;
let dbPath = '';

afterAll(() => rmSync(root, { recursive: true, force: true }));

registryContract({
  name: 'SQLite',
  schemaVersion: SCHEMA_VERSION,
  concurrentAdmitters: 20,
  fresh: async () => {
    dbPath = join(root, `registry-${counter++}.db`);
  },
  open: async (options) => SqliteCapacityRegistry.open({ path: dbPath, ...options }),
  rawSql: async (sql, ...params) => {
    const db = new DatabaseSync(dbPath, { timeout: 1_000 });
    try {
      db.prepare(sql).run(...params);
    } finally {
      db.close();
    }
  },
});
