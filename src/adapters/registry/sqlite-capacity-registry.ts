/* eslint-disable @typescript-eslint/require-await -- node:sqlite is synchronous; the port it implements is asynchronous */
/**
 * The host-wide capacity registry on `node:sqlite` (SPEC §7): WAL mode, a busy timeout, and
 * every write in one `BEGIN IMMEDIATE` transaction, so admissions from any number of
 * processes on the host serialize and the host limits are never exceeded.
 */
import { chmodSync, closeSync, constants, openSync, statSync } from 'node:fs';
import { registryFilesRefusal } from './registry-files.js';
import { dirname } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { RoboguideError } from '../../core/errors.js';
import type {
  LeaseResult,
  NodeLimits,
  PortHolder,
  RegistrySchemaVersion,
  SupervisorLease,
  AdmitRequest,
  AdmitResult,
  BoardAnnotation,
  BoardFilter,
  BoardRow,
  CapacityRegistry,
  HostLimits,
  ReleaseResult,
  Reservation,
  ReservationFilter,
  TerminalCommit,
  TerminalCommitResult,
} from '../../app/ports/capacity-registry.js';
import { SCHEMA_VERSION, migrate, recordedVersion } from './schema.js';
import { localNodeName, registryIdentity, type RegistryIdentityOptions } from './local-node.js';
import { inImmediateTransaction, registryFault, registryRead } from './transaction.js';
import { DEFAULT_REGISTRY_DEADLINE_MS } from './deadline.js';
import {
  selectHeldTotals,
  selectLease,
  selectLimits,
  selectHeldMounts,
  selectPortHolders,
  selectReservation,
  selectReservationForClaim,
  selectHeld,
  selectBoard,
  selectReservationSources,
} from './queries.js';
import { integer, integerOrNull, text } from './rows.js';
import { commitTerminalIn } from './terminal-commit.js';
import { checkAdmitRequest, checkLimits, checkNode, unstoredAdmission, checkAttach } from './validate.js';
import { decideAdmission, requestedSources, reservedPorts } from '../../core/admission-rule.js';
import { makeDirsSync } from '../fs/make-dirs.js';

/** The busy wait: the registry deadline (a writer never waits longer for another process's transaction). */
export const DEFAULT_BUSY_TIMEOUT_MS = DEFAULT_REGISTRY_DEADLINE_MS;

export interface SqliteCapacityRegistryOptions extends RegistryIdentityOptions {
  /** Database file; parent directories are created with mode 0700. `:memory:` for a private one. */
  readonly path: string;
  /**
   * How long a writer waits for another process's transaction (default: the registry deadline, 10 s); past it the
   * call fails with E_REGISTRY_UNAVAILABLE. SQLite waits synchronously: keep it short.
   */
  readonly busyTimeoutMs?: number;
}

/** Registry files are private to the host's user: 0600, whatever the umask. */
export const REGISTRY_FILE_PERMISSIONS = 0o600;

/**
 * Creates the database file 0600 before SQLite opens it: SQLite gives its -wal and -shm files the database
 * file's permissions, so all three stay private. An existing database (and its -wal/-shm) is tightened too.
 */
function createPrivate(path: string): void {
  try {
    closeSync(
      openSync(
        path,
        constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
        REGISTRY_FILE_PERMISSIONS,
      ),
    );
    chmodSync(path, REGISTRY_FILE_PERMISSIONS); // the umask applied at creation
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
  for (const file of [path, `${path}-wal`, `${path}-shm`]) {
    try {
      if ((statSync(file).mode & 0o077) !== 0) chmodSync(file, REGISTRY_FILE_PERMISSIONS);
    } catch {
      // absent, or not ours to change: SQLite reports what matters when it opens the database
    }
  }
}

function openDatabase(path: string, busyTimeoutMs: number): DatabaseSync {
  if (path !== ':memory:') {
    try {
      makeDirsSync(dirname(path), 0o700);
    } catch {
      // SQLite's open below says what is wrong
    }
    const refusal = (() => {
      try {
        return registryFilesRefusal(path);
      } catch {
        return null; // cannot be looked at: SQLite's open below says what is wrong
      }
    })();
    if (refusal !== null)
      throw new RoboguideError(
        'E_REGISTRY',
        `the capacity registry at ${path} is not safe to use: ${refusal}`,
        {
          context: { path },
          suggestions: [
            'Use a registry file of your own in a folder only you (or root) can write, with --registry.',
          ],
        },
      );
  }
  try {
    if (path !== ':memory:') createPrivate(path);
    const db = new DatabaseSync(path, { timeout: busyTimeoutMs });
    db.exec('PRAGMA journal_mode = WAL');
    db.exec('PRAGMA synchronous = FULL');
    return db;
  } catch (error) {
    throw new RoboguideError('E_REGISTRY', `cannot open the capacity registry at ${path}`, {
      cause: error,
      context: { path },
      suggestions: ['Check that the directory is writable, or choose another file with --registry.'],
    });
  }
}

export class SqliteCapacityRegistry implements CapacityRegistry, Disposable {
  readonly path: string;
  readonly localNode: string;
  readonly #db: DatabaseSync;
  readonly #now: () => string;
  readonly #newId: () => string;

  private constructor(db: DatabaseSync, options: SqliteCapacityRegistryOptions) {
    this.path = options.path;
    this.#db = db;
    const identity = registryIdentity(options);
    this.#now = identity.now;
    this.#newId = identity.newId;
    this.localNode = identity.localNode;
  }

  /** Opens (creating if needed) and migrates the registry; idempotent for an existing file. */
  static open(options: SqliteCapacityRegistryOptions): SqliteCapacityRegistry {
    const db = openDatabase(options.path, options.busyTimeoutMs ?? DEFAULT_BUSY_TIMEOUT_MS);
    try {
      migrate(db, options.localNode ?? localNodeName());
    } catch (error) {
      db.close();
      throw registryFault(`cannot prepare the capacity registry at ${options.path}`, error);
    }
    return new SqliteCapacityRegistry(db, options);
  }

  async limits(node?: string): Promise<HostLimits> {
    return registryRead(() => selectLimits(this.#db, node));
  }

  async setLimits(limits: HostLimits, node?: string): Promise<void> {
    checkLimits(limits);
    if (node !== undefined) checkNode(node);
    inImmediateTransaction(
      this.#db,
      () => {
        if (node === undefined) {
          this.#db
            .prepare('UPDATE host_limits SET max_reservations = ?, gpu_mib = ? WHERE id = 1')
            .run(limits.maxReservations, limits.gpuMib);
        } else {
          this.#db
            .prepare(
              `INSERT INTO node_limits (node, max_reservations, gpu_mib) VALUES (?, ?, ?)
             ON CONFLICT (node) DO UPDATE SET max_reservations = excluded.max_reservations, gpu_mib = excluded.gpu_mib`,
            )
            .run(node, limits.maxReservations, limits.gpuMib);
        }
      },
      'set_limits',
    );
  }

  async nodeLimits(): Promise<NodeLimits[]> {
    return registryRead(() =>
      this.#db
        .prepare('SELECT node, max_reservations, gpu_mib FROM node_limits ORDER BY node')
        .all()
        .map((row) => ({
          node: text(row, 'node'),
          limits: {
            maxReservations: integer(row, 'max_reservations'),
            gpuMib: integerOrNull(row, 'gpu_mib'),
          },
        })),
    );
  }

  async portHolders(node: string, ports: readonly number[]): Promise<PortHolder[]> {
    return registryRead(() => selectPortHolders(this.#db, node, ports));
  }

  async schemaVersion(): Promise<RegistrySchemaVersion> {
    return registryRead(() => ({ current: recordedVersion(this.#db), supported: SCHEMA_VERSION }));
  }

  async acquireLease(
    batchId: string,
    lease: SupervisorLease,
    isAlive: (holder: SupervisorLease) => boolean,
  ): Promise<LeaseResult> {
    return inImmediateTransaction(
      this.#db,
      () => {
        const holder = selectLease(this.#db, batchId);
        if (holder !== null) {
          const self =
            holder.pid === lease.pid &&
            holder.start_ticks === lease.start_ticks &&
            holder.boot_id === lease.boot_id;
          if (!self && isAlive(holder)) return { kind: 'held', holder };
        }
        this.#db
          .prepare(
            `INSERT INTO supervisor_leases (batch_id, pid, start_ticks, boot_id, acquired_at) VALUES (?, ?, ?, ?, ?)
           ON CONFLICT (batch_id) DO UPDATE SET pid = excluded.pid, start_ticks = excluded.start_ticks,
             boot_id = excluded.boot_id, acquired_at = excluded.acquired_at`,
          )
          .run(batchId, lease.pid, lease.start_ticks, lease.boot_id, this.#now());
        return { kind: 'acquired' } as const;
      },
      'acquire_lease',
    );
  }

  async supervisorLease(batchId: string): Promise<SupervisorLease | null> {
    return registryRead(() => selectLease(this.#db, batchId));
  }

  async releaseLease(batchId: string, pid: number): Promise<void> {
    inImmediateTransaction(
      this.#db,
      () => {
        this.#db.prepare('DELETE FROM supervisor_leases WHERE batch_id = ? AND pid = ?').run(batchId, pid);
      },
      'release_lease',
    );
  }

  async admit(request: AdmitRequest): Promise<AdmitResult> {
    checkAdmitRequest(request);
    return inImmediateTransaction(this.#db, () => this.#admitIn(request), 'admit');
  }

  /** The rule decides on the node's rows (`decideAdmission`); this only reads them and stores what it admits. */
  #admitIn(request: AdmitRequest): AdmitResult {
    const db = this.#db;
    const node = request.node ?? this.localNode;
    const ports = reservedPorts(request.ports);
    const mounts = requestedSources(request);
    const decision = decideAdmission(request, {
      existing: selectReservationForClaim(db, request.claimId),
      node,
      budget: selectLimits(db, node),
      held: selectHeldTotals(db, node),
      portHolders: selectPortHolders(db, node, ports),
      heldMounts:
        mounts.length > 0 || (request.readOnlyMounts ?? []).length > 0 ? selectHeldMounts(db, node) : [],
    });
    if (decision.kind !== 'admit') return unstoredAdmission(request, decision);
    const reservationId = this.#newId();
    const nowIso = this.#now();
    db.prepare(
      `INSERT INTO reservations (id, batch_id, job_id, claim_id, node, container_id, gpu_mib, state, created_at)
       VALUES (?, ?, ?, ?, ?, NULL, ?, 'held', ?)`,
    ).run(reservationId, request.batchId, request.jobId, request.claimId, node, request.gpuMib, nowIso);
    const insertPort = db.prepare('INSERT INTO reserved_ports (reservation_id, node, port) VALUES (?, ?, ?)');
    for (const port of ports) insertPort.run(reservationId, node, port);
    const insertMount = db.prepare(
      'INSERT INTO reserved_mounts (reservation_id, node, source) VALUES (?, ?, ?)',
    );
    for (const source of mounts) insertMount.run(reservationId, node, source);
    db.prepare(
      `INSERT INTO board (run_id, batch_id, job_id, state, updated_at) VALUES (?, ?, ?, 'running', ?)`,
    ).run(request.claimId, request.batchId, request.jobId, nowIso);
    return { kind: 'admitted', reservationId };
  }

  async attachContainer(reservationId: string, containerId: string): Promise<void> {
    inImmediateTransaction(
      this.#db,
      () => {
        const reservation = selectReservation(this.#db, reservationId);
        checkAttach(reservation, reservationId, containerId);
        this.#db
          .prepare('UPDATE reservations SET container_id = ? WHERE id = ?')
          .run(containerId, reservationId);
      },
      'attach_container',
    );
  }

  async release(reservationId: string, claimId: string): Promise<ReleaseResult> {
    return inImmediateTransaction(
      this.#db,
      (): ReleaseResult => {
        const reservation = selectReservation(this.#db, reservationId);
        if (reservation === null) return { kind: 'refused', reason: 'unknown_reservation' };
        if (reservation.claimId !== claimId) return { kind: 'refused', reason: 'not_held_by_claim' };
        if (reservation.state === 'released') return { kind: 'already_released' };
        this.#db
          .prepare(
            `UPDATE reservations SET state = 'released', released_at = ? WHERE id = ? AND state = 'held'`,
          )
          .run(this.#now(), reservationId);
        return { kind: 'released' };
      },
      'release',
    );
  }

  async commitTerminal(commit: TerminalCommit): Promise<TerminalCommitResult> {
    return inImmediateTransaction(
      this.#db,
      () => commitTerminalIn(this.#db, commit, this.#now()),
      'commit_terminal',
    );
  }

  async reservation(reservationId: string): Promise<Reservation | null> {
    return registryRead(() => selectReservation(this.#db, reservationId));
  }

  async reservationForClaim(claimId: string): Promise<Reservation | null> {
    return registryRead(() => selectReservationForClaim(this.#db, claimId));
  }

  async held(filter: ReservationFilter = {}): Promise<Reservation[]> {
    return registryRead(() => selectHeld(this.#db, filter.batchId ?? null));
  }

  async reservationSources(reservationId: string): Promise<string[]> {
    return registryRead(() => selectReservationSources(this.#db, reservationId));
  }

  async board(filter: BoardFilter = {}): Promise<BoardRow[]> {
    return registryRead(() => selectBoard(this.#db, filter.batchId ?? null, filter.claimId ?? null));
  }

  async annotate(claimId: string, fields: BoardAnnotation): Promise<void> {
    inImmediateTransaction(
      this.#db,
      () => {
        const changed = this.#db
          .prepare(
            `UPDATE board SET score = COALESCE(?, score), notes = COALESCE(?, notes), updated_at = ? WHERE run_id = ?`,
          )
          .run(fields.score ?? null, fields.notes ?? null, this.#now(), claimId);
        if (Number(changed.changes) !== 1) {
          throw new RoboguideError('E_REGISTRY', `cannot annotate: no board row for run ${claimId}`, {
            context: { claimId },
          });
        }
      },
      'annotate',
    );
  }

  async close(): Promise<void> {
    this.closeSync();
  }

  /** Closes the database now (SQLite closes synchronously; `using` relies on it). */
  closeSync(): void {
    if (this.#db.isOpen) this.#db.close();
  }

  [Symbol.dispose](): void {
    this.closeSync();
  }
}
