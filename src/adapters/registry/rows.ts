/**
 * Typed reads of registry rows. node:sqlite returns loosely typed records; a column of the
 * wrong type means a damaged database, which is a fault of the tool (`E_REGISTRY`).
 */
import { RoboguideError } from '../../core/errors.js';
import type {
  BoardRow,
  BoardRowState,
  Reservation,
  ReservationState,
} from '../../app/ports/capacity-registry.js';

/** A row as node:sqlite or pg returns it. */
type Row = Record<string, unknown>;

function damaged(column: string, value: unknown): RoboguideError {
  return new RoboguideError('E_REGISTRY', `registry row has an unexpected value in column ${column}`, {
    context: { column, type: typeof value },
  });
}

export function text(row: Row, column: string): string {
  const value = row[column];
  if (typeof value !== 'string') throw damaged(column, value);
  return value;
}

export function textOrNull(row: Row, column: string): string | null {
  const value = row[column];
  if (value === null) return null;
  if (typeof value !== 'string') throw damaged(column, value);
  return value;
}

export function integer(row: Row, column: string): number {
  const value = row[column];
  if (typeof value !== 'number' || !Number.isSafeInteger(value)) throw damaged(column, value);
  return value;
}

export function integerOrNull(row: Row, column: string): number | null {
  return row[column] === null ? null : integer(row, column);
}

function oneOf<T extends string>(row: Row, column: string, allowed: readonly T[]): T {
  const value = text(row, column);
  const found = allowed.find((candidate) => candidate === value);
  if (found === undefined) throw damaged(column, value);
  return found;
}

/** `ports`: the reservation's held ports as a comma-separated list (from the query), or null for none. */
function portsOf(row: Row): number[] {
  const value = row['ports'];
  if (value === null || value === undefined || value === '') return [];
  if (typeof value !== 'string') throw damaged('ports', value);
  const ports = value.split(',').map(Number);
  if (!ports.every((p) => Number.isSafeInteger(p) && p >= 1 && p <= 65_535)) throw damaged('ports', value);
  return ports.sort((a, b) => a - b);
}

const RESERVATION_STATES: readonly ReservationState[] = ['held', 'released'];
const BOARD_STATES: readonly BoardRowState[] = ['running', 'terminal'];

export function toReservation(row: Row): Reservation {
  return {
    id: text(row, 'id'),
    batchId: text(row, 'batch_id'),
    jobId: text(row, 'job_id'),
    claimId: text(row, 'claim_id'),
    containerId: textOrNull(row, 'container_id'),
    gpuMib: integer(row, 'gpu_mib'),
    node: text(row, 'node'),
    ports: portsOf(row),
    state: oneOf(row, 'state', RESERVATION_STATES),
    createdAt: text(row, 'created_at'),
    releasedAt: textOrNull(row, 'released_at'),
    proofSha256: textOrNull(row, 'proof_sha256'),
  };
}

export function toBoardRow(row: Row): BoardRow {
  return {
    batchId: text(row, 'batch_id'),
    jobId: text(row, 'job_id'),
    claimId: text(row, 'run_id'),
    state: oneOf(row, 'state', BOARD_STATES),
    classification: textOrNull(row, 'classification'),
    outcomeSha256: textOrNull(row, 'outcome_sha256'),
    proofSha256: textOrNull(row, 'proof_sha256'),
    updatedAt: text(row, 'updated_at'),
    score: textOrNull(row, 'score'),
    notes: textOrNull(row, 'notes'),
  };
}
