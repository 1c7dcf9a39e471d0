/**
 * SPEC §8 steps 2-4, run inside the registry's `BEGIN IMMEDIATE` transaction: write the board
 * row terminal and read it back, then release the reservation and read it back. A replay of
 * the same proof changes nothing; any refusal leaves the reservation as it was.
 */
import type { DatabaseSync } from 'node:sqlite';
import { RoboguideError } from '../../core/errors.js';
import type { TerminalCommit, TerminalCommitResult } from '../../app/ports/capacity-registry.js';
import { terminalCommitRefusal, unknownReservation } from '../../core/terminal-commit-rule.js';
import { selectBoardRow, selectReservation } from './queries.js';

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
  if (reservation === null) return unknownReservation(commit);
  const board = selectBoardRow(db, commit.claimId);
  const refused = terminalCommitRefusal(commit, reservation, board);
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
