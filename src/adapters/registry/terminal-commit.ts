/**
 * SPEC §8 steps 2-4, run inside the registry's `BEGIN IMMEDIATE` transaction: write the board
 * row terminal and read it back, then release the reservation and read it back. A replay of
 * the same proof changes nothing; any refusal leaves the reservation as it was.
 */
import type { DatabaseSync } from 'node:sqlite';
import { RoboguideError } from '../../core/errors.js';
import type {
  BoardRow,
  Reservation,
  TerminalCommit,
  TerminalCommitRefusal,
  TerminalCommitResult,
} from '../../app/ports/capacity-registry.js';
import { selectBoardRow, selectReservation } from './queries.js';

export function refuse(reason: TerminalCommitRefusal, detail: string): TerminalCommitResult {
  return { kind: 'refused', reason, detail };
}

/** Checks ownership and proof; returns a refusal, or null when the commit may proceed. */
export function refusal(
  commit: TerminalCommit,
  reservation: Reservation,
  board: BoardRow | null,
): TerminalCommitResult | null {
  if (board !== null && board.batchId !== commit.batchId) {
    return refuse(
      'run_owned_by_other_batch',
      `run ${commit.claimId} is on the board under batch ${board.batchId}`,
    );
  }
  if (reservation.batchId !== commit.batchId) {
    return refuse(
      'run_owned_by_other_batch',
      `reservation ${reservation.id} belongs to batch ${reservation.batchId}`,
    );
  }
  if (reservation.claimId !== commit.claimId || reservation.jobId !== commit.jobId) {
    return refuse(
      'reservation_not_held_by_claim',
      `reservation ${reservation.id} is held by claim ${reservation.claimId} (job ${reservation.jobId})`,
    );
  }
  if (board?.state === 'terminal' && board.proofSha256 !== commit.proofSha256) {
    return refuse(
      'proof_mismatch',
      `run ${commit.claimId} is terminal with proof ${board.proofSha256 ?? 'none'}`,
    );
  }
  if (reservation.state === 'released' && board?.state !== 'terminal') {
    return refuse(
      'reservation_not_held_by_claim',
      `reservation ${reservation.id} was released without a terminal proof`,
    );
  }
  if (reservation.proofSha256 !== null && reservation.proofSha256 !== commit.proofSha256) {
    return refuse(
      'proof_mismatch',
      `reservation ${reservation.id} was released by proof ${reservation.proofSha256}`,
    );
  }
  return null;
}

export function readBackFailed(what: string, context: Record<string, unknown>): RoboguideError {
  return new RoboguideError('E_REGISTRY', `${what} did not read back as written`, { context });
}

function writeBoardTerminal(db: DatabaseSync, commit: TerminalCommit, nowIso: string): void {
  db.prepare(
    `INSERT INTO board (run_id, batch_id, job_id, state, classification, outcome_sha256, proof_sha256, updated_at)
     VALUES (?, ?, ?, 'terminal', ?, ?, ?, ?)
     ON CONFLICT (run_id) DO UPDATE SET state = 'terminal', classification = excluded.classification,
       outcome_sha256 = excluded.outcome_sha256, proof_sha256 = excluded.proof_sha256, updated_at = excluded.updated_at`,
  ).run(
    commit.claimId,
    commit.batchId,
    commit.jobId,
    commit.classification,
    commit.outcomeSha256,
    commit.proofSha256,
    nowIso,
  );
  const back = selectBoardRow(db, commit.claimId);
  const exact =
    back?.state === 'terminal' &&
    back.batchId === commit.batchId &&
    back.classification === commit.classification &&
    back.outcomeSha256 === commit.outcomeSha256 &&
    back.proofSha256 === commit.proofSha256;
  if (!exact) throw readBackFailed('board row', { claimId: commit.claimId });
}

function releaseWithProof(db: DatabaseSync, commit: TerminalCommit, nowIso: string): void {
  const changed = db
    .prepare(
      `UPDATE reservations SET state = 'released', released_at = ?, proof_sha256 = ?
       WHERE id = ? AND claim_id = ? AND state = 'held'`,
    )
    .run(nowIso, commit.proofSha256, commit.reservationId, commit.claimId);
  const back = selectReservation(db, commit.reservationId);
  if (
    Number(changed.changes) !== 1 ||
    back?.state !== 'released' ||
    back.proofSha256 !== commit.proofSha256
  ) {
    throw readBackFailed('reservation release', { reservationId: commit.reservationId });
  }
}

export function commitTerminalIn(
  db: DatabaseSync,
  commit: TerminalCommit,
  nowIso: string,
): TerminalCommitResult {
  const reservation = selectReservation(db, commit.reservationId);
  if (reservation === null) return refuse('unknown_reservation', `no reservation ${commit.reservationId}`);
  const board = selectBoardRow(db, commit.claimId);
  const refused = refusal(commit, reservation, board);
  if (refused !== null) return refused;
  const steps: string[] = [];
  if (board?.state === 'terminal') {
    steps.push('board_already_terminal');
  } else {
    writeBoardTerminal(db, commit, nowIso);
    steps.push('board_written_terminal', 'board_read_back');
  }
  if (reservation.state === 'released') {
    steps.push('reservation_already_released');
    return { kind: 'already_committed', steps };
  }
  releaseWithProof(db, commit, nowIso);
  steps.push('reservation_released', 'reservation_read_back');
  return { kind: 'committed', steps };
}
