/**
 * The capacity registry on PostgreSQL (SPEC §7, §13): the same port and the same semantics as the SQLite one,
 * shared by every host and batch that points `--registry` at the same database. Every check-and-reserve runs in
 * one transaction holding a transaction-scoped advisory lock on the node (admission) or row locks
 * (`SELECT … FOR UPDATE`: release, attach, terminal commit), so concurrent admitters never exceed a limit. The
 * connections and their deadline are `postgres-pool.ts`; the reads `postgres-queries.ts`.
 */
import { RoboguideError } from '../../core/errors.js';
import { decideAdmission, requestedSources, reservedPorts } from '../../core/admission-rule.js';
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
import { LOCK_CLASS, POSTGRES_SCHEMA_VERSION, currentVersion } from './postgres-schema.js';
import { PostgresPool, type PostgresPoolOptions } from './postgres-pool.js';
import {
  RESERVATION_COLUMNS,
  commitTerminalPg,
  selectHeldTotals,
  selectLimits,
  selectHeldMounts,
  selectPortHolders,
  selectReservation,
  selectReservationForClaim,
} from './postgres-queries.js';
import { integer, integerOrNull, textOrNull, toBoardRow, toReservation } from './rows.js';
import { checkAdmitRequest, checkLimits, checkNode, unstoredAdmission, checkAttach } from './validate.js';
import { registryIdentity, type RegistryIdentityOptions } from './local-node.js';

/** Second advisory-lock keys: a node's admission lock and a batch's lease lock hash their names into this space. */
const NODE_LOCK_SQL = `SELECT pg_advisory_xact_lock(${LOCK_CLASS} + 1, hashtext($1))`;
const LEASE_LOCK_SQL = `SELECT pg_advisory_xact_lock(${LOCK_CLASS} + 2, hashtext($1))`;

export interface PostgresCapacityRegistryOptions extends PostgresPoolOptions, RegistryIdentityOptions {}

export class PostgresCapacityRegistry implements CapacityRegistry {
  readonly path: string;
  readonly localNode: string;
  readonly #db: PostgresPool;
  readonly #now: () => string;
  readonly #newId: () => string;

  private constructor(db: PostgresPool, options: PostgresCapacityRegistryOptions) {
    this.path = options.display;
    this.#db = db;
    const identity = registryIdentity(options);
    this.#now = identity.now;
    this.#newId = identity.newId;
    this.localNode = identity.localNode;
  }

  /** Connects and migrates (safe when several processes do it at once), within the deadline. */
  static async open(options: PostgresCapacityRegistryOptions): Promise<PostgresCapacityRegistry> {
    return new PostgresCapacityRegistry(await PostgresPool.open(options), options);
  }

  async limits(node?: string): Promise<HostLimits> {
    return this.#db.read('limits', (db) => selectLimits(db, node));
  }

  async setLimits(limits: HostLimits, node?: string): Promise<void> {
    checkLimits(limits);
    if (node !== undefined) checkNode(node);
    await this.#db.transaction('set_limits', async (db) => {
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
    return this.#db.read('node_limits', async (db) => {
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
    return this.#db.transaction('acquire_lease', async (db): Promise<LeaseResult> => {
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
    return this.#db.read('supervisor_lease', async (db) => {
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
    await this.#db.transaction('release_lease', async (db) => {
      await db.query('DELETE FROM supervisor_leases WHERE batch_id = $1 AND pid = $2', [batchId, pid]);
    });
  }

  /** The rule decides on the node's rows (`decideAdmission`); this only reads them and stores what it admits. */
  async admit(request: AdmitRequest): Promise<AdmitResult> {
    checkAdmitRequest(request);
    const node = request.node ?? this.localNode;
    const ports = reservedPorts(request.ports);
    const mounts = requestedSources(request);
    return this.#db.transaction('admit', async (db): Promise<AdmitResult> => {
      // The node's lock: every admission to this node waits here, so count-then-insert never interleaves.
      await db.query(NODE_LOCK_SQL, [node]);
      const decision = decideAdmission(request, {
        existing: await selectReservationForClaim(db, request.claimId),
        node,
        budget: await selectLimits(db, node),
        held: await selectHeldTotals(db, node),
        portHolders: await selectPortHolders(db, node, ports),
        heldMounts:
          mounts.length > 0 || (request.readOnlyMounts ?? []).length > 0
            ? await selectHeldMounts(db, node)
            : [],
      });
      if (decision.kind !== 'admit') return unstoredAdmission(request, decision);
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
      for (const source of mounts) {
        await db.query('INSERT INTO reserved_mounts (reservation_id, node, source) VALUES ($1, $2, $3)', [
          reservationId,
          node,
          source,
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
    await this.#db.transaction('attach_container', async (db) => {
      const reservation = await selectReservation(db, reservationId, true);
      checkAttach(reservation, reservationId, containerId);
      await db.query('UPDATE reservations SET container_id = $1 WHERE id = $2', [containerId, reservationId]);
    });
  }

  async release(reservationId: string, claimId: string): Promise<ReleaseResult> {
    return this.#db.transaction('release', async (db): Promise<ReleaseResult> => {
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
    return this.#db.transaction('commit_terminal', (db) => commitTerminalPg(db, commit, this.#now()));
  }

  async reservation(reservationId: string): Promise<Reservation | null> {
    return this.#db.read('reservation', (db) => selectReservation(db, reservationId, false));
  }

  async reservationForClaim(claimId: string): Promise<Reservation | null> {
    return this.#db.read('reservation_for_claim', (db) => selectReservationForClaim(db, claimId));
  }

  async held(filter: ReservationFilter = {}): Promise<Reservation[]> {
    return this.#db.read('held', async (db) => {
      const rows = await db.query(
        `SELECT ${RESERVATION_COLUMNS} FROM reservations r WHERE r.state = 'held' AND ($1::text IS NULL OR r.batch_id = $1) ORDER BY r.seq`,
        [filter.batchId ?? null],
      );
      return rows.rows.map((row: Record<string, unknown>) => toReservation(row));
    });
  }

  async portHolders(node: string, ports: readonly number[]): Promise<PortHolder[]> {
    return this.#db.read('port_holders', (db) => selectPortHolders(db, node, ports));
  }

  async reservationSources(reservationId: string): Promise<string[]> {
    return this.#db.read('reservation_sources', async (db) => {
      const rows = await db.query(
        'SELECT source FROM reserved_mounts WHERE reservation_id = $1 ORDER BY source',
        [reservationId],
      );
      return rows.rows.map((row: Record<string, unknown>) => String(row['source']));
    });
  }

  async board(filter: BoardFilter = {}): Promise<BoardRow[]> {
    return this.#db.read('board', async (db) => {
      const rows = await db.query(
        `SELECT * FROM board WHERE ($1::text IS NULL OR batch_id = $1) AND ($2::text IS NULL OR run_id = $2) ORDER BY seq`,
        [filter.batchId ?? null, filter.claimId ?? null],
      );
      return rows.rows.map((row: Record<string, unknown>) => toBoardRow(row));
    });
  }

  async annotate(claimId: string, fields: BoardAnnotation): Promise<void> {
    await this.#db.transaction('annotate', async (db) => {
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
    return this.#db.read('schema_version', async (client) => ({
      current: await currentVersion(client),
      supported: POSTGRES_SCHEMA_VERSION,
    }));
  }

  async close(): Promise<void> {
    await this.#db.close();
  }
}
