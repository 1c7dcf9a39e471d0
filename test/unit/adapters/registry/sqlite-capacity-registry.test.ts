/**
 * What is SQLite's own: files, permissions, WAL, schema rows, the migration to nodes. Everything the port
 * promises is the contract suite's (test/support/registry-contract.ts, run by registry-contract.sqlite.test.ts).
 */
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { AdmitRequest } from '../../../../src/app/ports/capacity-registry.js';
import { defaultRegistryPath, resolveRegistryPath } from '../../../../src/adapters/registry/default-path.js';
import { SqliteCapacityRegistry } from '../../../../src/adapters/registry/sqlite-capacity-registry.js';

let dir: string;
let dbPath: string;
let opened: SqliteCapacityRegistry[];
let tick: number;
let nextId: number;

const clock = { now: () => new Date(Date.UTC(2025, 0, 1, 0, 0, tick++)) };
const newId = () => `res-${nextId++}`;

function openRegistry(path = dbPath): SqliteCapacityRegistry {
  const registry = SqliteCapacityRegistry.open({ path, clock, newId });
  opened.push(registry);
  return registry;
}

function request(claimId: string, overrides: Partial<AdmitRequest> = {}): AdmitRequest {
  return { batchId: 'batch-a', jobId: `job-${claimId}`, claimId, gpuMib: 0, ...overrides };
}

async function admitted(
  registry: SqliteCapacityRegistry,
  claimId: string,
  overrides: Partial<AdmitRequest> = {},
): Promise<string> {
  const result = await registry.admit(request(claimId, overrides));
  if (result.kind !== 'admitted') throw new Error(`expected admission, got ${JSON.stringify(result)}`);
  return result.reservationId;
}

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'registry-'));
  dbPath = join(dir, 'state', 'roboguide-eval', 'registry.db');
  opened = [];
  tick = 0;
  nextId = 1;
});

afterEach(() => {
  for (const registry of opened) registry.closeSync();
  rmSync(dir, { recursive: true, force: true });
});

describe('opening', () => {
  it('creates private parent directories, WAL mode and the schema; reopening keeps the data', async () => {
    const registry = openRegistry();
    await registry.setLimits({ maxReservations: 3, gpuMib: 8_000 });
    const reservationId = await admitted(registry, 'c1', { gpuMib: 1_000 });
    await registry.close();

    expect(statSync(join(dir, 'state', 'roboguide-eval')).mode & 0o777).toBe(0o700);
    const raw = new DatabaseSync(dbPath);
    expect(raw.prepare('PRAGMA journal_mode').get()).toEqual({ journal_mode: 'wal' });
    expect(raw.prepare('SELECT version FROM schema_version').all()).toEqual([
      { version: 1 },
      { version: 2 },
      { version: 3 },
      { version: 4 },
    ]);
    raw.close();

    const reopened = openRegistry();
    expect(await reopened.limits()).toEqual({ maxReservations: 3, gpuMib: 8_000 });
    expect(await reopened.reservationForClaim('c1')).toMatchObject({
      id: reservationId,
      state: 'held',
      gpuMib: 1_000,
    });
    expect(await reopened.board()).toHaveLength(1);
  });

  it('migrates a version-2 registry: its held reservations belong to this host, their count still applies', async () => {
    const raw = new DatabaseSync(join(dir, 'v2.db'));
    // What version 2 wrote: the two first migrations only.
    raw.exec(`CREATE TABLE schema_version (version INTEGER NOT NULL) STRICT;
      CREATE TABLE reservations (id TEXT PRIMARY KEY, batch_id TEXT NOT NULL, job_id TEXT NOT NULL, claim_id TEXT NOT NULL UNIQUE,
        container_id TEXT, gpu_mib INTEGER NOT NULL CHECK (gpu_mib >= 0), state TEXT NOT NULL CHECK (state IN ('held', 'released')),
        created_at TEXT NOT NULL, released_at TEXT, proof_sha256 TEXT) STRICT;
      CREATE INDEX reservations_held ON reservations (state, batch_id);
      CREATE TABLE board (run_id TEXT PRIMARY KEY, batch_id TEXT NOT NULL, job_id TEXT NOT NULL, state TEXT NOT NULL,
        classification TEXT, outcome_sha256 TEXT, proof_sha256 TEXT, updated_at TEXT NOT NULL, score TEXT, notes TEXT) STRICT;
      CREATE TABLE host_limits (id INTEGER PRIMARY KEY CHECK (id = 1), max_reservations INTEGER NOT NULL, gpu_mib INTEGER) STRICT;
      INSERT INTO host_limits VALUES (1, 1, NULL);
      CREATE TABLE supervisor_leases (batch_id TEXT PRIMARY KEY, pid INTEGER NOT NULL, start_ticks TEXT, boot_id TEXT, acquired_at TEXT NOT NULL) STRICT;
      INSERT INTO schema_version VALUES (1), (2);
      INSERT INTO reservations VALUES ('r-old', 'batch-old', 'job-old', 'c-old', NULL, 0, 'held', '2025-01-01T00:00:00.000Z', NULL, NULL);`);
    raw.close();
    const registry = SqliteCapacityRegistry.open({
      path: join(dir, 'v2.db'),
      clock,
      newId,
      localNode: 'this-host',
    });
    opened.push(registry);
    expect(await registry.reservation('r-old')).toMatchObject({
      node: 'this-host',
      ports: [],
      state: 'held',
    });
    expect(await registry.admit(request('c1'))).toMatchObject({
      kind: 'refused',
      reason: 'host_full',
      held: 1,
      limit: 1,
      node: 'this-host',
    });
    expect(await registry.schemaVersion()).toEqual({ current: 4, supported: 4 });
  });
});

describe('registry path', () => {
  it('uses an absolute XDG_STATE_HOME, else ~/.local/state; --registry wins', () => {
    expect(defaultRegistryPath({ XDG_STATE_HOME: '/xdg' }, '/home/u')).toBe(
      '/xdg/roboguide-eval/registry.db',
    );
    expect(defaultRegistryPath({ XDG_STATE_HOME: 'rel' }, '/home/u')).toBe(
      '/home/u/.local/state/roboguide-eval/registry.db',
    );
    expect(defaultRegistryPath({}, '/home/u')).toBe('/home/u/.local/state/roboguide-eval/registry.db');
    expect(resolveRegistryPath('/tmp/r.db', { XDG_STATE_HOME: '/xdg' }, '/home/u')).toBe('/tmp/r.db');
    expect(resolveRegistryPath(undefined, { XDG_STATE_HOME: '/xdg' }, '/home/u')).toBe(
      '/xdg/roboguide-eval/registry.db',
    );
  });
});
