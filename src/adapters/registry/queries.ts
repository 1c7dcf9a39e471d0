/** Small shared reads, usable inside or outside a transaction. */
import type { DatabaseSync } from 'node:sqlite';
import type { BoardRow, HostLimits, Reservation } from '../../app/ports/capacity-registry.js';
import { integer, integerOrNull, toBoardRow, toReservation } from './rows.js';
import { RoboguideError } from '../../core/errors.js';

export function selectReservation(db: DatabaseSync, reservationId: string): Reservation | null {
  const row = db.prepare('SELECT * FROM reservations WHERE id = ?').get(reservationId);
  return row === undefined ? null : toReservation(row);
}

export function selectReservationForClaim(db: DatabaseSync, claimId: string): Reservation | null {
  const row = db.prepare('SELECT * FROM reservations WHERE claim_id = ?').get(claimId);
  return row === undefined ? null : toReservation(row);
}

export function selectBoardRow(db: DatabaseSync, runId: string): BoardRow | null {
  const row = db.prepare('SELECT * FROM board WHERE run_id = ?').get(runId);
  return row === undefined ? null : toBoardRow(row);
}

export function selectLimits(db: DatabaseSync): HostLimits {
  const row = db.prepare('SELECT max_reservations, gpu_mib FROM host_limits WHERE id = 1').get();
  if (row === undefined) throw new RoboguideError('E_REGISTRY', 'registry has no host_limits row');
  return { maxReservations: integer(row, 'max_reservations'), gpuMib: integerOrNull(row, 'gpu_mib') };
}

export interface HeldTotals {
  readonly count: number;
  readonly gpuMib: number;
}

export function selectHeldTotals(db: DatabaseSync): HeldTotals {
  const row = db
    .prepare(`SELECT COUNT(*) AS n, COALESCE(SUM(gpu_mib), 0) AS mib FROM reservations WHERE state = 'held'`)
    .get();
  if (row === undefined) return { count: 0, gpuMib: 0 };
  return { count: integer(row, 'n'), gpuMib: integer(row, 'mib') };
}
