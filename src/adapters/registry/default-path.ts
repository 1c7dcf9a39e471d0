/**
 * Where the host-wide registry lives when `--registry` is not given:
 * `$XDG_STATE_HOME/roboguide-eval/registry.db`, else `~/.local/state/roboguide-eval/registry.db`.
 * A relative or empty XDG_STATE_HOME is ignored, as the XDG base-directory spec requires.
 */
import { createRequire } from 'node:module';
import { homedir } from 'node:os';
import { isAbsolute, join, resolve } from 'node:path';
import type { parse as parseFn } from 'pg-connection-string';
import { InvalidInputError } from '../../core/errors.js';

export const REGISTRY_DIR_NAME = 'roboguide-eval';
export const REGISTRY_FILE_NAME = 'registry.db';

export function defaultRegistryPath(
  env: Readonly<Record<string, string | undefined>> = process.env,
  homeDir: string = homedir(),
): string {
  const xdgStateHome = env.XDG_STATE_HOME;
  const stateHome =
    xdgStateHome !== undefined && isAbsolute(xdgStateHome) ? xdgStateHome : join(homeDir, '.local', 'state');
  return join(stateHome, REGISTRY_DIR_NAME, REGISTRY_FILE_NAME);
}

/** The `--registry` flag wins (resolved against the working directory); otherwise the default. */
export function resolveRegistryPath(
  flag: string | undefined,
  env: Readonly<Record<string, string | undefined>> = process.env,
  homeDir: string = homedir(),
): string {
  return flag !== undefined && flag.length > 0 ? resolve(flag) : defaultRegistryPath(env, homeDir);
}

/** A SQLite registry file, and whether the user named it (`--registry`) or it is the default location. */
export interface SqliteRegistryLocation {
  readonly path: string;
  readonly explicit: boolean;
}

/** How to reach a PostgreSQL registry. `password` lives in memory only: never written, never logged. */
export interface PostgresConnection {
  readonly host: string | undefined;
  readonly port: number | undefined;
  readonly user: string | undefined;
  readonly password: string | undefined;
  readonly database: string;
  /** Other libpq-style query parameters (sslmode, application_name…), passed through. */
  readonly options: Readonly<Record<string, string>>;
}

/** A PostgreSQL registry. `path` is the URL without its password: what batch.json records and messages show. */
export interface PostgresRegistryLocation {
  readonly kind: 'postgres';
  readonly path: string;
  readonly explicit: true;
  readonly connection: PostgresConnection;
}

export type RegistryLocation = SqliteRegistryLocation | PostgresRegistryLocation;

export function isPostgresLocation(location: RegistryLocation): location is PostgresRegistryLocation {
  return 'kind' in location && location.kind === 'postgres';
}

/** The registry's file when it is a SQLite one (what no pair may mount); none for PostgreSQL. */
export function registryFilePath(location: RegistryLocation): string | undefined {
  return isPostgresLocation(location) ? undefined : location.path;
}

const POSTGRES_URL = /^postgres(ql)?:\/\//i;
/** `scheme://…` (x://) or `postgres:`/`postgresql:` without `//`: a URL, never a file name. */
const URL_LIKE = /^([A-Za-z][A-Za-z0-9+.-]*:\/\/|postgres(ql)?:)/i;

function refuseRegistry(rule: string): InvalidInputError {
  return new InvalidInputError('E_USAGE', 'invalid --registry', [{ path: '--registry', rule }]);
}

const CONNECTION_KEYS = new Set(['host', 'port', 'user', 'password', 'database']);

/**
 * pg-connection-string's parser, required on the first PostgreSQL URL: every command resolves its `--registry`, and
 * most never name a PostgreSQL one (importing it was about 3 ms of each command's start; issue 39).
 */
function connectionStringParser(): typeof parseFn {
  return (parser ??= (createRequire(import.meta.url)('pg-connection-string') as { parse: typeof parseFn })
    .parse);
}
let parser: typeof parseFn | undefined;

/**
 * A libpq-style PostgreSQL URL (`postgres://user@/db?host=/socket/dir`, `postgresql://user:pw@host:5432/db`).
 * A malformed one is refused (exit 2) naming the rule, never repeating the value (it may hold a password).
 */
export function parsePostgresUrl(value: string): PostgresRegistryLocation {
  const parse = connectionStringParser(); // a broken install fails here as itself, not as the user's URL
  let parsed: Record<string, unknown>;
  try {
    parsed = parse(value);
  } catch {
    throw refuseRegistry(
      'is a PostgreSQL URL that cannot be parsed (postgres://user@host:port/db or postgres://user@/db?host=/socket/dir)',
    );
  }
  const str = (key: string): string | undefined => {
    const v = parsed[key];
    return typeof v === 'string' && v.length > 0 ? v : undefined;
  };
  const database = str('database');
  if (database === undefined)
    throw refuseRegistry('is a PostgreSQL URL without a database name (postgres://user@host/DB)');
  const portText = str('port');
  const port = portText === undefined ? undefined : Number(portText);
  if (port !== undefined && !(Number.isSafeInteger(port) && port >= 1 && port <= 65_535)) {
    throw refuseRegistry('is a PostgreSQL URL whose port is not an integer 1..65535');
  }
  const host = str('host');
  const user = str('user');
  const options: Record<string, string> = {};
  const query = value.includes('?')
    ? new URLSearchParams(value.slice(value.indexOf('?') + 1))
    : new URLSearchParams();
  for (const [key, v] of query) if (!CONNECTION_KEYS.has(key)) options[key] = v;
  const connection: PostgresConnection = { host, port, user, password: str('password'), database, options };
  return { kind: 'postgres', path: displayPostgresUrl(connection), explicit: true, connection };
}

/** The URL without its password: safe to record and to show. */
export function displayPostgresUrl(c: PostgresConnection): string {
  const user = c.user !== undefined ? `${encodeURIComponent(c.user)}@` : '';
  const socket = c.host !== undefined && c.host.startsWith('/');
  const hostPart =
    c.host === undefined || socket ? '' : `${c.host}${c.port !== undefined ? `:${c.port}` : ''}`;
  const query = new URLSearchParams();
  if (socket && c.host !== undefined) query.set('host', c.host);
  if (socket && c.port !== undefined) query.set('port', String(c.port));
  for (const [key, v] of Object.entries(c.options)) query.set(key, v);
  const q = query.toString();
  return `postgres://${user}${hostPart}/${encodeURIComponent(c.database)}${q.length > 0 ? `?${q.replaceAll('%2F', '/')}` : ''}`;
}

/**
 * The `--registry` flag as a location: a PostgreSQL URL, or a SQLite file path (the default when absent). Any
 * other URL-like value is refused (exit 2) and never taken for a relative file path; the message does not
 * repeat it (a URL may carry a password). Writes nothing.
 */
export function registryLocation(
  flag: string | undefined,
  env: Readonly<Record<string, string | undefined>> = process.env,
  homeDir: string = homedir(),
): RegistryLocation {
  if (flag !== undefined && POSTGRES_URL.test(flag)) return parsePostgresUrl(flag);
  if (flag !== undefined && URL_LIKE.test(flag)) {
    throw refuseRegistry(
      'looks like a URL but is not a PostgreSQL one: give a SQLite database file path, or postgres://user@host:port/db (or postgresql://…)',
    );
  }
  return { path: resolveRegistryPath(flag, env, homeDir), explicit: flag !== undefined && flag.length > 0 };
}
