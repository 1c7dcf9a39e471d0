/**
 * Registry schema and its migrations. Opening is idempotent: each migration runs once, in
 * order, inside a `BEGIN IMMEDIATE` transaction, and `schema_version` records how far it got.
 */
import type { DatabaseSync } from 'node:sqlite';
import { refuseNewerSchema } from './schema-version.js';
import { DEFAULT_HOST_LIMITS } from '../../app/ports/capacity-registry.js';
import { inImmediateTransaction } from './transaction.js';
import { integer } from './rows.js';

/** A migration: SQL, or SQL made for the local node (the name rows written before nodes existed get). */
type Migration = string | ((localNode: string) => string);

function quote(text: string): string {
  return `'${text.replaceAll("'", "''")}'`;
}

const MIGRATIONS: readonly Migration[] = [
  `
  CREATE TABLE reservations (
    id            TEXT PRIMARY KEY,
    batch_id      TEXT NOT NULL,
    job_id        TEXT NOT NULL,
    claim_id      TEXT NOT NULL UNIQUE,
    container_id  TEXT,
    gpu_mib       INTEGER NOT NULL CHECK (gpu_mib >= 0),
    state         TEXT NOT NULL CHECK (state IN ('held', 'released')),
    created_at    TEXT NOT NULL,
    released_at   TEXT,
    proof_sha256  TEXT
  ) STRICT;
  CREATE INDEX reservations_held ON reservations (state, batch_id);
  CREATE TABLE board (
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
  ) STRICT;
  CREATE INDEX board_batch ON board (batch_id);
  CREATE TABLE host_limits (
    id                INTEGER PRIMARY KEY CHECK (id = 1),
    max_reservations  INTEGER NOT NULL CHECK (max_reservations >= 1),
    gpu_mib           INTEGER CHECK (gpu_mib IS NULL OR gpu_mib >= 0)
  ) STRICT;
  INSERT INTO host_limits (id, max_reservations, gpu_mib)
    VALUES (1, ${DEFAULT_HOST_LIMITS.maxReservations}, NULL);
  `,
  `
  CREATE TABLE supervisor_leases (
    batch_id     TEXT PRIMARY KEY,
    pid          INTEGER NOT NULL,
    start_ticks  TEXT,
    boot_id      TEXT,
    acquired_at  TEXT NOT NULL
  ) STRICT;
  `,
  // Nodes: reservations belong to a node (rows from before belong to this host), limits per node (a node without
  // its own uses host_limits, the default), and published host ports held with a reservation.
  (localNode) => `
  ALTER TABLE reservations ADD COLUMN node TEXT NOT NULL DEFAULT ${quote(localNode)};
  CREATE INDEX reservations_node ON reservations (state, node);
  CREATE TABLE node_limits (
    node              TEXT PRIMARY KEY CHECK (node <> ''),
    max_reservations  INTEGER NOT NULL CHECK (max_reservations >= 1),
    gpu_mib           INTEGER CHECK (gpu_mib IS NULL OR gpu_mib >= 0)
  ) STRICT;
  CREATE TABLE reserved_ports (
    reservation_id  TEXT NOT NULL REFERENCES reservations (id),
    node            TEXT NOT NULL,
    port            INTEGER NOT NULL CHECK (port BETWEEN 1 AND 65535),
    PRIMARY KEY (reservation_id, port)
  ) STRICT;
  CREATE INDEX reserved_ports_node ON reserved_ports (node, port);
  `,
  // Writable mount sources held with a reservation (docs/spec.md 5.3): no held source may lie inside another's.
  `
  CREATE TABLE reserved_mounts (
    reservation_id  TEXT NOT NULL REFERENCES reservations (id),
    node            TEXT NOT NULL,
    source          TEXT NOT NULL CHECK (substr(source, 1, 1) = '/'),
    PRIMARY KEY (reservation_id, source)
  ) STRICT;
  CREATE INDEX reserved_mounts_node ON reserved_mounts (node);
  `,
];

export const SCHEMA_VERSION = MIGRATIONS.length;

/** Brings the database to SCHEMA_VERSION; refuses a database written by a newer schema. */
export function migrate(db: DatabaseSync, localNode: string): void {
  inImmediateTransaction(
    db,
    () => {
      db.exec('CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL) STRICT');
      const row = db.prepare('SELECT MAX(version) AS version FROM schema_version').get();
      const current = row?.version === null || row === undefined ? 0 : integer(row, 'version');
      refuseNewerSchema(current, SCHEMA_VERSION);
      for (let version = current + 1; version <= SCHEMA_VERSION; version += 1) {
        const migration = MIGRATIONS[version - 1] ?? '';
        db.exec(typeof migration === 'string' ? migration : migration(localNode));
        db.prepare('INSERT INTO schema_version (version) VALUES (?)').run(version);
      }
    },
    'migrate',
  );
}

/** The version the database records (0 before the first migration). */
export function recordedVersion(db: DatabaseSync): number {
  const table = db
    .prepare(`SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'`)
    .get();
  if (table === undefined) return 0;
  const row = db.prepare('SELECT MAX(version) AS version FROM schema_version').get();
  return row?.version === null || row === undefined ? 0 : integer(row, 'version');
}
