/**
 * The capacity registry on PostgreSQL (SPEC §7, §13): the same port and the same semantics as the SQLite one,
 * shared by every host and batch that points `--registry` at the same database. Every check-and-reserve runs in
 * one transaction holding a transaction-scoped advisory lock on the node (admission) or row locks
 * (`SELECT … FOR UPDATE`: release, attach, terminal commit), so concurrent admitters never exceed a limit.
 */
import { randomUUID } from 'node:crypto';
import { Socket } from 'node:net';
import pg from 'pg';
import type { PoolClient } from 'pg';
import { RoboguideError } from '../../core/errors.js';
import type {
  AdmitRequest,
  AdmitResult,
  BoardAnnotation,
  BoardFilter,
  BoardRow,
  CapacityRegistry,
  HostLimits,
  LeaseResult,
  NodeLimits,
  PortHolder,
  RegistrySchemaVersion,
  ReleaseResult,
  Reservation,
  ReservationFilter,
  SupervisorLease,
  TerminalCommit,
  TerminalCommitResult,
} from '../../app/ports/capacity-registry.js';
import { failpoint } from '../../app/ports/failpoints.js';
import type { PostgresConnection } from './default-path.js';
import { LOCK_CLASS, POSTGRES_SCHEMA_VERSION, currentVersion, migratePostgres } from './postgres-schema.js';
import { integer, integerOrNull, textOrNull, toBoardRow, toReservation } from './rows.js';
import { readBackFailed, refusal, refuse } from './terminal-commit.js';
import { checkAdmitRequest, checkLimits, checkNode } from './validate.js';
import { localNodeName } from './local-node.js';
import {
  DEFAULT_REGISTRY_DEADLINE_MS,
  isUnreachable,
  registryUnreachable,
  withDeadline,
} from './deadline.js';

/** Second advisory-lock keys: a node's admission lock and a batch's lease lock hash their names into this space. */
const NODE_LOCK_SQL = `SELECT pg_advisory_xact_lock(${LOCK_CLASS} + 1, hashtext($1))`;
const LEASE_LOCK_SQL = `SELECT pg_advisory_xact_lock(${LOCK_CLASS} + 2, hashtext($1))`;

const RESERVATION_COLUMNS = `r.*, (SELECT string_agg(p.port::text, ',' ORDER BY p.port) FROM reserved_ports p WHERE p.reservation_id = r.id) AS ports`;

export interface PostgresCapacityRegistryOptions {
  readonly connection: PostgresConnection;
  /** The URL without its password, for messages. */
  readonly display: string;
  readonly clock?: { now(): Date };
  readonly newId?: () => string;
  /** The node admissions without one are for (default: this host's name). */
  readonly localNode?: string;
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

function poolConfig(options: PostgresCapacityRegistryOptions, stream?: () => Socket): pg.PoolConfig {
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

export class PostgresCapacityRegistry implements CapacityRegistry {
  readonly path: string;
  readonly localNode: string;
  readonly #pool: pg.Pool;
  readonly #sockets: TrackedSockets;
  readonly #deadlineMs: number;
  readonly #now: () => string;
  readonly #newId: () => string;
  #closed = false;
  /** The last operation found the server late or unreachable: close() does not wait for its goodbye. */
  #unavailable = false;

  private constructor(pool: pg.Pool, sockets: TrackedSockets, options: PostgresCapacityRegistryOptions) {
    this.path = options.display;
    this.#pool = pool;
    this.#sockets = sockets;
    this.#deadlineMs = options.deadlineMs ?? DEFAULT_REGISTRY_DEADLINE_MS;
    const clock = options.clock ?? { now: () => new Date() };
    this.#now = () => clock.now().toISOString();
    this.#newId = options.newId ?? randomUUID;
    this.localNode = options.localNode ?? localNodeName();
  }

  /** Connects and migrates (safe when several processes do it at once), within the deadline. */
  static async open(options: PostgresCapacityRegistryOptions): Promise<PostgresCapacityRegistry> {
    const sockets = trackedSockets();
    const pool = new pg.Pool(poolConfig(options, sockets.stream));
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
    return new PostgresCapacityRegistry(pool, sockets, options);
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
      throw new Error('deadline passed while connecting');
    }
    held.client = client;
    return client;
  }

  /** Runs `work` in one transaction (READ COMMITTED + explicit locks); retries a serialization/deadlock abort. */
  async #transaction<T>(operation: string, work: (client: PoolClient) => Promise<T>): Promise<T> {
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
  async #read<T>(operation: string, work: (client: PoolClient) => Promise<T>): Promise<T> {
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

  async limits(node?: string): Promise<HostLimits> {
    return this.#read('limits', (db) => selectLimits(db, node));
  }

  async setLimits(limits: HostLimits, node?: string): Promise<void> {
    checkLimits(limits);
    if (node !== undefined) checkNode(node);
    await this.#transaction('set_limits', async (db) => {
      if (node === undefined) {
        await db.query('UPDATE host_limits SET max_reservations = $1, gpu_mib = $2 WHERE id = 1', [
          limits.maxReservations,
          limits.gpuMib,
        ]);
      } else {
        await db.query(
          `INSERT INTO node_limits (node, max_reservations, gpu_mib) VALUES ($1, $2, $3)
           ON CONFLICT (node) DO UPDATE SET max_reservations = excluded.max_reservations, gpu_mib = excluded.gpu_mib`,
          [node, limits.maxReservations, limits.gpuMib],
        );
      }
    });
  }

  async nodeLimits(): Promise<NodeLimits[]> {
    return this.#read('node_limits', async (db) => {
      const rows = await db.query('SELECT node, max_reservations, gpu_mib FROM node_limits ORDER BY node');
      return rows.rows.map((row: Record<string, unknown>) => ({
        node: String(row['node']),
        limits: { maxReservations: integer(row, 'max_reservations'), gpuMib: integerOrNull(row, 'gpu_mib') },
      }));
    });
  }

  async acquireLease(
    batchId: string,
    lease: SupervisorLease,
    isAlive: (holder: SupervisorLease) => boolean,
  ): Promise<LeaseResult> {
    return this.#transaction('acquire_lease', async (db): Promise<LeaseResult> => {
      await db.query(LEASE_LOCK_SQL, [batchId]);
      const found = await db.query(
        'SELECT pid, start_ticks, boot_id FROM supervisor_leases WHERE batch_id = $1 FOR UPDATE',
        [batchId],
      );
      const row = found.rows[0] as Record<string, unknown> | undefined;
      if (row !== undefined) {
        const holder: SupervisorLease = {
          pid: Number(row['pid']),
          start_ticks: textOrNull(row, 'start_ticks'),
          boot_id: textOrNull(row, 'boot_id'),
        };
        const self =
          holder.pid === lease.pid &&
          holder.start_ticks === lease.start_ticks &&
          holder.boot_id === lease.boot_id;
        if (!self && isAlive(holder)) return { kind: 'held', holder };
      }
      await db.query(
        `INSERT INTO supervisor_leases (batch_id, pid, start_ticks, boot_id, acquired_at) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (batch_id) DO UPDATE SET pid = excluded.pid, start_ticks = excluded.start_ticks,
           boot_id = excluded.boot_id, acquired_at = excluded.acquired_at`,
        [batchId, lease.pid, lease.start_ticks, lease.boot_id, this.#now()],
      );
      return { kind: 'acquired' };
    });
  }

  async supervisorLease(batchId: string): Promise<SupervisorLease | null> {
    return this.#read('supervisor_lease', async (db) => {
      const found = await db.query(
        'SELECT pid, start_ticks, boot_id FROM supervisor_leases WHERE batch_id = $1',
        [batchId],
      );
      const row = found.rows[0] as Record<string, unknown> | undefined;
      if (row === undefined) return null;
      return {
        pid: Number(row['pid']),
        start_ticks: textOrNull(row, 'start_ticks'),
        boot_id: textOrNull(row, 'boot_id'),
      };
    });
  }

  async releaseLease(batchId: string, pid: number): Promise<void> {
    await this.#transaction('release_lease', async (db) => {
      await db.query('DELETE FROM supervisor_leases WHERE batch_id = $1 AND pid = $2', [batchId, pid]);
    });
  }

  async admit(request: AdmitRequest): Promise<AdmitResult> {
    checkAdmitRequest(request);
    const node = request.node ?? this.localNode;
    const ports = [...new Set(request.ports ?? [])].sort((a, b) => a - b);
    return this.#transaction('admit', async (db): Promise<AdmitResult> => {
      // The node's lock: every admission to this node waits here, so count-then-insert never interleaves.
      await db.query(NODE_LOCK_SQL, [node]);
      const existing = await selectReservationForClaim(db, request.claimId);
      if (existing !== null) {
        if (existing.batchId !== request.batchId || existing.jobId !== request.jobId) {
          throw new RoboguideError(
            'E_REGISTRY',
            `claim ${request.claimId} is already admitted for another run`,
            {
              context: { claimId: request.claimId, batchId: existing.batchId, jobId: existing.jobId },
            },
          );
        }
        return { kind: 'already_admitted', reservationId: existing.id };
      }
      const limits = await selectLimits(db, node);
      const totals = await db.query(
        `SELECT COUNT(*)::int AS n, COALESCE(SUM(gpu_mib), 0)::int AS mib FROM reservations WHERE state = 'held' AND node = $1`,
        [node],
      );
      const heldCount = integer(totals.rows[0] as Record<string, unknown>, 'n');
      const heldMib = integer(totals.rows[0] as Record<string, unknown>, 'mib');
      if (heldCount >= limits.maxReservations) {
        return { kind: 'refused', reason: 'host_full', held: heldCount, limit: limits.maxReservations, node };
      }
      if (limits.gpuMib !== null && heldMib + request.gpuMib > limits.gpuMib) {
        return { kind: 'refused', reason: 'gpu_budget', held: heldMib, limit: limits.gpuMib, node };
      }
      if (ports.length > 0) {
        const holders = await selectPortHolders(db, node, ports);
        const first = holders[0];
        if (first !== undefined) {
          return {
            kind: 'refused',
            reason: 'port_held',
            held: 1,
            limit: 1,
            node,
            port: first.port,
            holderBatchId: first.batchId,
          };
        }
      }
      const reservationId = this.#newId();
      const nowIso = this.#now();
      await db.query(
        `INSERT INTO reservations (id, batch_id, job_id, claim_id, node, container_id, gpu_mib, state, created_at)
         VALUES ($1, $2, $3, $4, $5, NULL, $6, 'held', $7)`,
        [reservationId, request.batchId, request.jobId, request.claimId, node, request.gpuMib, nowIso],
      );
      for (const port of ports) {
        await db.query('INSERT INTO reserved_ports (reservation_id, node, port) VALUES ($1, $2, $3)', [
          reservationId,
          node,
          port,
        ]);
      }
      await db.query(
        `INSERT INTO board (run_id, batch_id, job_id, state, updated_at) VALUES ($1, $2, $3, 'running', $4)`,
        [request.claimId, request.batchId, request.jobId, nowIso],
      );
      return { kind: 'admitted', reservationId };
    });
  }

  async attachContainer(reservationId: string, containerId: string): Promise<void> {
    await this.#transaction('attach_container', async (db) => {
      const reservation = await selectReservation(db, reservationId, true);
      const problem =
        reservation === null
          ? 'is unknown'
          : reservation.state !== 'held'
            ? 'is not held'
            : reservation.containerId !== null && reservation.containerId !== containerId
              ? `already has container ${reservation.containerId}`
              : null;
      if (problem !== null) {
        throw new RoboguideError(
          'E_REGISTRY',
          `cannot attach a container: reservation ${reservationId} ${problem}`,
          {
            context: { reservationId, containerId },
          },
        );
      }
      await db.query('UPDATE reservations SET container_id = $1 WHERE id = $2', [containerId, reservationId]);
    });
  }

  async release(reservationId: string, claimId: string): Promise<ReleaseResult> {
    return this.#transaction('release', async (db): Promise<ReleaseResult> => {
      const reservation = await selectReservation(db, reservationId, true);
      if (reservation === null) return { kind: 'refused', reason: 'unknown_reservation' };
      if (reservation.claimId !== claimId) return { kind: 'refused', reason: 'not_held_by_claim' };
      if (reservation.state === 'released') return { kind: 'already_released' };
      await db.query(
        `UPDATE reservations SET state = 'released', released_at = $1 WHERE id = $2 AND state = 'held'`,
        [this.#now(), reservationId],
      );
      return { kind: 'released' };
    });
  }

  async commitTerminal(commit: TerminalCommit): Promise<TerminalCommitResult> {
    return this.#transaction('commit_terminal', (db) => commitTerminalPg(db, commit, this.#now()));
  }

  async reservation(reservationId: string): Promise<Reservation | null> {
    return this.#read('reservation', (db) => selectReservation(db, reservationId, false));
  }

  async reservationForClaim(claimId: string): Promise<Reservation | null> {
    return this.#read('reservation_for_claim', (db) => selectReservationForClaim(db, claimId));
  }

  async held(filter: ReservationFilter = {}): Promise<Reservation[]> {
    return this.#read('held', async (db) => {
      const rows = await db.query(
        `SELECT ${RESERVATION_COLUMNS} FROM reservations r WHERE r.state = 'held' AND ($1::text IS NULL OR r.batch_id = $1) ORDER BY r.seq`,
        [filter.batchId ?? null],
      );
      return rows.rows.map((row: Record<string, unknown>) => toReservation(row));
    });
  }

  async portHolders(node: string, ports: readonly number[]): Promise<PortHolder[]> {
    return this.#read('port_holders', (db) => selectPortHolders(db, node, ports));
  }

  async board(filter: BoardFilter = {}): Promise<BoardRow[]> {
    return this.#read('board', async (db) => {
      const rows = await db.query(
        `SELECT * FROM board WHERE ($1::text IS NULL OR batch_id = $1) AND ($2::text IS NULL OR run_id = $2) ORDER BY seq`,
        [filter.batchId ?? null, filter.claimId ?? null],
      );
      return rows.rows.map((row: Record<string, unknown>) => toBoardRow(row));
    });
  }

  async annotate(claimId: string, fields: BoardAnnotation): Promise<void> {
    await this.#transaction('annotate', async (db) => {
      const changed = await db.query(
        `UPDATE board SET score = COALESCE($1, score), notes = COALESCE($2, notes), updated_at = $3 WHERE run_id = $4`,
        [fields.score ?? null, fields.notes ?? null, this.#now(), claimId],
      );
      if (changed.rowCount !== 1) {
        throw new RoboguideError('E_REGISTRY', `cannot annotate: no board row for run ${claimId}`, {
          context: { claimId },
        });
      }
    });
  }

  async schemaVersion(): Promise<RegistrySchemaVersion> {
    return this.#read('schema_version', async (client) => ({
      current: await currentVersion(client),
      supported: POSTGRES_SCHEMA_VERSION,
    }));
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

type Queryable = Pick<pg.Pool, 'query'> | PoolClient;

async function selectLimits(db: Queryable, node: string | undefined): Promise<HostLimits> {
  if (node !== undefined) {
    const own = await db.query('SELECT max_reservations, gpu_mib FROM node_limits WHERE node = $1', [node]);
    const row = own.rows[0] as Record<string, unknown> | undefined;
    if (row !== undefined)
      return { maxReservations: integer(row, 'max_reservations'), gpuMib: integerOrNull(row, 'gpu_mib') };
  }
  const found = await db.query('SELECT max_reservations, gpu_mib FROM host_limits WHERE id = 1');
  const row = found.rows[0] as Record<string, unknown> | undefined;
  if (row === undefined) throw new RoboguideError('E_REGISTRY', 'registry has no host_limits row');
  return { maxReservations: integer(row, 'max_reservations'), gpuMib: integerOrNull(row, 'gpu_mib') };
}

async function selectReservation(
  db: Queryable,
  reservationId: string,
  forUpdate: boolean,
): Promise<Reservation | null> {
  const rows = await db.query(
    `SELECT ${RESERVATION_COLUMNS} FROM reservations r WHERE r.id = $1${forUpdate ? ' FOR UPDATE' : ''}`,
    [reservationId],
  );
  const row = rows.rows[0] as Record<string, unknown> | undefined;
  return row === undefined ? null : toReservation(row);
}

async function selectReservationForClaim(db: Queryable, claimId: string): Promise<Reservation | null> {
  const rows = await db.query(`SELECT ${RESERVATION_COLUMNS} FROM reservations r WHERE r.claim_id = $1`, [
    claimId,
  ]);
  const row = rows.rows[0] as Record<string, unknown> | undefined;
  return row === undefined ? null : toReservation(row);
}

async function selectBoardRow(db: Queryable, claimId: string): Promise<BoardRow | null> {
  const rows = await db.query('SELECT * FROM board WHERE run_id = $1 FOR UPDATE', [claimId]);
  const row = rows.rows[0] as Record<string, unknown> | undefined;
  return row === undefined ? null : toBoardRow(row);
}

async function selectPortHolders(
  db: Queryable,
  node: string,
  ports: readonly number[],
): Promise<PortHolder[]> {
  if (ports.length === 0) return [];
  const rows = await db.query(
    `SELECT p.node, p.port, r.batch_id, r.job_id, r.id FROM reserved_ports p JOIN reservations r ON r.id = p.reservation_id
     WHERE r.state = 'held' AND p.node = $1 AND p.port = ANY($2::int[]) ORDER BY p.port, r.seq`,
    [node, [...ports]],
  );
  return rows.rows.map((row: Record<string, unknown>) => ({
    node: String(row['node']),
    port: integer(row, 'port'),
    batchId: String(row['batch_id']),
    jobId: String(row['job_id']),
    reservationId: String(row['id']),
  }));
}

/** SPEC §8 steps 2-4 with row locks on the reservation and the board row; the same rules as SQLite's. */
async function commitTerminalPg(
  db: PoolClient,
  commit: TerminalCommit,
  nowIso: string,
): Promise<TerminalCommitResult> {
  const reservation = await selectReservation(db, commit.reservationId, true);
  if (reservation === null) return refuse('unknown_reservation', `no reservation ${commit.reservationId}`);
  const board = await selectBoardRow(db, commit.claimId);
  const refused = refusal(commit, reservation, board);
  if (refused !== null) return refused;
  const steps: string[] = [];
  if (board?.state === 'terminal') {
    steps.push('board_already_terminal');
  } else {
    await db.query(
      `INSERT INTO board (run_id, batch_id, job_id, state, classification, outcome_sha256, proof_sha256, updated_at)
       VALUES ($1, $2, $3, 'terminal', $4, $5, $6, $7)
       ON CONFLICT (run_id) DO UPDATE SET state = 'terminal', classification = excluded.classification,
         outcome_sha256 = excluded.outcome_sha256, proof_sha256 = excluded.proof_sha256, updated_at = excluded.updated_at`,
      [
        commit.claimId,
        commit.batchId,
        commit.jobId,
        commit.classification,
        commit.outcomeSha256,
        commit.proofSha256,
        nowIso,
      ],
    );
    const back = await selectBoardRow(db, commit.claimId);
    const exact =
      back?.state === 'terminal' &&
      back.batchId === commit.batchId &&
      back.classification === commit.classification &&
      back.outcomeSha256 === commit.outcomeSha256 &&
      back.proofSha256 === commit.proofSha256;
    if (!exact) throw readBackFailed('board row', { claimId: commit.claimId });
    steps.push('board_written_terminal', 'board_read_back');
  }
  if (reservation.state === 'released') {
    steps.push('reservation_already_released');
    return { kind: 'already_committed', steps };
  }
  const changed = await db.query(
    `UPDATE reservations SET state = 'released', released_at = $1, proof_sha256 = $2 WHERE id = $3 AND claim_id = $4 AND state = 'held'`,
    [nowIso, commit.proofSha256, commit.reservationId, commit.claimId],
  );
  const back = await selectReservation(db, commit.reservationId, false);
  if (changed.rowCount !== 1 || back?.state !== 'released' || back.proofSha256 !== commit.proofSha256) {
    throw readBackFailed('reservation release', { reservationId: commit.reservationId });
  }
  steps.push('reservation_released', 'reservation_read_back');
  return { kind: 'committed', steps };
}
