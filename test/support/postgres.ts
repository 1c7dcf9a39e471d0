/**
 * A throwaway PostgreSQL server for tests: Debian's postgresql 15 binaries, `initdb` and `pg_ctl` run as the
 * `postgres` user (the server refuses root) in a temporary directory that user owns, trust authentication, a Unix
 * socket only (no TCP). Started by a suite's set-up, stopped (pg_ctl stop, then by pid) at its teardown.
 * Missing binaries skip the suite, unless REQUIRE_POSTGRES=1 (CI), where they fail it.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';

const PG_BIN = process.env['ROBOGUIDE_PG_BIN'] ?? '/usr/lib/postgresql/15/bin';
const PG_USER = 'postgres';

export interface TestPostgres {
  /** The folder holding the server's socket. */
  readonly socketDir: string;
  /** `postgres://postgres@/DB?host=SOCKET` for a database (created by `createDatabase`). */
  url(database: string): string;
  createDatabase(name: string): Promise<string>;
  stop(): void;
}

function ids(user: string): { uid: number; gid: number } | null {
  const uid = spawnSync('id', ['-u', user], { encoding: 'utf8' });
  const gid = spawnSync('id', ['-g', user], { encoding: 'utf8' });
  if (uid.status !== 0 || gid.status !== 0) return null;
  return { uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) };
}

/** Why PostgreSQL cannot run here, or null when it can. */
export function postgresUnavailable(): string | null {
  if (!existsSync(join(PG_BIN, 'initdb')) || !existsSync(join(PG_BIN, 'pg_ctl'))) return `no PostgreSQL binaries in ${PG_BIN}`;
  if (process.getuid?.() !== 0) return 'the test set-up runs the server as the postgres user and needs root for runuser';
  if (ids(PG_USER) === null) return `no ${PG_USER} user`;
  return null;
}

/** Skip (or, with REQUIRE_POSTGRES=1, fail) when PostgreSQL cannot run. */
export function postgresSkipReason(): string | null {
  const reason = postgresUnavailable();
  if (reason !== null && process.env['REQUIRE_POSTGRES'] === '1') {
    throw new Error(`REQUIRE_POSTGRES=1 but PostgreSQL cannot run: ${reason}`);
  }
  return reason;
}

function asPostgres(command: string, args: readonly string[]): string {
  return execFileSync('runuser', ['-u', PG_USER, '--', join(PG_BIN, command), ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

export function startPostgres(): TestPostgres {
  const owner = ids(PG_USER);
  if (owner === null) throw new Error(`no ${PG_USER} user`);
  const root = mkdtempSync(join(tmpdir(), 'rg-pg-'));
  chmodSync(root, 0o700);
  chownSync(root, owner.uid, owner.gid);
  const dataDir = join(root, 'data');
  const socketDir = root;
  asPostgres('initdb', ['-D', dataDir, '-A', 'trust', '-U', PG_USER, '--no-sync', '-E', 'UTF8']);
  // Reachable by root (the test process) through the socket folder: 0711 lets it traverse, not list.
  chmodSync(root, 0o711);
  asPostgres('pg_ctl', [
    '-D',
    dataDir,
    '-l',
    join(root, 'server.log'),
    '-o',
    `-k ${socketDir} -c listen_addresses='' -c fsync=off -c max_connections=100`,
    '-w',
    '-t',
    '60',
    'start',
  ]);
  const pidText = readFileSync(join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0] ?? '';
  const pid = Number(pidText);
  let stopped = false;
  const url = (database: string): string => `postgres://${PG_USER}@/${database}?host=${socketDir}`;
  return {
    socketDir,
    url,
    async createDatabase(name: string): Promise<string> {
      const client = new pg.Client({ host: socketDir, user: PG_USER, database: 'postgres' });
      await client.connect();
      try {
        await client.query(`CREATE DATABASE "${name.replaceAll('"', '')}"`);
      } finally {
        await client.end();
      }
      return url(name);
    },
    stop(): void {
      if (stopped) return;
      stopped = true;
      try {
        asPostgres('pg_ctl', ['-D', dataDir, '-m', 'immediate', '-w', '-t', '30', 'stop']);
      } catch {
        // pg_ctl failed: end the server we started, by its pid
        if (Number.isSafeInteger(pid) && pid > 0) {
          try {
            process.kill(pid, 'SIGQUIT');
          } catch {
            // already gone
          }
        }
      }
      rmSync(root, { recursive: true, force: true });
    },
  };
}
