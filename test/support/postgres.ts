/**
 * A throwaway PostgreSQL server for tests: Debian's postgresql 15 binaries, `initdb` and `pg_ctl` run as the
 * `postgres` user (the server refuses root) in a temporary directory that user owns, trust authentication, a Unix
 * socket only (no TCP). With `{ tcp: true }` it also listens on 127.0.0.1 (a free port the kernel picked), where
 * every login needs a password (scram-sha-256; the socket stays trust, for the set-up). Started by a suite's set-up,
 * stopped (pg_ctl stop, then by pid) at its teardown.
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
  /** `{ tcp: true }`: the TCP port on 127.0.0.1 (password logins only). */
  readonly port: number | null;
  /** A login role with this password, owning a new database: `postgresql://USER:PASSWORD@127.0.0.1:PORT/DB` works. */
  createPasswordUser(user: string, password: string, database: string): Promise<void>;
  /** Freeze the server: SIGSTOP the postmaster and every child (`pgrep -P`); it accepts nothing and answers nothing. */
  freeze(): void;
  /** Thaw a frozen server (SIGCONT, children first). Safe to call when not frozen. */
  thaw(): void;
  /** Stop the server (`pg_ctl stop -m immediate`); its socket goes away: a client is refused at once. */
  halt(): void;
  /** Start it again on the same data, socket and port. */
  restart(): void;
  stop(): void;
}

/** The postmaster's children now (`pgrep -P`). */
function childrenOf(pid: number): number[] {
  const out = spawnSync('pgrep', ['-P', String(pid)], { encoding: 'utf8' });
  return out.stdout
    .split('\n')
    .map((line) => Number(line.trim()))
    .filter((n) => Number.isSafeInteger(n) && n > 0);
}

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    // gone
  }
}

function ids(user: string): { uid: number; gid: number } | null {
  const uid = spawnSync('id', ['-u', user], { encoding: 'utf8' });
  const gid = spawnSync('id', ['-g', user], { encoding: 'utf8' });
  if (uid.status !== 0 || gid.status !== 0) return null;
  return { uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) };
}

/** Why PostgreSQL cannot run here, or null when it can. */
export function postgresUnavailable(): string | null {
  if (!existsSync(join(PG_BIN, 'initdb')) || !existsSync(join(PG_BIN, 'pg_ctl')))
    return `no PostgreSQL binaries in ${PG_BIN}`;
  if (process.getuid?.() !== 0)
    return 'the test set-up runs the server as the postgres user and needs root for runuser';
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

/** `netns`: run it inside that network namespace (`/run/netns/NAME`, made by the caller): its TCP port lives there. */
function asPostgres(command: string, args: readonly string[], netns?: string): string {
  const run = ['runuser', '-u', PG_USER, '--', join(PG_BIN, command), ...args];
  const [file, ...rest] = netns === undefined ? run : ['nsenter', `--net=/run/netns/${netns}`, ...run];
  return execFileSync(file!, rest, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

/** A TCP port free on 127.0.0.1 right now (the kernel picks it). */
function freePort(): number {
  const out = execFileSync(
    process.execPath,
    [
      '-e',
      "const s=require('net').createServer();s.listen(0,'127.0.0.1',()=>{process.stdout.write(String(s.address().port));s.close()})",
    ],
    { encoding: 'utf8' },
  );
  return Number(out);
}

export function startPostgres(
  options: { readonly tcp?: boolean; readonly netns?: string } = {},
): TestPostgres {
  const owner = ids(PG_USER);
  if (owner === null) throw new Error(`no ${PG_USER} user`);
  const root = mkdtempSync(join(tmpdir(), 'rg-pg-'));
  chmodSync(root, 0o700);
  chownSync(root, owner.uid, owner.gid);
  const dataDir = join(root, 'data');
  const socketDir = root;
  asPostgres('initdb', [
    '-D',
    dataDir,
    '--auth-local=trust',
    '--auth-host=scram-sha-256',
    '-U',
    PG_USER,
    '--no-sync',
    '-E',
    'UTF8',
  ]);
  const port = options.tcp === true ? freePort() : null;
  const listen = port === null ? `-c listen_addresses=''` : `-c listen_addresses=127.0.0.1 -p ${port}`;
  // Reachable by root (the test process) through the socket folder: 0711 lets it traverse, not list.
  chmodSync(root, 0o711);
  const start = (): number => {
    asPostgres(
      'pg_ctl',
      [
        '-D',
        dataDir,
        '-l',
        join(root, 'server.log'),
        '-o',
        `-k ${socketDir} ${listen} -c fsync=off -c max_connections=100`,
        '-w',
        '-t',
        '60',
        'start',
      ],
      options.netns,
    );
    return Number(readFileSync(join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0] ?? '');
  };
  let pid = start();
  let stopped = false;
  let frozen: number[] = [];
  const thaw = (): void => {
    for (const p of frozen.reverse()) signal(p, 'SIGCONT');
    frozen = [];
  };
  const socketPort = port === null ? '' : `&port=${port}`;
  const url = (database: string): string =>
    `postgres://${PG_USER}@/${database}?host=${socketDir}${socketPort}`;
  const admin = async (statements: readonly string[]): Promise<void> => {
    const client = new pg.Client({
      host: socketDir,
      ...(port === null ? {} : { port }),
      user: PG_USER,
      database: 'postgres',
    });
    await client.connect();
    try {
      for (const statement of statements) await client.query(statement);
    } finally {
      await client.end();
    }
  };
  return {
    socketDir,
    url,
    port,
    async createPasswordUser(user: string, password: string, database: string): Promise<void> {
      const ident = (name: string): string => `"${name.replaceAll('"', '')}"`;
      await admin([
        `SET password_encryption = 'scram-sha-256'`,
        `CREATE ROLE ${ident(user)} LOGIN PASSWORD '${password.replaceAll("'", "''")}'`,
        `CREATE DATABASE ${ident(database)} OWNER ${ident(user)}`,
      ]);
    },
    async createDatabase(name: string): Promise<string> {
      await admin([`CREATE DATABASE "${name.replaceAll('"', '')}"`]);
      return url(name);
    },
    freeze(): void {
      if (frozen.length > 0) return;
      // The postmaster first (it forks no new child once stopped), then every child it has.
      frozen = [pid];
      signal(pid, 'SIGSTOP');
      for (const child of childrenOf(pid)) {
        frozen.push(child);
        signal(child, 'SIGSTOP');
      }
    },
    thaw,
    halt(): void {
      thaw();
      asPostgres('pg_ctl', ['-D', dataDir, '-m', 'immediate', '-w', '-t', '30', 'stop']);
    },
    restart(): void {
      pid = start();
    },
    stop(): void {
      thaw();
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
