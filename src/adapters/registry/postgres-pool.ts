/**
 * The PostgreSQL registry's connections (SPEC §7, §13): a pool whose every operation, connect to commit, runs within
 * the registry deadline (a frozen or partitioned server fails it with E_REGISTRY_UNAVAILABLE and its connection is
 * destroyed), transactions that retry a serialization or deadlock abort, and pg errors as E_REGISTRY naming the
 * database without its password. What the registry stores is `postgres-capacity-registry.ts`.
 */
import { Socket } from 'node:net';
import type pg from 'pg';
import type { PoolClient } from 'pg';
import { InternalError, RoboguideError } from '../../core/errors.js';
import { failpoint } from '../../app/ports/failpoints.js';
import type { PostgresConnection } from './default-path.js';
import { migratePostgres } from './postgres-schema.js';
import {
  DEFAULT_REGISTRY_DEADLINE_MS,
  isUnreachable,
  registryUnreachable,
  withDeadline,
} from './deadline.js';

export interface PostgresPoolOptions {
  readonly connection: PostgresConnection;
  /** The URL without its password, for messages. */
  readonly display: string;
  /** Connections kept open at most (default 4). */
  readonly maxConnections?: number;
  /** How long to wait for a connection (default 10 s, never more than the deadline). */
  readonly connectTimeoutMs?: number;
  /**
   * The deadline of every operation, connect to commit (default DEFAULT_REGISTRY_DEADLINE_MS): past it the
   * connection is destroyed and the call fails with E_REGISTRY_UNAVAILABLE. Also the server's statement_timeout.
   */
  readonly deadlineMs?: number;
}

/**
 * The sockets of a pool's connections, so that a failed open can close them at once. A server that asks for a
 * password the client does not have leaves the connection mid-handshake: pg reports the error, but the socket
 * stays open until the server's authentication_timeout (one minute by default), and with it the process.
 */
interface TrackedSockets {
  readonly stream: () => Socket;
  destroyAll(): void;
}

function trackedSockets(): TrackedSockets {
  const sockets = new Set<Socket>();
  return {
    stream: () => {
      const socket = new Socket();
      sockets.add(socket);
      socket.once('close', () => sockets.delete(socket));
      return socket;
    },
    destroyAll: () => {
      for (const socket of sockets) socket.destroy();
    },
  };
}

function poolConfig(options: PostgresPoolOptions, stream?: () => Socket): pg.PoolConfig {
  const c = options.connection;
  const deadlineMs = options.deadlineMs ?? DEFAULT_REGISTRY_DEADLINE_MS;
  return {
    ...(stream !== undefined ? { stream } : {}),
    ...(c.host !== undefined ? { host: c.host } : {}),
    ...(c.port !== undefined ? { port: c.port } : {}),
    ...(c.user !== undefined ? { user: c.user } : {}),
    ...(c.password !== undefined ? { password: c.password } : {}),
    database: c.database,
    ...(c.options['application_name'] !== undefined
      ? { application_name: c.options['application_name'] }
      : { application_name: 'roboguide-eval' }),
    ...(c.options['sslmode'] !== undefined && c.options['sslmode'] !== 'disable'
      ? { ssl: c.options['sslmode'] === 'require' ? { rejectUnauthorized: false } : true }
      : {}),
    max: options.maxConnections ?? 4,
    // Idle connections never keep a command's process alive (close() ends the pool anyway).
    allowExitOnIdle: true,
    connectionTimeoutMillis: Math.min(options.connectTimeoutMs ?? 10_000, deadlineMs),
    // A frozen or partitioned server must not hold anything forever (issue 27): the server cancels a statement past
    // the deadline, the client gives up on a read a little later (the operation's own deadline, below, comes first
    // and destroys the connection: pg's query_timeout alone leaves the client checked out), keepalive probes notice
    // a peer gone from an idle connection, and a transaction a vanished client left open is ended by the server.
    statement_timeout: deadlineMs,
    query_timeout: deadlineMs + 1_000,
    idle_in_transaction_session_timeout: Math.max(2 * deadlineMs, 1_000),
    keepAlive: true,
    keepAliveInitialDelayMillis: Math.min(deadlineMs, 10_000),
  };
}

/**
 * Ends a client now, whatever its server does: the socket is destroyed (a frozen server never answers the polite
 * Terminate, and a half-closed socket would keep the process alive), then the client leaves the pool for good.
 */
function destroyClient(client: PoolClient): void {
  client.on('error', () => undefined);
  const stream = (client as unknown as { connection?: { stream?: { destroy?: () => void } } }).connection
    ?.stream;
  stream?.destroy?.();
  try {
    client.release(true);
  } catch {
    // already released
  }
}

/** What an operation holds while it runs: the client to destroy should its deadline pass. */
interface Held {
  client: PoolClient | undefined;
  timedOut: boolean;
}

/** A pg error as E_REGISTRY, naming the database without its password (pg's messages never carry it). */
function pgFault(
  display: string,
  message: string,
  error: unknown,
  unreachable?: { operation: string; deadlineMs: number },
): RoboguideError {
  if (error instanceof RoboguideError) return error;
  if (unreachable !== undefined && isUnreachable(error))
    return registryUnreachable(unreachable.operation, unreachable.deadlineMs, display, error);
  const detail = error instanceof Error ? error.message : String(error);
  const code =
    typeof error === 'object' && error !== null && 'code' in error ? String(error.code) : undefined;
  return new RoboguideError('E_REGISTRY', `${message} (${display}): ${detail}`, {
    cause: error,
    context: { registry: display, ...(code !== undefined ? { pg_code: code } : {}) },
  });
}

/**
 * The server wants a password the client does not have: pg's SCRAM code says "client password must be a string",
 * a cleartext/md5 server answers 28P01 (or the client fails before asking).
 */
function asksForPassword(error: unknown): boolean {
  const message = error instanceof Error ? error.message : '';
  const code = typeof error === 'object' && error !== null && 'code' in error ? String(error.code) : '';
  return (
    /client password must be a string|password authentication failed|no password (was )?supplied/i.test(
      message,
    ) || code === '28P01'
  );
}

/** SERIALIZABLE/deadlock aborts are retried; these are PostgreSQL's codes for them. */
const RETRYABLE = new Set(['40001', '40P01']);

export class PostgresPool {
  /** The URL without its password. */
  readonly path: string;
  readonly #pool: pg.Pool;
  readonly #sockets: TrackedSockets;
  readonly #deadlineMs: number;
  #closed = false;
  /** The last operation found the server late or unreachable: close() does not wait for its goodbye. */
  #unavailable = false;

  private constructor(pool: pg.Pool, sockets: TrackedSockets, options: PostgresPoolOptions) {
    this.path = options.display;
    this.#pool = pool;
    this.#sockets = sockets;
    this.#deadlineMs = options.deadlineMs ?? DEFAULT_REGISTRY_DEADLINE_MS;
  }

  /** Connects and migrates (safe when several processes do it at once), within the deadline. */
  static async open(options: PostgresPoolOptions): Promise<PostgresPool> {
    const sockets = trackedSockets();
    // pg is loaded here, with the first PostgreSQL registry: every other command and registry is spared its
    // 16 modules (about 50 ms of start-up, docs/benchmarks.md "start-up").
    const { default: postgres } = await import('pg');
    const pool = new postgres.Pool(poolConfig(options, sockets.stream));
    // An idle connection the server drops must not crash the process: the next query reports it instead.
    pool.on('error', () => undefined);
    const deadlineMs = options.deadlineMs ?? DEFAULT_REGISTRY_DEADLINE_MS;
    const held: Held = { client: undefined, timedOut: false };
    try {
      await withDeadline(
        { operation: 'open', registry: options.display, deadlineMs },
        async () => {
          const client = await pool.connect();
          if (held.timedOut) {
            destroyClient(client);
            return;
          }
          held.client = client;
          await migratePostgres(client);
        },
        () => {
          held.timedOut = true;
          sockets.destroyAll();
        },
      );
    } catch (error) {
      if (held.client !== undefined && !held.timedOut) held.client.release();
      sockets.destroyAll();
      await endPool(pool, sockets, deadlineMs);
      const noPassword =
        options.connection.password === undefined && (process.env['PGPASSWORD'] ?? '') === '';
      if (noPassword && asksForPassword(error)) {
        throw new RoboguideError(
          'E_REGISTRY',
          `cannot open the capacity registry (${options.display}): the server asks for a password and none was given`,
          {
            cause: error,
            context: { registry: options.display },
            suggestions: [
              'give it in the environment: PGPASSWORD=… (or a ~/.pgpass line); a batch records its registry URL without the password, so `resume` and `node-down` need it this way',
              'or put it in a --registry URL where the command takes one (postgresql://USER:PASSWORD@HOST:PORT/DB)',
            ],
          },
        );
      }
      throw pgFault(options.display, 'cannot open the capacity registry', error, {
        operation: 'open',
        deadlineMs,
      });
    }
    held.client?.release();
    return new PostgresPool(pool, sockets, options);
  }

  /**
   * Runs `work` with a client of the pool, within the deadline: past it the client's connection is destroyed (also
   * one that connects late) and the call fails with E_REGISTRY_UNAVAILABLE; so does a server that cannot be reached.
   */
  async #bounded<T>(operation: string, work: (held: Held) => Promise<T>): Promise<T> {
    const held: Held = { client: undefined, timedOut: false };
    try {
      const value = await withDeadline(
        { operation, registry: this.path, deadlineMs: this.#deadlineMs },
        () => work(held),
        () => {
          held.timedOut = true;
          if (held.client !== undefined) destroyClient(held.client);
        },
      );
      this.#unavailable = false;
      return value;
    } catch (error) {
      this.#unavailable = isUnreachable(error);
      throw error;
    }
  }

  /** A client for `held`, or (the deadline passed while it connected) none: it is destroyed at once. */
  async #connect(operation: string, held: Held): Promise<PoolClient> {
    let client: PoolClient;
    try {
      client = await this.#pool.connect();
    } catch (error) {
      throw pgFault(this.path, 'cannot reach the capacity registry', error, {
        operation,
        deadlineMs: this.#deadlineMs,
      });
    }
    if (held.timedOut) {
      destroyClient(client);
      throw new InternalError('deadline passed while connecting');
    }
    held.client = client;
    return client;
  }

  /** Runs `work` in one transaction (READ COMMITTED + explicit locks); retries a serialization/deadlock abort. */
  async transaction<T>(operation: string, work: (client: PoolClient) => Promise<T>): Promise<T> {
    return this.#bounded(operation, async (held) => {
      for (let attempt = 1; ; attempt += 1) {
        const client = await this.#connect(operation, held);
        try {
          await client.query('BEGIN');
          const value = await work(client);
          failpoint(`registry:${operation}:in_txn`);
          await client.query('COMMIT');
          failpoint(`registry:${operation}:committed`);
          held.client = undefined;
          client.release();
          return value;
        } catch (error) {
          if (held.timedOut) throw error;
          const rolledBack = isUnreachable(error)
            ? false
            : await client.query('ROLLBACK').then(
                () => true,
                () => false,
              );
          held.client = undefined;
          if (rolledBack) client.release();
          else destroyClient(client);
          const code =
            typeof error === 'object' && error !== null && 'code' in error ? String(error.code) : '';
          if (RETRYABLE.has(code) && attempt < 5) continue;
          throw pgFault(this.path, 'registry transaction failed and was rolled back', error, {
            operation,
            deadlineMs: this.#deadlineMs,
          });
        }
      }
    });
  }

  /** One read, outside a transaction, within the deadline. */
  async read<T>(operation: string, work: (client: PoolClient) => Promise<T>): Promise<T> {
    return this.#bounded(operation, async (held) => {
      const client = await this.#connect(operation, held);
      try {
        const value = await work(client);
        held.client = undefined;
        client.release();
        return value;
      } catch (error) {
        if (held.timedOut) throw error;
        held.client = undefined;
        if (isUnreachable(error)) destroyClient(client);
        else client.release();
        throw pgFault(this.path, 'registry read failed', error, { operation, deadlineMs: this.#deadlineMs });
      }
    });
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#unavailable) this.#sockets.destroyAll();
    await endPool(this.#pool, this.#sockets, this.#deadlineMs);
  }
}

/** Ends the pool within the deadline; a server that does not answer the goodbye has its sockets destroyed. */
async function endPool(pool: pg.Pool, sockets: TrackedSockets, deadlineMs: number): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<void>((resolve) => {
    timer = setTimeout(() => {
      sockets.destroyAll();
      resolve();
    }, deadlineMs);
    timer.unref();
  });
  await Promise.race([pool.end().catch(() => undefined), late]);
  clearTimeout(timer);
}
