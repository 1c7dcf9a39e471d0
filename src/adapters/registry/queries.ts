/** Small shared reads, usable inside or outside a transaction. */
import type { DatabaseSync } from 'node:sqlite';
import type {
  BoardRow,
  HostLimits,
  PortHolder,
  Reservation,
  SupervisorLease,
} from '../../app/ports/capacity-registry.js';
import { integer, integerOrNull, text, toBoardRow, toReservation } from './rows.js';
import { RoboguideError } from '../../core/errors.js';

/** A reservation's columns and its held ports (comma-separated). */
export const RESERVATION_COLUMNS = `r.*, (SELECT group_concat(p.port, ',') FROM reserved_ports p WHERE p.reservation_id = r.id) AS ports`;

export function selectReservation(db: DatabaseSync, reservationId: string): Reservation | null {
  const row = db
    .prepare(`SELECT ${RESERVATION_COLUMNS} FROM reservations r WHERE r.id = ?`)
    .get(reservationId);
  return row === undefined ? null : toReservation(row);
}

export function selectReservationForClaim(db: DatabaseSync, claimId: string): Reservation | null {
  const row = db
    .prepare(`SELECT ${RESERVATION_COLUMNS} FROM reservations r WHERE r.claim_id = ?`)
    .get(claimId);
  return row === undefined ? null : toReservation(row);
}

export function selectBoardRow(db: DatabaseSync, claimId: string): BoardRow | null {
  const row = db.prepare('SELECT * FROM board WHERE run_id = ?').get(claimId);
  return row === undefined ? null : toBoardRow(row);
}

/** The limits that apply to `node` (its own row, else the default); the default without `node`. */
export function selectLimits(db: DatabaseSync, node?: string): HostLimits {
  if (node !== undefined) {
    const own = db.prepare('SELECT max_reservations, gpu_mib FROM node_limits WHERE node = ?').get(node);
    if (own !== undefined)
      return { maxReservations: integer(own, 'max_reservations'), gpuMib: integerOrNull(own, 'gpu_mib') };
  }
  const row = db.prepare('SELECT max_reservations, gpu_mib FROM host_limits WHERE id = 1').get();
  if (row === undefined) throw new RoboguideError('E_REGISTRY', 'registry has no host_limits row');
  return { maxReservations: integer(row, 'max_reservations'), gpuMib: integerOrNull(row, 'gpu_mib') };
}

export interface HeldTotals {
  readonly count: number;
  readonly gpuMib: number;
}

export function selectHeldTotals(db: DatabaseSync, node: string): HeldTotals {
  const row = db
    .prepare(
      `SELECT COUNT(*) AS n, COALESCE(SUM(gpu_mib), 0) AS mib FROM reservations WHERE state = 'held' AND node = ?`,
    )
    .get(node);
  if (row === undefined) return { count: 0, gpuMib: 0 };
  return { count: integer(row, 'n'), gpuMib: integer(row, 'mib') };
}

export function selectPortHolders(db: DatabaseSync, node: string, ports: readonly number[]): PortHolder[] {
  const holders: PortHolder[] = [];
  const query = db.prepare(
    `SELECT p.node, p.port, r.batch_id, r.job_id, r.id FROM reserved_ports p JOIN reservations r ON r.id = p.reservation_id
     WHERE r.state = 'held' AND p.node = ? AND p.port = ? ORDER BY r.rowid`,
  );
  for (const port of [...new Set(ports)].sort((a, b) => a - b)) {
    for (const row of query.all(node, port)) {
      holders.push({
        node: text(row, 'node'),
        port: integer(row, 'port'),
        batchId: text(row, 'batch_id'),
        jobId: text(row, 'job_id'),
        reservationId: text(row, 'id'),
      });
    }
  }
  return holders;
}

/** Every held reservation's writable mount sources on `node`. */
export function selectHeldMounts(db: DatabaseSync, node: string): { source: string; batchId: string }[] {
  return db
    .prepare(
      `SELECT m.source, r.batch_id FROM reserved_mounts m JOIN reservations r ON r.id = m.reservation_id
       WHERE r.state = 'held' AND m.node = ? ORDER BY r.rowid, m.source`,
    )
    .all(node)
    .map((row) => ({ source: text(row, 'source'), batchId: text(row, 'batch_id') }));
}

/** A batch's recorded supervisor lease, if any. */
export function selectLease(db: DatabaseSync, batchId: string): SupervisorLease | null {
  const row = db
    .prepare('SELECT pid, start_ticks, boot_id FROM supervisor_leases WHERE batch_id = ?')
    .get(batchId);
  if (row === undefined) return null;
  return {
    pid: Number(row['pid']),
    start_ticks: row['start_ticks'] === null ? null : String(row['start_ticks']),
    boot_id: row['boot_id'] === null ? null : String(row['boot_id']),
  };
}

/** Held reservations (of one batch, or all), oldest first. */
export function selectHeld(db: DatabaseSync, batchId: string | null): Reservation[] {
  return db
    .prepare(
      `SELECT ${RESERVATION_COLUMNS} FROM reservations r WHERE r.state = 'held' AND (?1 IS NULL OR r.batch_id = ?1) ORDER BY r.rowid`,
    )
    .all(batchId)
    .map(toReservation);
}

/** Board rows of one batch and/or one run (null: any), in insertion order. */
export function selectBoard(db: DatabaseSync, batchId: string | null, claimId: string | null): BoardRow[] {
  return db
    .prepare(
      `SELECT * FROM board WHERE (?1 IS NULL OR batch_id = ?1) AND (?2 IS NULL OR run_id = ?2) ORDER BY rowid`,
    )
    .all(batchId, claimId)
    .map(toBoardRow);
}

/** The folders a reservation records, ascending (its evidence folder with a trailing `/`). */
export function selectReservationSources(db: DatabaseSync, reservationId: string): string[] {
  return db
    .prepare('SELECT source FROM reserved_mounts WHERE reservation_id = ? ORDER BY source')
    .all(reservationId)
    .map((row) => text(row, 'source'));
}
