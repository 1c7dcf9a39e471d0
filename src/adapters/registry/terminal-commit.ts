/**
 * SPEC §8 steps 2-4, run inside the registry's `BEGIN IMMEDIATE` transaction: write the board
 * row terminal and read it back, then release the reservation and read it back. A replay of
 * the same proof changes nothing; any refusal leaves the reservation as it was.
 */
import type { DatabaseSync } from 'node:sqlite';
import { RoboguideError } from '../../core/errors.js';
import type { TerminalCommit, TerminalCommitResult } from '../../app/ports/capacity-registry.js';
import {
  boardReadBackExact,
  releaseReadBackExact,
  terminalCommitRefusal,
  terminalCommitSteps,
  unknownReservation,
} from '../../core/terminal-commit-rule.js';
import { selectBoardRow, selectReservation } from './queries.js';

export function readBackFailed(what: string, context: Record<string, unknown>): RoboguideError {
  return new RoboguideError('E_REGISTRY', `${what} did not read back as written`, { context });
}

/** The values of the board's terminal write, in the order of both registries' statement. */
export function boardTerminalValues(
  commit: TerminalCommit,
  nowIso: string,
): [string, string, string, string, string | null, string, string] {
  return [
    commit.claimId,
    commit.batchId,
    commit.jobId,
    commit.classification,
    commit.outcomeSha256,
    commit.proofSha256,
    nowIso,
  ];
}

function writeBoardTerminal(db: DatabaseSync, commit: TerminalCommit, nowIso: string): void {
  db.prepare(
    `INSERT INTO board (run_id, batch_id, job_id, state, classification, outcome_sha256, proof_sha256, updated_at)
     VALUES (?, ?, ?, 'terminal', ?, ?, ?, ?)
     ON CONFLICT (run_id) DO UPDATE SET state = 'terminal', classification = excluded.classification,
       outcome_sha256 = excluded.outcome_sha256, proof_sha256 = excluded.proof_sha256, updated_at = excluded.updated_at`,
  ).run(...boardTerminalValues(commit, nowIso));
  if (!boardReadBackExact(commit, selectBoardRow(db, commit.claimId)))
    throw readBackFailed('board row', { claimId: commit.claimId });
}

function releaseWithProof(db: DatabaseSync, commit: TerminalCommit, nowIso: string): void {
  const changed = db
    .prepare(
      `UPDATE reservations SET state = 'released', released_at = ?, proof_sha256 = ?
       WHERE id = ? AND claim_id = ? AND state = 'held'`,
    )
    .run(nowIso, commit.proofSha256, commit.reservationId, commit.claimId);
  if (!releaseReadBackExact(commit, Number(changed.changes), selectReservation(db, commit.reservationId)))
    throw readBackFailed('reservation release', { reservationId: commit.reservationId });
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
  const plan = terminalCommitSteps(reservation, board);
  if (plan.writeBoard) writeBoardTerminal(db, commit, nowIso);
  if (plan.release) releaseWithProof(db, commit, nowIso);
  return plan.result;
}
