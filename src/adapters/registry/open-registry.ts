/**
 * Opening the registry a command was pointed at. The default location is created on first use; a location the
 * user named (`--registry`) must be an existing registry, or a new file in an existing folder — a typo must
 * not split the host's capacity ledger in two. Checked before anything is written; a refusal is exit 2.
 */
import { statSync } from 'node:fs';
import { dirname } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { InvalidInputError } from '../../core/errors.js';
import type { CapacityRegistry } from '../../app/ports/capacity-registry.js';
import { isPostgresLocation, parsePostgresUrl, type RegistryLocation } from './default-path.js';
import { PostgresCapacityRegistry } from './postgres-capacity-registry.js';
import { DEFAULT_BUSY_TIMEOUT_MS, SqliteCapacityRegistry } from './sqlite-capacity-registry.js';
import { registryDeadlineMs } from './deadline.js';

const REGISTRY_TABLES = ['schema_version', 'reservations', 'board', 'host_limits'];

function refuse(rule: string): InvalidInputError {
  return new InvalidInputError('E_USAGE', 'invalid --registry', [{ path: '--registry', rule }]);
}

/**
 * True when the file is a SQLite database holding our tables, or one holding no table at all: what a first
 * migration killed inside its transaction leaves (or an empty file); opening it migrates it. Opened read-only:
 * nothing is changed here.
 */
function isRegistryDatabase(path: string): boolean {
  try {
    // A busy timeout: other processes writing the registry (WAL) must make this wait, not fail.
    const db = new DatabaseSync(path, { readOnly: true, timeout: DEFAULT_BUSY_TIMEOUT_MS });
    try {
      const tables = db
        .prepare(`SELECT name FROM sqlite_master WHERE type = 'table'`)
        .all()
        .map((row) => String(row['name']));
      if (tables.length === 0) return true;
      return REGISTRY_TABLES.every((name) => tables.includes(name));
    } finally {
      db.close();
    }
  } catch {
    return false;
  }
}

function isFolder(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}

/** Throws (exit 2) when a named location is neither an existing registry nor a new file in an existing folder. */
export function checkRegistryLocation(location: RegistryLocation): void {
  if (!location.explicit || isPostgresLocation(location)) return;
  const { path } = location;
  let isFile: boolean;
  try {
    isFile = statSync(path).isFile();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT')
      throw refuse(`${path} cannot be inspected (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
    const folder = dirname(path);
    if (!isFolder(folder))
      throw refuse(
        `the folder ${folder} does not exist: only the default registry location is created on first use`,
      );
    return;
  }
  if (!isFile) throw refuse(`${path} is not a file`);
  if (!isRegistryDatabase(path)) throw refuse(`${path} exists but is not a roboguide-eval registry database`);
}

/**
 * Check the location, then open (creating a new file 0600 where allowed, or connecting to PostgreSQL) and
 * migrate.
 */
export async function openRegistryAt(
  location: RegistryLocation,
  env: Readonly<Record<string, string | undefined>> = process.env,
): Promise<CapacityRegistry> {
  // The deadline of every registry call (ROBOGUIDE_REGISTRY_DEADLINE_MS): checked first, a bad value is exit 2.
  const deadlineMs = registryDeadlineMs(env);
  if (isPostgresLocation(location)) {
    return PostgresCapacityRegistry.open({
      connection: location.connection,
      display: location.path,
      deadlineMs,
    });
  }
  checkRegistryLocation(location);
  return SqliteCapacityRegistry.open({ path: location.path, busyTimeoutMs: deadlineMs });
}

/** A registry as batch.json records it (`registry_path`): a SQLite file, or a PostgreSQL URL without its password. */
export function recordedRegistryLocation(recorded: string): RegistryLocation {
  return /^postgres(ql)?:\/\//i.test(recorded)
    ? parsePostgresUrl(recorded)
    : { path: recorded, explicit: false };
}

/**
 * Opens the registry a batch recorded. The password of a PostgreSQL one was never recorded: it comes from
 * PGPASSWORD (or ~/.pgpass), as for libpq; `e1-batch start` hands the URL's password to its supervisor that way
 * (a detached one through its environment, one in the same process as `password`).
 */
export async function openRecordedRegistry(
  recorded: string,
  password?: string,
  env: Readonly<Record<string, string | undefined>> = process.env,
): Promise<CapacityRegistry> {
  const deadlineMs = registryDeadlineMs(env);
  const location = recordedRegistryLocation(recorded);
  if (isPostgresLocation(location)) {
    // `password`: the one `e1-batch start` was given in its --registry URL, for a supervisor in the same process.
    const connection =
      password !== undefined && location.connection.password === undefined
        ? { ...location.connection, password }
        : location.connection;
    return PostgresCapacityRegistry.open({ connection, display: location.path, deadlineMs });
  }
  return SqliteCapacityRegistry.open({ path: location.path, busyTimeoutMs: deadlineMs });
}
