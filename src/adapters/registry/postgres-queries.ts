/** The PostgreSQL registry's reads and its terminal commit, usable inside or outside a transaction. */
import type pg from 'pg';
import type { PoolClient } from 'pg';
import { RoboguideError } from '../../core/errors.js';
import type {
  BoardRow,
  HostLimits,
  PortHolder,
  Reservation,
  TerminalCommit,
  TerminalCommitResult,
} from '../../app/ports/capacity-registry.js';
import { integer, integerOrNull, toBoardRow, toReservation } from './rows.js';
import {
  boardReadBackExact,
  releaseReadBackExact,
  terminalCommitRefusal,
  terminalCommitSteps,
  unknownReservation,
} from '../../core/terminal-commit-rule.js';
import { boardTerminalValues, readBackFailed } from './terminal-commit.js';

/** A reservation's columns and its held ports (comma-separated, ascending). */
export const RESERVATION_COLUMNS = `r.*, (SELECT string_agg(p.port::text, ',' ORDER BY p.port) FROM reserved_ports p WHERE p.reservation_id = r.id) AS ports`;

export type Queryable = Pick<pg.Pool, 'query'> | PoolClient;

export async function selectLimits(db: Queryable, node: string | undefined): Promise<HostLimits> {
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

export async function selectReservation(
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

export async function selectReservationForClaim(db: Queryable, claimId: string): Promise<Reservation | null> {
  const rows = await db.query(`SELECT ${RESERVATION_COLUMNS} FROM reservations r WHERE r.claim_id = $1`, [
    claimId,
  ]);
  const row = rows.rows[0] as Record<string, unknown> | undefined;
  return row === undefined ? null : toReservation(row);
}

export async function selectBoardRow(db: Queryable, claimId: string): Promise<BoardRow | null> {
  const rows = await db.query('SELECT * FROM board WHERE run_id = $1 FOR UPDATE', [claimId]);
  const row = rows.rows[0] as Record<string, unknown> | undefined;
  return row === undefined ? null : toBoardRow(row);
}

export async function selectPortHolders(
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

/** Every held reservation's writable mount sources on `node`. */
export async function selectHeldMounts(
  db: Queryable,
  node: string,
): Promise<{ source: string; batchId: string }[]> {
  const rows = await db.query(
    `SELECT m.source, r.batch_id FROM reserved_mounts m JOIN reservations r ON r.id = m.reservation_id
     WHERE r.state = 'held' AND m.node = $1 ORDER BY r.seq, m.source`,
    [node],
  );
  return rows.rows.map((row: Record<string, unknown>) => ({
    source: String(row['source']),
    batchId: String(row['batch_id']),
  }));
}

/** The node's held reservations: how many, and the GPU MiB they add up to. */
export async function selectHeldTotals(
  db: Queryable,
  node: string,
): Promise<{ readonly count: number; readonly gpuMib: number }> {
  const totals = await db.query(
    `SELECT COUNT(*)::int AS n, COALESCE(SUM(gpu_mib), 0)::int AS mib FROM reservations WHERE state = 'held' AND node = $1`,
    [node],
  );
  const row = totals.rows[0] as Record<string, unknown>;
  return { count: integer(row, 'n'), gpuMib: integer(row, 'mib') };
}

/** SPEC §8 steps 2-4 with row locks on the reservation and the board row; the same rules as SQLite's. */
export async function commitTerminalPg(
  db: PoolClient,
  commit: TerminalCommit,
  nowIso: string,
): Promise<TerminalCommitResult> {
  const reservation = await selectReservation(db, commit.reservationId, true);
  if (reservation === null) return unknownReservation(commit);
  const board = await selectBoardRow(db, commit.claimId);
  const refused = terminalCommitRefusal(commit, reservation, board);
  if (refused !== null) return refused;
  const plan = terminalCommitSteps(reservation, board);
  if (plan.writeBoard) {
    await db.query(
      `INSERT INTO board (run_id, batch_id, job_id, state, classification, outcome_sha256, proof_sha256, updated_at)
       VALUES ($1, $2, $3, 'terminal', $4, $5, $6, $7)
       ON CONFLICT (run_id) DO UPDATE SET state = 'terminal', classification = excluded.classification,
         outcome_sha256 = excluded.outcome_sha256, proof_sha256 = excluded.proof_sha256, updated_at = excluded.updated_at`,
      boardTerminalValues(commit, nowIso),
    );
    if (!boardReadBackExact(commit, await selectBoardRow(db, commit.claimId)))
      throw readBackFailed('board row', { claimId: commit.claimId });
  }
  if (plan.release) {
    const changed = await db.query(
      `UPDATE reservations SET state = 'released', released_at = $1, proof_sha256 = $2 WHERE id = $3 AND claim_id = $4 AND state = 'held'`,
      [nowIso, commit.proofSha256, commit.reservationId, commit.claimId],
    );
    const back = await selectReservation(db, commit.reservationId, false);
    if (!releaseReadBackExact(commit, changed.rowCount ?? 0, back))
      throw readBackFailed('reservation release', { reservationId: commit.reservationId });
  }
  return plan.result;
}
