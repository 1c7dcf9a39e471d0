/**
 * The PostgreSQL registry's schema and its migrations. Opening is idempotent and safe when several processes
 * open a new database at once: each opener takes a transaction-scoped advisory lock before reading
 * `schema_version`, so migrations run once, in order, each recorded in the same transaction.
 */
import type { PoolClient } from 'pg';
import { refuseNewerSchema } from './schema-version.js';
import { DEFAULT_HOST_LIMITS } from '../../app/ports/capacity-registry.js';

/** Advisory-lock namespace (first key) of this tool; the second key tells the locks apart. */
export const LOCK_CLASS = 0x52474556; // "RGEV"
export const MIGRATION_LOCK = 1;

const MIGRATIONS: readonly string[] = [
  `
  CREATE TABLE host_limits (
    id                INTEGER PRIMARY KEY CHECK (id = 1),
    max_reservations  INTEGER NOT NULL CHECK (max_reservations >= 1),
    gpu_mib           INTEGER CHECK (gpu_mib IS NULL OR gpu_mib >= 0)
  );
  INSERT INTO host_limits (id, max_reservations, gpu_mib) VALUES (1, ${DEFAULT_HOST_LIMITS.maxReservations}, NULL);
  CREATE TABLE node_limits (
    node              TEXT PRIMARY KEY CHECK (node <> ''),
    max_reservations  INTEGER NOT NULL CHECK (max_reservations >= 1),
    gpu_mib           INTEGER CHECK (gpu_mib IS NULL OR gpu_mib >= 0)
  );
  CREATE TABLE reservations (
    seq           BIGSERIAL UNIQUE,
    id            TEXT PRIMARY KEY,
    batch_id      TEXT NOT NULL,
    job_id        TEXT NOT NULL,
    claim_id      TEXT NOT NULL UNIQUE,
    node          TEXT NOT NULL CHECK (node <> ''),
    container_id  TEXT,
    gpu_mib       INTEGER NOT NULL CHECK (gpu_mib >= 0),
    state         TEXT NOT NULL CHECK (state IN ('held', 'released')),
    created_at    TEXT NOT NULL,
    released_at   TEXT,
    proof_sha256  TEXT
  );
  CREATE INDEX reservations_held ON reservations (state, node, batch_id);
  CREATE TABLE reserved_ports (
    reservation_id  TEXT NOT NULL REFERENCES reservations (id),
    node            TEXT NOT NULL,
    port            INTEGER NOT NULL CHECK (port BETWEEN 1 AND 65535),
    PRIMARY KEY (reservation_id, port)
  );
  CREATE INDEX reserved_ports_node ON reserved_ports (node, port);
  CREATE TABLE board (
    seq             BIGSERIAL UNIQUE,
    run_id          TEXT PRIMARY KEY,
    batch_id        TEXT NOT NULL,
    job_id          TEXT NOT NULL,
    state           TEXT NOT NULL CHECK (state IN ('running', 'terminal')),
    classification  TEXT,
    outcome_sha256  TEXT,
    proof_sha256    TEXT,
    updated_at      TEXT NOT NULL,
    score           TEXT,
    notes           TEXT
  );
  CREATE INDEX board_batch ON board (batch_id);
  CREATE TABLE supervisor_leases (
    batch_id     TEXT PRIMARY KEY,
    pid          INTEGER NOT NULL,
    start_ticks  TEXT,
    boot_id      TEXT,
    acquired_at  TEXT NOT NULL
  );
  `,
  // Writable mount sources held with a reservation (docs/spec.md 5.3): no held source may lie inside another's.
  `
  CREATE TABLE reserved_mounts (
    reservation_id  TEXT NOT NULL REFERENCES reservations (id),
    node            TEXT NOT NULL,
    source          TEXT NOT NULL CHECK (left(source, 1) = '/'),
    PRIMARY KEY (reservation_id, source)
  );
  CREATE INDEX reserved_mounts_node ON reserved_mounts (node);
  `,
];

export const POSTGRES_SCHEMA_VERSION = MIGRATIONS.length;

/** The version recorded in the database; 0 when it has no schema_version table yet. */
export async function currentVersion(client: PoolClient): Promise<number> {
  const exists = await client.query<{ t: string | null }>(`SELECT to_regclass('schema_version')::text AS t`);
  if (exists.rows[0]?.t === null || exists.rows[0] === undefined) return 0;
  const row = await client.query<{ v: number | null }>('SELECT MAX(version)::int AS v FROM schema_version');
  return row.rows[0]?.v ?? 0;
}

/** Brings the database to POSTGRES_SCHEMA_VERSION; refuses a database written by a newer schema. */
export async function migratePostgres(client: PoolClient): Promise<void> {
  await client.query('BEGIN');
  try {
    await client.query('SELECT pg_advisory_xact_lock($1, $2)', [LOCK_CLASS, MIGRATION_LOCK]);
    await client.query('CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL PRIMARY KEY)');
    const current = await currentVersion(client);
    refuseNewerSchema(current, POSTGRES_SCHEMA_VERSION);
    for (let version = current + 1; version <= POSTGRES_SCHEMA_VERSION; version += 1) {
      await client.query(MIGRATIONS[version - 1] ?? '');
      await client.query('INSERT INTO schema_version (version) VALUES ($1)', [version]);
    }
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  }
}
