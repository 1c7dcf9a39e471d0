/**
 * The real probes behind `doctor` (node:sqlite, statfs, /proc, nvidia-smi); the checks and verdicts are in
 * src/app/doctor/run-doctor.ts and take these through DoctorDeps (src/app/ports/doctor-probes.ts).
 */
import { mountOptionsOf } from './fs/proc-mounts.js';
import { randomUUID } from 'node:crypto';
import { access, mkdtemp, readdir, readFile, rm, statfs } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import {
  CDI_SPEC_DIRS,
  type DoctorDeps,
  type RegistryProbe,
  type RegistryTarget,
} from '../app/ports/doctor-probes.js';
import { engineMountStager } from './mount/engine-stager.js';
import type { PostgresConnection } from './registry/default-path.js';
import { POSTGRES_SCHEMA_VERSION } from './registry/postgres-schema.js';
import { SCHEMA_VERSION, recordedVersion } from './registry/schema.js';
import { readBootId } from './host-identity.js';
import { observeGpus } from './nvidia-smi.js';
import { systemClock } from './system-clock.js';
import { InternalError } from '../core/errors.js';
import { makeDirsSync } from './fs/make-dirs.js';

const SCRATCH_TABLE = 'roboguide_doctor_scratch';

/** Opens (creating when missing) the database and proves a write + read inside a transaction that is rolled back. */
export function probeSqliteWritable(path: string): void {
  makeDirsSync(dirname(path), 0o700);
  const db = new DatabaseSync(path, { timeout: 2_000 });
  try {
    db.exec('BEGIN IMMEDIATE');
    try {
      db.exec(`CREATE TABLE ${SCRATCH_TABLE} (id INTEGER PRIMARY KEY, token TEXT NOT NULL)`);
      const token = randomUUID();
      db.prepare(`INSERT INTO ${SCRATCH_TABLE} (token) VALUES (?)`).run(token);
      const row = db.prepare(`SELECT token FROM ${SCRATCH_TABLE}`).get() as { token?: unknown } | undefined;
      if (row?.token !== token) throw new InternalError('the row read back differs from the row written');
    } finally {
      if (db.isTransaction) db.exec('ROLLBACK');
    }
  } finally {
    db.close();
  }
}

/** The schema version a SQLite registry file records (0 for a new file; null when none can be read). */
function sqliteSchema(path: string): RegistryProbe['schema'] {
  try {
    const db = new DatabaseSync(path, { readOnly: true });
    try {
      return { current: recordedVersion(db), supported: SCHEMA_VERSION };
    } finally {
      db.close();
    }
  } catch {
    return null;
  }
}

/** Connects, reads the schema version and proves a write in a transaction that is rolled back (nothing changes). */
async function probePostgres(connection: PostgresConnection): Promise<RegistryProbe> {
  const { default: postgres } = await import('pg'); // only when a PostgreSQL registry is probed
  const client = new postgres.Client({
    ...(connection.host !== undefined ? { host: connection.host } : {}),
    ...(connection.port !== undefined ? { port: connection.port } : {}),
    ...(connection.user !== undefined ? { user: connection.user } : {}),
    ...(connection.password !== undefined ? { password: connection.password } : {}),
    database: connection.database,
    connectionTimeoutMillis: 5_000,
  });
  await client.connect();
  try {
    await client.query('BEGIN');
    try {
      const exists = await client.query<{ t: string | null }>(
        `SELECT to_regclass('schema_version')::text AS t`,
      );
      const current =
        exists.rows[0]?.t == null
          ? 0
          : ((await client.query<{ v: number | null }>('SELECT MAX(version)::int AS v FROM schema_version'))
              .rows[0]?.v ?? 0);
      await client.query(
        `CREATE TEMPORARY TABLE ${SCRATCH_TABLE} (id SERIAL PRIMARY KEY, token TEXT NOT NULL) ON COMMIT DROP`,
      );
      const token = randomUUID();
      await client.query(`INSERT INTO ${SCRATCH_TABLE} (token) VALUES ($1)`, [token]);
      const row = await client.query<{ token: string }>(`SELECT token FROM ${SCRATCH_TABLE}`);
      if (row.rows[0]?.token !== token)
        throw new InternalError('the row read back differs from the row written');
      return { schema: { current, supported: POSTGRES_SCHEMA_VERSION } };
    } finally {
      await client.query('ROLLBACK');
    }
  } finally {
    await client.end();
  }
}

async function probeRegistry(target: RegistryTarget): Promise<RegistryProbe> {
  if (target.kind === 'postgres') return probePostgres(target.connection as PostgresConnection);
  if (target.kind === 'file') {
    probeSqliteWritable(target.path);
    return { schema: sqliteSchema(target.path) };
  }
  const dir = await mkdtemp(join(tmpdir(), 'roboguide-doctor-'));
  try {
    probeSqliteWritable(join(dir, 'registry.db'));
    return { schema: null };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Free bytes for an unprivileged user on the file system of `path` (or its nearest existing ancestor). */
export async function freeDiskBytes(path: string): Promise<{ path: string; freeBytes: number }> {
  let current = resolve(path);
  for (;;) {
    try {
      const fs = await statfs(current);
      return { path: current, freeBytes: fs.bavail * fs.bsize };
    } catch (err) {
      const parent = dirname(current);
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || parent === current) throw err;
      current = parent;
    }
  }
}

/** `hostFacts`: the bounded gathering the composition root wires (`gatherBatchHostFacts`), as for `e1-batch start`. */
export function createDoctorDeps(
  runtime: DoctorDeps['runtime'],
  hostFacts: DoctorDeps['hostFacts'],
  options: { nvidiaSmiBinary?: string } = {},
): DoctorDeps {
  return {
    runtime,
    observeGpus: () =>
      observeGpus(options.nvidiaSmiBinary !== undefined ? { binary: options.nvidiaSmiBinary } : {}),
    fileExists: (path) =>
      access(path).then(
        () => true,
        () => false,
      ),
    probeRegistry,
    freeDiskBytes,
    readBootId,
    mountOptionsOf: (path) => mountOptionsOf(path),
    hostFacts,
    clock: systemClock,
    newId: () => randomUUID().slice(0, 8),
    podmanHost: { initPath: podmanInitPath, cdiSpecs },
    mountMode: () => engineMountStager().mode(),
  };
}

/** containers.conf files in Podman's order of precedence for root (the first `init_path` wins). */
const CONTAINERS_CONF = ['/etc/containers/containers.conf', '/usr/share/containers/containers.conf'];

/** `init_path = "…"` of the first containers.conf that sets it (CONTAINERS_CONF in the environment first), or null. */
async function podmanInitPath(): Promise<string | null> {
  const files = [process.env['CONTAINERS_CONF'], ...CONTAINERS_CONF].filter(
    (f): f is string => f !== undefined && f !== '',
  );
  for (const file of files) {
    const text = await readFile(file, 'utf8').catch(() => '');
    const match = /^\s*init_path\s*=\s*"([^"]+)"/m.exec(text);
    if (match?.[1] !== undefined) return match[1];
  }
  return null;
}

/** CDI spec files (.json, .yaml, .yml) in the folders Podman reads. */
async function cdiSpecs(): Promise<string[]> {
  const found: string[] = [];
  for (const dir of CDI_SPEC_DIRS) {
    const names = await readdir(dir).catch(() => [] as string[]);
    for (const name of names) if (/\.(json|ya?ml)$/.test(name)) found.push(join(dir, name));
  }
  return found;
}
